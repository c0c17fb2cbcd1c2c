"""The one log line per tool call, timed over the whole call.

`ResilientServer.call_tool` (its pipeline, `calls.tool_call`) knows how a call ended, but the
SDK works on both sides of it: it validates the request's arguments before, and shapes the
answer for the wire after (for a large answer, most of the time). A server middleware, the
SDK's public chain around every request, opens the clock before that validation and writes
the line once the answer is built; `call_tool` only leaves the line's fields for it. Called
without the chain (directly, in a test), `call_tool` writes the line itself.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from resilient_mcp.telemetry.logs import log_call


class PendingLine:
    """The fields of a call's line, left by `call_tool` for the middleware to write."""

    __slots__ = ("fields", "started")

    def __init__(self, started: float) -> None:
        self.started = started
        self.fields: tuple[str, str, str, str | None, int, str | None] | None = None


_PENDING: ContextVar[PendingLine | None] = ContextVar("pending_call_line", default=None)


def write_call_line(
    started: float,
    tool: str,
    correlation_id: str,
    outcome: str,
    category: str | None,
    attempts: int,
    subject: str | None,
) -> None:
    """Leave the line to the middleware timing this request, or write it now (`started` on)."""
    pending = _PENDING.get()
    if pending is None:
        log_call(tool, correlation_id, outcome, category, _ms_since(started), attempts, subject)
    else:
        pending.fields = (tool, correlation_id, outcome, category, attempts, subject)


async def time_tool_calls(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: a `tools/call` request's line, from its validation to its built answer."""
    if ctx.method != "tools/call":
        return await call_next(ctx)
    pending = PendingLine(time.perf_counter())
    token = _PENDING.set(pending)
    try:
        return await call_next(ctx)
    finally:
        _PENDING.reset(token)
        if pending.fields is not None:  # None: refused before call_tool (malformed params)
            tool, correlation_id, outcome, category, attempts, subject = pending.fields
            log_call(tool, correlation_id, outcome, category, _ms_since(pending.started), attempts, subject)


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
