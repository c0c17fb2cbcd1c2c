"""resilient-mcp: MCP servers on the official SDK that do not fail quietly.

The public API is the names below (`from resilient_mcp import tool, ...`; a generated project
re-exports them from `<package>.core`) and the settings of `CoreSettings`; they follow semver,
and tests/test_public_api.py pins them. Every other module is internal and may change in any
release. The rooms, lowest first: `records` (immutable records), `project` (who is served),
`sdk_fence` (every private name of the SDK), `telemetry` (logs, redaction, traces, metrics),
`authoring` (what tool authors write with), `store` (the idempotency table), `calls` (one call,
top to bottom), `tasks` and `skills` (the extensions), `server` (assembly, settings, start-up,
health), `stdio` and `http` (the transports) and `commands` (the `<slug>` command and its
subcommands).

The names load on first use, so `diagnose` and `--help` run without importing the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from resilient_mcp.authoring.checks import Check
    from resilient_mcp.authoring.current_settings import current_settings
    from resilient_mcp.authoring.errors import (
        FatalError,
        Part,
        PartialResult,
        ServerError,
        TerminalError,
        ToolInputError,
        TransientError,
    )
    from resilient_mcp.authoring.primitives import completion, prompt, resource
    from resilient_mcp.authoring.resources import dependency, lifespan, shared
    from resilient_mcp.authoring.settings import CoreSettings
    from resilient_mcp.authoring.tool import Reconciled, tool
    from resilient_mcp.calls.running import cancelled
    from resilient_mcp.project import Project
    from resilient_mcp.server.resilient_server import ResilientServer

_WHERE = {
    "Check": "resilient_mcp.authoring.checks",
    "Context": "mcp.server.mcpserver",
    "CoreSettings": "resilient_mcp.authoring.settings",
    "FatalError": "resilient_mcp.authoring.errors",
    "Part": "resilient_mcp.authoring.errors",
    "PartialResult": "resilient_mcp.authoring.errors",
    "Project": "resilient_mcp.project",
    "Reconciled": "resilient_mcp.authoring.tool",
    "ResilientServer": "resilient_mcp.server.resilient_server",
    "ServerError": "resilient_mcp.authoring.errors",
    "TerminalError": "resilient_mcp.authoring.errors",
    "ToolInputError": "resilient_mcp.authoring.errors",
    "TransientError": "resilient_mcp.authoring.errors",
    "cancelled": "resilient_mcp.calls.running",
    "completion": "resilient_mcp.authoring.primitives",
    "current_settings": "resilient_mcp.authoring.current_settings",
    "dependency": "resilient_mcp.authoring.resources",
    "lifespan": "resilient_mcp.authoring.resources",
    "prompt": "resilient_mcp.authoring.primitives",
    "resource": "resilient_mcp.authoring.primitives",
    "shared": "resilient_mcp.authoring.resources",
    "tool": "resilient_mcp.authoring.tool",
}

__all__ = [
    "Check",
    "Context",
    "CoreSettings",
    "FatalError",
    "Part",
    "PartialResult",
    "Project",
    "Reconciled",
    "ResilientServer",
    "ServerError",
    "TerminalError",
    "ToolInputError",
    "TransientError",
    "cancelled",
    "completion",
    "current_settings",
    "dependency",
    "lifespan",
    "prompt",
    "resource",
    "shared",
    "tool",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'resilient_mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
