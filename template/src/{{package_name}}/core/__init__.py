# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The public API for tool authors: `from <package>.core import tool, ToolInputError, ...`."""

from .errors import FatalError, ServerError, TerminalError, ToolInputError, TransientError
from .outcomes import Part, PartialResult
from .running import cancelled
from .tool import Reconciled, tool

__all__ = [
    "FatalError",
    "Part",
    "PartialResult",
    "Reconciled",
    "ServerError",
    "TerminalError",
    "ToolInputError",
    "TransientError",
    "cancelled",
    "tool",
]
