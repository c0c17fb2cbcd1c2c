# Template-owned: `copier update` replaces this file.
"""Checks for this server: `nox` runs lint, typecheck and tests."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "typecheck", "tests"]


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
