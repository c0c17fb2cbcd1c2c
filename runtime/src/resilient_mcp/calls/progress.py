"""Heartbeat progress: a long call that asked for progress hears from the server while it runs.

Clients and proxies close a request that stays silent too long. When a call carries a
`progressToken`, the core sends `notifications/progress` every PROGRESS_INTERVAL_S in
which the tool itself sent none.

The spec says a token's `progress` MUST increase with each notification, so every value sent,
the tool's own and the heartbeats', goes through one rule: never past the tool's `total`, and
above the last value sent. A heartbeat adds a millionth of the value (at least 1e-6), at most
half the way to the total: invisible in a progress bar, so the tool's next real step still reads
as a step. A tool's own report that would not increase (a repeat, a step back) is sent just
above the last value instead, so its message still arrives; with no room left below the total
(the tool reported its total already), nothing is sent.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import PrivateAttr

from resilient_mcp.sdk_fence import context_input_params, context_subscriptions, request_context_of
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)
# Every notification echoes the token: a counter or an id fits, a megabyte sent back each interval does not.
MAX_PROGRESS_TOKEN_BYTES = 256
_STEP = 1e-6  # a heartbeat's step, relative to the value (at least this much)


def next_progress(last: float, total: float | None) -> float | None:
    """The value a heartbeat sends after `last`: above it and below `total`; None when there is no room."""
    step = _STEP * max(1.0, abs(last))
    if total is not None:
        step = min(step, (total - last) / 2)
    value = last + step
    if value <= last or (total is not None and value >= total):  # float precision, or at the total
        return None
    return value


class _TrackedContext(Context[Any, Any]):
    """The SDK's Context for one call: its progress values strictly increase, heartbeats included."""

    _sent: float | None = None  # the last progress value sent for this token
    _total: float | None = None
    _last_sent: float = -math.inf
    _sending: anyio.Lock = PrivateAttr(default_factory=anyio.Lock)  # one value decided and sent at a time

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        async with self._sending:
            if total is not None:
                progress = min(progress, total)
            if self._sent is not None and progress <= self._sent:
                bumped = next_progress(self._sent, total)
                if bumped is None:
                    return  # at the total already: a value above it would break the spec
                progress = bumped
            await self._send(progress, total, message)

    async def _heartbeat(self, message: str) -> bool:
        """Send the next heartbeat value; False when there is no room below the total."""
        async with self._sending:
            progress = 0.0 if self._sent is None else next_progress(self._sent, self._total)
            if progress is None:
                return False
            await self._send(progress, self._total, message)
            return True

    async def _send(self, progress: float, total: float | None, message: str | None) -> None:
        self._sent, self._total, self._last_sent = progress, total, anyio.current_time()
        await super().report_progress(progress, total, message)

    async def beat(self, interval_s: float) -> None:
        """Send progress whenever `interval_s` passed without any; until cancelled."""
        started = self._last_sent = anyio.current_time()
        while True:
            await anyio.sleep(max(0.0, self._last_sent + interval_s - anyio.current_time()))
            now = anyio.current_time()
            if now - self._last_sent < interval_s:
                continue  # the tool sent progress meanwhile: wait a full interval from there
            try:
                sent = await self._heartbeat(f"still running after {now - started:.0f} s")
            except Exception:  # the client went away: the call ends on its own
                log.debug("progress_heartbeat_failed", exc_info=True)
                return
            if not sent:  # the tool reported its total: nothing may follow, look again later
                await anyio.sleep(interval_s)


def progress_requested(context: Context[Any, Any] | None) -> bool:
    """Whether the call carries a progressToken (`_meta.progressToken`); asked on every call.

    `Context.request_context` costs more than the rest of the seam's checks together: it is read
    the cheap way (`request_context_of`).
    """
    return context is not None and _progress_token(context) is not None


def _progress_token(context: Context[Any, Any]) -> Any:
    """The call's `_meta.progressToken`, or None."""
    request_context = request_context_of(context)
    if request_context is None:  # a Context built outside a request (MCPServer.call_tool called directly)
        return None
    meta = request_context.meta
    return meta.get("progress_token") if meta is not None else None


def oversized_progress_token(context: Context[Any, Any]) -> str | None:
    """What is wrong with a call's progressToken too long to echo, or None; asked only of a
    call that carries one (`progress_requested`)."""
    token = _progress_token(context)
    try:
        size = len(json.dumps(token, ensure_ascii=False).encode())
    except ValueError:  # an integer too long for Python to print
        size = MAX_PROGRESS_TOKEN_BYTES + 1
    if size <= MAX_PROGRESS_TOKEN_BYTES:
        return None
    return (
        f"the progressToken in _meta is {size} bytes of JSON, over the limit of {MAX_PROGRESS_TOKEN_BYTES}; "
        "nothing was run. Send a short token (a counter or an id), or none"
    )


@contextlib.asynccontextmanager
async def heartbeat(context: Context[Any, Any], interval_s: float) -> AsyncIterator[Context[Any, Any]]:
    """Heartbeat progress while the block runs, for a call that asked for progress; yields the
    Context to hand the tool, so that its own values keep to the same rule.

    The caller checks `progress_requested` first, so the common call pays for neither.
    """
    tracked = _TrackedContext(
        request_context=context.request_context,
        mcp_server=context.mcp_server,
        input_params=context_input_params(context),
        subscriptions=context_subscriptions(context),
    )
    failure: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(tracked.beat, interval_s)
        try:
            yield tracked
        except Exception as exc:  # raised below, not wrapped in the task group's ExceptionGroup
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
