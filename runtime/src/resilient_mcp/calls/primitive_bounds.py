"""The limits a resource read, prompt get or completion runs within, and where it is counted.

Every primitive is bounded alike: a read, a get or a completion takes a share of the same
limits as a tool call (`_rate_limits.CallLimits`: the caller's `RATE_LIMIT` bucket, the
process-wide `MAX_CONCURRENT_CALLS`) and runs within `TOOL_TIMEOUT_S` (on a `calls.time_limit`
timer), so a client cannot get around a tool's bounds by reading instead. Two stages around
`_primitive_calls.answered`, which turns a failure into the JSON-RPC error:

- `within(method, run)` is what `answered` runs: refused at once when over a limit (nothing
  runs), stopped at the time limit; either raises `LimitRefusal`, whose failure (`rate_limited`
  with its `retry_after_s`, or `timeout`) `answered` sends with a correlation id.
- `counted(method, answer)` counts the answer where a tool call's is counted: health_check's
  calls, errors by category and calls in flight (`CallStats`), and the telemetry's counters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, get_args

from mcp.shared.exceptions import MCPError

from resilient_mcp.authoring.outcomes import Category, Failure
from resilient_mcp.calls.callers import caller
from resilient_mcp.calls.rate_limits import CallLimits
from resilient_mcp.calls.stats import CallStats
from resilient_mcp.calls.time_limit import TimeLimits, time_limits

T = TypeVar("T")
_CATEGORIES = frozenset(get_args(Category))
# What a refusal names: the client knows which request it sent, not what the server calls it.
_WHAT = {
    "resources/read": "the resource read",
    "prompts/get": "the prompt",
    "completion/complete": "the completion",
    "skills/list": "the skills listing",
    "skills/get": "the skill",
    "resources/directory/read": "the directory read",
}
# The methods bounded like a tool call that name no tool: only the server-wide limits apply.
BOUNDED_METHODS = frozenset(_WHAT)


class LimitRefusal(Exception):
    """A read, get or completion that a limit refused or stopped; `answered` sends `failure`."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class PrimitiveTelemetry(Protocol):
    """What an answered primitive tells the telemetry (`_telemetry.Telemetry`), when it is configured."""

    def primitive_call(self, method: str, category: str) -> None: ...


class PrimitiveBounds:
    """One server's limits and counters, as the resource reads, prompt gets and completions meet them.

    `telemetry` is set when a transport is served.
    """

    def __init__(self, *, limits: CallLimits, stats: CallStats, timeout_s: float) -> None:
        self.limits = limits
        self.stats = stats
        self.timeout_s = timeout_s  # TOOL_TIMEOUT_S: the primitives declare no time limit of their own
        self.telemetry: PrimitiveTelemetry | None = None
        self._time_limits: TimeLimits | None = None  # the serving loop's, made on the first request

    def within(self, method: str, run: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """`run` as `answered` runs it: within the caller's share of the limits and the time limit."""

        async def bounded() -> T:
            over = self.limits.enter(None, caller())
            if over is not None:
                raise LimitRefusal(
                    Failure.refusal("rate_limited", over.message, retry_after_s=over.retry_after_s)
                )
            limits = self._time_limits = time_limits(self._time_limits)
            deadline = limits.start(self.timeout_s)
            try:
                return await run()
            except asyncio.CancelledError as exc:
                if not deadline.caused(exc):
                    raise  # the client's cancellation, or the server stopping
                what = _WHAT.get(method, method)
                raise LimitRefusal(
                    Failure.refusal(
                        "timeout",
                        f"{what} did not finish within {self.timeout_s:g} s (TOOL_TIMEOUT_S) and was "
                        "stopped; retry later, or ask for less if you can",
                    )
                ) from None
            finally:
                limits.stop(deadline)
                self.limits.leave(None)

        return bounded

    async def counted(self, method: str, answer: Awaitable[T]) -> T:
        """`answered`'s answer, counted as a tool call's is: in flight while it runs, then by category."""
        stats = self.stats
        stats.in_flight += 1
        category = "ok"
        try:
            return await answer
        except MCPError as exc:
            category = _category(exc)
            raise
        except BaseException:
            category = "cancelled"  # the client's cancellation or the server stopping: no answer to count
            raise
        finally:
            stats.in_flight -= 1
            stats.calls += 1
            if category in _CATEGORIES:
                stats.errors[category] += 1
            if self.telemetry is not None and category != "cancelled":
                self.telemetry.primitive_call(method, category)


def _category(exc: MCPError) -> str:
    """The category `answered` put in the error's data; protocol_error for any other MCPError
    (the owner's own, or the SDK's), as a tool call's is counted."""
    data = exc.error.data
    category = data.get("category") if isinstance(data, dict) else None
    return category if isinstance(category, str) and category in _CATEGORIES else "protocol_error"
