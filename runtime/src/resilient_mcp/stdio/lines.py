"""Every line on stdin gets an answer: the ones the SDK's stdio loop would drop are answered here.

mcp 2.3's stdio transport skips a line that is not a valid JSON-RPC message without a
word, so a client waiting on that request id hangs until its own timeout. Such a line
is answered here instead: -32700 when it is not JSON, -32600 when it is JSON but not a
valid message, with the request's id when one can be read (null otherwise). Valid lines
pass on to the SDK unchanged. A line past `MAX_LINE_BYTES` is answered (-32600, id null)
as soon as it passes the limit, and the rest of it is dropped as it comes, never held.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from mcp.types import JSONRPCMessage, JSONRPCNotification, jsonrpc_message_adapter

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_INVALID_REQUEST_MESSAGE = "Invalid request: not a JSON-RPC 2.0 message MCP accepts"
# The longest stdin line kept (bytes, newline aside): a longer one is refused and dropped as it
# comes. Above HTTP's default MAX_REQUEST_BYTES (4 MB), so a request HTTP takes fits here too.
MAX_LINE_BYTES = 8 * 1024 * 1024
_DROP_CHARS = 256 * 1024  # read at a time while the rest of a line too long is dropped
_TOO_LONG = "\n(too long)\n"  # stands for a dropped line: no real line holds a newline inside


def read_line(line: str) -> tuple[JSONRPCMessage | None, str | None]:
    """The message in `line` for the SDK, or the JSON-RPC error line answering it (both None: blank).

    The line is validated once, as the SDK's own loop does.
    """
    if not line.strip():
        return None, None
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:  # ValidationError, or a parser's recursion limit on deep nesting
        pass
    else:
        # The SDK reads a request whose id is neither string nor integer as a notification.
        if not isinstance(message, JSONRPCNotification) or '"id"' not in line:
            return message, None
    try:
        parsed: Any = json.loads(line)
    except (ValueError, RecursionError):
        return None, _error(None, PARSE_ERROR, "Parse error: the line is not JSON")
    request_id = parsed.get("id") if isinstance(parsed, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return None, _error(request_id, INVALID_REQUEST, _INVALID_REQUEST_MESSAGE)


def line_too_long() -> str:
    """The JSON-RPC error line answering a line past `MAX_LINE_BYTES` (its id was never read)."""
    return _error(None, INVALID_REQUEST, f"Invalid request: a line over {MAX_LINE_BYTES} bytes, dropped")


def rejection(line: str) -> str | None:
    """The JSON-RPC error line answering `line`, or None when the SDK can use it (or it is blank)."""
    return read_line(line)[1]


def _error(request_id: str | int | None, code: int, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


class AnsweringLines:
    """stdin lines for the SDK's stdio loop; those it cannot use are answered on the wire here."""

    def __init__(
        self,
        lines: anyio.AsyncFile[str],
        wire: anyio.AsyncFile[str],
        end_of_input: Callable[[], Awaitable[None]],
    ) -> None:
        self._lines = lines
        self._wire = wire
        self._end_of_input = end_of_input
        self._dropping = False  # within a line too long, until its newline

    async def __aiter__(self) -> AsyncIterator[str]:
        while line := await self._readline():
            message, answer = (None, line_too_long()) if line is _TOO_LONG else read_line(line)
            if answer is not None:
                await self._wire.write(answer + "\n")
                await self._wire.flush()
            elif message is not None:  # a blank line is neither passed on nor answered
                yield line
        await self._end_of_input()

    async def _readline(self) -> str:
        """The next line ("" at the end), or `_TOO_LONG` for one past the limit: refused at once,
        its rest dropped before the next line is read.

        Read in characters here, so a line kept holds at most four bytes a character.
        """
        readline = self._lines.wrapped.readline
        if self._dropping:
            while (rest := await anyio.to_thread.run_sync(readline, _DROP_CHARS)) and not rest.endswith("\n"):
                pass
            self._dropping = False
        line = await anyio.to_thread.run_sync(readline, MAX_LINE_BYTES + 1)
        if len(line) <= MAX_LINE_BYTES or line.endswith("\n"):
            return line
        self._dropping = True
        return _TOO_LONG
