"""Which project `diagnose` belongs to, when it runs as a project's command; none when run alone."""

from __future__ import annotations

import os
import sys

from resilient_mcp.project import project_if_set


def env_prefix() -> str:
    """The project's settings prefix; empty when `diagnose` checks a server of its own choosing."""
    project = project_if_set()
    return project.env_prefix if project is not None else ""


def package() -> str:
    """The project's import name; empty when there is none."""
    project = project_if_set()
    return project.package if project is not None else ""


def default_command() -> list[str]:
    """The project's own server, as an MCP host would start it."""
    return [sys.executable, "-m", package(), "serve"]


def client_token() -> str | None:
    """The bearer token a client command sends over HTTP: `<PREFIX>DIAGNOSE_TOKEN`, else
    `<PREFIX>BEARER_TOKEN` (the server's own, when this shell started it)."""
    prefix = env_prefix()
    return os.environ.get(f"{prefix}DIAGNOSE_TOKEN") or os.environ.get(f"{prefix}BEARER_TOKEN") or None
