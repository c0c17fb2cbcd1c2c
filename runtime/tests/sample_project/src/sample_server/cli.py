"""The `<slug>` command: the runtime library's, serving this project (see `project.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from resilient_mcp.commands.cli import run

from .project import PROJECT


def main(argv: Sequence[str] | None = None) -> int:
    return run(PROJECT, argv)
