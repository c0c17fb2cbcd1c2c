"""A uv virtual environment holding the runtime library and its stand-in project, for the library's
own conformance runner and soak (runtime/conformance, runtime/benchmarks)."""

from __future__ import annotations

from pathlib import Path

from .library_wheel import RUNTIME
from .project_env import ProjectEnv, find_python, quick_start_environ, run, uv_executable

SAMPLE_PROJECT = RUNTIME / "tests" / "sample_project"
# The library's own Python floor (runtime/pyproject.toml), where pgserver has wheels.
PYTHON_VERSION = "3.11"


def create_runtime_env(venv: Path) -> ProjectEnv:
    """The library from this work tree (editable, with its PostgreSQL extra) and the stand-in project
    (package sample_server), plus what the runner and the soak need; commands run in runtime/."""
    uv = uv_executable()
    env = quick_start_environ()
    run([uv, "venv", "--quiet", "--python", find_python(PYTHON_VERSION), str(venv)], cwd=RUNTIME, env=env)
    packages = ["-e", f"{RUNTIME}[postgres]", "-e", str(SAMPLE_PROJECT), "pyyaml>=6", "pgserver>=0.1.4"]
    python = str(venv / "bin" / "python")
    run([uv, "pip", "install", "--quiet", "--python", python, *packages], cwd=RUNTIME, env=env)
    return ProjectEnv(RUNTIME, venv)
