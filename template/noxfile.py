# Template-owned: `copier update` replaces this file.
"""Checks for this server: `nox` runs lint, typecheck and tests."""

from __future__ import annotations

import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "typecheck", "tests"]

# The project's command (`[project.scripts]`), so this file needs no rendering.
PROJECT = tomllib.loads(Path(__file__).with_name("pyproject.toml").read_text(encoding="utf-8"))["project"]
COMMAND = next(iter(PROJECT["scripts"]))


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    session.install("ruff>=0.9")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, tests and this file."""
    session.install("-e", ".[dev]")
    session.run("mypy", "--strict", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, against the installed server."""
    session.install("-e", ".[dev]")
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def diagnose(session: nox.Session) -> None:
    """Start the server as an MCP host would and print the handshake report (JSON); args go to diagnose."""
    session.install("-e", ".")
    session.run(COMMAND, "diagnose", *session.posargs)


@nox.session(default=False)
def budget(session: nox.Session) -> None:
    """Print the tools/list budget table; fails when over budget or a tool has a problem."""
    session.install("-e", ".")
    session.run(COMMAND, "budget", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run every benchmarks/bench_*.py, or one with its options: `nox -s bench -- overhead --rounds 10`."""
    session.install("-e", ".[dev]")
    scripts = sorted(Path("benchmarks").glob("bench_*.py"))
    if session.posargs:
        scripts = [Path("benchmarks") / f"bench_{session.posargs[0]}.py"]
    for script in scripts:
        session.run("python", str(script), *session.posargs[1:])


@nox.session(default=False)
def soak(session: nox.Session) -> None:
    """Side-effecting calls while the server is killed at random; fails on duplicated or lost effects."""
    session.install("-e", ".[dev]")
    session.run("python", "benchmarks/soak.py", *session.posargs)
