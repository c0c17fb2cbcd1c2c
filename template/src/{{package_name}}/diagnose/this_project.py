# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Which project this copy of `diagnose` belongs to: its package and its settings prefix."""

from __future__ import annotations

import sys

PACKAGE = __name__.split(".")[0]


def _env_prefix() -> str:
    """This project's settings prefix (project.py is stdlib only); none when copied elsewhere."""
    try:
        from ..project import ENV_PREFIX
    except ImportError:
        return ""
    return ENV_PREFIX


ENV_PREFIX = _env_prefix()


def default_command() -> list[str]:
    """This project's own server, as an MCP host would start it."""
    return [sys.executable, "-m", PACKAGE, "serve"]
