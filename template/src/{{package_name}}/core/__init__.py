# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The runtime library's public API, for this project: `from <package>.core import tool, ...`.

The same names as `from resilient_mcp import ...`; importing this package also tells the library
which project it serves (`project.py`), so tests that build the server in memory need nothing else.
"""

from resilient_mcp import (
    Check,
    Context,
    CoreSettings,
    FatalError,
    Part,
    PartialResult,
    Reconciled,
    ResilientServer,
    ServerError,
    TerminalError,
    ToolInputError,
    TransientError,
    cancelled,
    completion,
    current_settings,
    dependency,
    lifespan,
    prompt,
    resource,
    shared,
    tool,
)
from resilient_mcp.project import use_project

from ..project import PROJECT

use_project(PROJECT)

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
