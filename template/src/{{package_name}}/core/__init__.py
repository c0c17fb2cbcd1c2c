# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The public API for tool authors: `from <package>.core import tool, ToolInputError, ...`."""

from .errors import FatalError, ServerError, TerminalError, ToolInputError, TransientError
from .tool import tool

__all__ = [
    "FatalError",
    "ServerError",
    "TerminalError",
    "ToolInputError",
    "TransientError",
    "tool",
]
