"""A uv virtual environment holding the runtime library and its stand-in project, for the library's
own suite (runtime/tests), conformance runner and soak (runtime/conformance, runtime/benchmarks)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .library_wheel import RUNTIME
from .project_env import ProjectEnv, find_python, quick_start_environ, run, uv_executable

SAMPLE_PROJECT = RUNTIME / "tests" / "sample_project"
# The library's own Python floor (runtime/pyproject.toml), where pgserver has wheels.
PYTHON_VERSION = "3.11"


def create_runtime_env(venv: Path, *more: str, extras: str = "postgres") -> ProjectEnv:
    """The library from this work tree (editable, with `extras`) and the stand-in project (package
    sample_server), plus what the runner and the soak need and `more`; commands run in runtime/."""
    uv = uv_executable()
    env = quick_start_environ()
    run([uv, "venv", "--quiet", "--python", find_python(PYTHON_VERSION), str(venv)], cwd=RUNTIME, env=env)
    packages = ["-e", f"{RUNTIME}[{extras}]", "-e", str(SAMPLE_PROJECT), "pyyaml>=6", "pgserver>=0.1.4"]
    packages += more
    python = str(venv / "bin" / "python")
    run([uv, "pip", "install", "--quiet", "--python", python, *packages], cwd=RUNTIME, env=env, timeout=900)
    return ProjectEnv(RUNTIME, venv)


def runtime_pyproject() -> dict[str, Any]:
    return tomllib.loads((RUNTIME / "pyproject.toml").read_text(encoding="utf-8"))


def suite_requirements() -> list[str]:
    """What the library's own suite needs beside the library and the stand-in (its test group)."""
    group: list[str] = runtime_pyproject()["dependency-groups"]["test"]
    return group


def mcp_requirement() -> str:
    """The library's requirement on the MCP SDK (`mcp>=2.3,<3`), as its pyproject.toml states it."""
    dependencies: list[str] = runtime_pyproject()["project"]["dependencies"]
    return next(requirement for requirement in dependencies if requirement.startswith("mcp"))
