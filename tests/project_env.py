"""A uv virtual environment per rendered project, to run the project's own mypy and pytest."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# A rendered project's whole suite (or its own `nox`): the postgres one took 15 min on a loaded
# 2-core machine. A limit that only stops a hang, never a slow run.
SUITE_TIMEOUT_S = 1800.0


def project_nox(envdir: Path, *sessions: str, posargs: tuple[str, ...] = ()) -> list[str]:
    """The command that runs `sessions` in a rendered project (none named: its default ones, the
    owner's loop that a bare `nox` runs), its venvs in `envdir`, with `posargs` after `--`."""
    nox = [sys.executable, "-m", "nox", "--non-interactive", "--envdir", str(envdir)]
    return [*nox, *(["-s", *sessions] if sessions else []), *(["--", *posargs] if posargs else [])]


def uv_executable() -> str:
    """The uv next to this interpreter (nox installs it there), else the one on PATH."""
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        pytest.fail("uv is not installed: `python3 -m pip install uv`")
    return found


def run(command: list[str], cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run a command; on failure or time-out the assertion shows the end of its output."""
    shown = " ".join(command)
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a time-out also ends its children
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            raise AssertionError(
                f"`{shown}` still ran after {timeout:.0f} s in {cwd}; killed it. Output:\n{output[-6000:]}"
            ) from None
    if process.returncode != 0:
        raise AssertionError(f"`{shown}` exited {process.returncode} in {cwd}:\n{output[-6000:]}")
    return output


def quick_start_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this environment) with bytecode cached: a rendered suite starts hundreds
    of server processes, and without .pyc files each one compiles the SDK again (0.7 s of CPU).

    uv compiles what it installs, nox's uv included; the project's own modules are cached on first import.
    """
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["UV_COMPILE_BYTECODE"] = "1"
    return env


def find_python(version: str) -> str:
    """An installed interpreter of `version`; the entry is skipped when there is none."""
    result = subprocess.run(
        [uv_executable(), "python", "find", "--no-python-downloads", version],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"Python {version} is not installed here (`uv python install {version}` adds it)")
    return result.stdout.strip()


@dataclass(frozen=True)
class ProjectEnv:
    """A rendered project installed with `uv pip install -e '.[dev]'` in its own venv."""

    project: Path
    venv: Path

    @classmethod
    def create(cls, project: Path, venv: Path, python_version: str) -> ProjectEnv:
        uv = uv_executable()
        env = quick_start_environ()
        run([uv, "venv", "--quiet", "--python", find_python(python_version), str(venv)], cwd=project, env=env)
        run(
            [
                uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                str(venv / "bin" / "python"),
                "-e",
                f"{project}[dev]",
            ],
            cwd=project,
            env=env,
        )
        return cls(project, venv)

    @property
    def environ(self) -> dict[str, str]:
        """This environment activated: its commands (`<slug>`, mypy, pytest) come first on PATH."""
        env = {
            key: value
            for key, value in quick_start_environ().items()
            if key not in {"PYTHONHOME", "PYTHONPATH"}
        }
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, *command: str, timeout: float = 600) -> str:
        """Run one of the environment's commands in the project folder."""
        return run(
            [str(self.venv / "bin" / command[0]), *command[1:]],
            self.project,
            env=self.environ,
            timeout=timeout,
        )
