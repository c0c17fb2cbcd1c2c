# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The public API: everything a tool author uses, `from <package>.core import tool, ...`.

Every other module of this package is private (its name starts with `_`) and may change in
any template release; tests/core/test_public_api.py pins the names below.
"""

from mcp.server.mcpserver import Context

from ._current_settings import current_settings
from ._errors import (
    FatalError,
    Part,
    PartialResult,
    ServerError,
    TerminalError,
    ToolInputError,
    TransientError,
)
from ._health import Check
from ._primitives import completion, prompt, resource
from ._resources import dependency, lifespan, shared
from ._running import cancelled
from ._server import ResilientServer
from ._settings import CoreSettings
from ._tool import Reconciled, tool

__all__ = [
    "Check",
    "Context",
    "CoreSettings",
    "FatalError",
    "Part",
    "PartialResult",
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
