"""Rate and concurrency limits on tool calls: a call over one is refused at once, never queued.

A resource read, prompt get or completion meets the same two server-wide limits (the same
bucket, the same count), as a call with no limits of its own (`spec` None).

- `RATE_LIMIT`: calls per minute per caller, a token bucket. The caller is the token's
  subject over HTTP with auth; stdio, and HTTP without auth, share one bucket.
- `@tool(rate_limit=)`: calls per minute per caller for that tool, a bucket of its own.
- `MAX_CONCURRENT_CALLS`: calls the process runs at once; `@tool(max_concurrency=)`: calls of
  that tool running at once, whoever makes them.

A bucket holds one minute's worth of calls (at least one) and refills continuously, so a
model may make its calls in a burst as long as it keeps to the rate on average; the wait
it is told is the time until one call's worth is back. `health_check` passes every limit:
it is how an operator looks at a busy server.

Everything here runs on the event loop between awaits, so a check and the take that follows
it see the same state: no locks.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.records import record

MAX_BUCKETS = 10_000  # callers (and caller-tool pairs) remembered; the least recently seen go first
BUSY_RETRY_AFTER_S = 1.0  # a call refused for concurrency: calls usually end within this
EXEMPT_TOOLS = frozenset({"health_check"})
_SERVER_WIDE = ""  # the key part of RATE_LIMIT's buckets; a tool's buckets use the tool's name


class TokenBuckets:
    """Token buckets by key, at most `max_buckets` of them, on an injectable clock.

    When the table is full the least recently used bucket goes. It has been idle longest, so
    it has refilled the most: unless callers churn faster than a bucket refills, it is full,
    and a full bucket is what a new caller gets anyway. Eviction is O(1), so a flood of new
    subjects costs each call the same.
    """

    def __init__(
        self, *, max_buckets: int = MAX_BUCKETS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_buckets = max_buckets
        self.clock = clock
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # key: (tokens, at)

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, key: Hashable, per_minute: float, now: float) -> float:
        capacity = max(1.0, per_minute)
        held = self._buckets.get(key)
        if held is None:
            return capacity
        tokens, at = held
        return min(capacity, tokens + (now - at) * per_minute / 60)

    def wait_s(self, key: Hashable, per_minute: float) -> float:
        """Seconds until the bucket holds one call (0: it does now); changes nothing."""
        tokens = self._tokens(key, per_minute, self.clock())
        return 0.0 if tokens >= 1 else (1 - tokens) * 60 / per_minute

    def take(self, key: Hashable, per_minute: float) -> None:
        """Spend one call from the bucket (the caller checked `wait_s` first)."""
        now = self.clock()
        tokens = self._tokens(key, per_minute, now) - 1
        buckets = self._buckets
        buckets[key] = (tokens, now)
        buckets.move_to_end(key)
        while len(buckets) > self.max_buckets:
            buckets.popitem(last=False)


@record
class Refusal:
    """Which limit refused a call, in words for the model, and when to try again."""

    message: str
    retry_after_s: float


def _calls(count: float) -> str:
    return f"{count:g} call" if count == 1 else f"{count:g} calls"


def _in(seconds: float) -> str:
    return f"try again in {max(1, math.ceil(seconds))} s"


class CallLimits:
    """The limits of one server, checked and taken as each call begins, released as it ends."""

    def __init__(
        self, *, rate_limit: float, max_concurrent_calls: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate_limit = rate_limit  # 0: off
        self.max_concurrent_calls = max_concurrent_calls
        self.buckets = TokenBuckets(clock=clock)
        self.running = 0
        self._running_by_tool: dict[str, int] = {}

    def refusal(self, spec: ToolSpec | None, caller: str | None) -> Refusal | None:
        """Why a call of `spec` (None: another primitive) by `caller` may not start now, or None;
        changes nothing."""
        name = spec.name if spec is not None else ""
        if name in EXEMPT_TOOLS:
            return None
        # The rates first: their waits are the longer ones, so a retry then meets neither.
        if self.rate_limit:
            wait = self.buckets.wait_s((_SERVER_WIDE, caller), self.rate_limit)
            if wait:
                return Refusal(
                    f"this caller is over the limit of {_calls(self.rate_limit)} per minute (RATE_LIMIT); "
                    f"nothing was run, {_in(wait)}",
                    wait,
                )
        if spec is not None and spec.rate_limit is not None:
            wait = self.buckets.wait_s((name, caller), spec.rate_limit)
            if wait:
                return Refusal(
                    f"this caller is over {name}'s limit of {_calls(spec.rate_limit)} per minute "
                    f"(its rate_limit); nothing was run, {_in(wait)}",
                    wait,
                )
        if self.running >= self.max_concurrent_calls:
            return Refusal(
                f"the server is already running its limit of {_calls(self.max_concurrent_calls)} at once "
                f"(MAX_CONCURRENT_CALLS); nothing was run, {_in(BUSY_RETRY_AFTER_S)}",
                BUSY_RETRY_AFTER_S,
            )
        if (
            spec is not None
            and spec.max_concurrency is not None
            and self._running_by_tool.get(name, 0) >= spec.max_concurrency
        ):
            return Refusal(
                f"{name} is already running its limit of {_calls(spec.max_concurrency)} at once "
                f"(its max_concurrency); nothing was run, {_in(BUSY_RETRY_AFTER_S)}",
                BUSY_RETRY_AFTER_S,
            )
        return None

    def enter(self, spec: ToolSpec | None, caller: str | None) -> Refusal | None:
        """Start a call: its refusal, or None once the call holds its share (then `leave` it)."""
        refused = self.refusal(spec, caller)
        if refused is not None or (spec is not None and spec.name in EXEMPT_TOOLS):
            return refused
        if self.rate_limit:
            self.buckets.take((_SERVER_WIDE, caller), self.rate_limit)
        self.running += 1
        if spec is None:
            return None
        if spec.rate_limit is not None:
            self.buckets.take((spec.name, caller), spec.rate_limit)
        if spec.max_concurrency is not None:
            self._running_by_tool[spec.name] = self._running_by_tool.get(spec.name, 0) + 1
        return None

    def leave(self, spec: ToolSpec | None) -> None:
        """A call that `enter` let in has ended."""
        if spec is None:
            self.running -= 1
            return
        if spec.name in EXEMPT_TOOLS:
            return
        self.running -= 1
        if spec.max_concurrency is not None:
            left = self._running_by_tool[spec.name] - 1
            if left:
                self._running_by_tool[spec.name] = left
            else:
                del self._running_by_tool[spec.name]
