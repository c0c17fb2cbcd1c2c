"""A tool body while it runs: whether it started, whether it was told to stop, threads left behind.

The idempotency table needs to know whether a side-effecting call ever reached its tool
body (a call that never did can safely run again), and a sync tool running in a worker
thread cannot be cancelled: past its time limit the thread is abandoned and goes on
until it returns. `cancelled()` lets such a tool notice and stop early; the abandoned
threads are counted (health_check shows them) and bounded.

Everything a call carries through its tasks and threads (its correlation id and tool
name for log lines, the body of the attempt running now) lives in one `Call` object in
one context variable (telemetry.call_context): one lookup and one set per call, however
many layers read it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from contextvars import Token
from dataclasses import dataclass
from typing import Any, cast

from resilient_mcp.telemetry.call_context import Call, current_call, enter_call, leave_call

MAX_ABANDONED_THREADS = 16  # past this, new sync calls are refused until some finish


def cancelled() -> bool:
    """True once the current call was cancelled or ran past its time limit.

    A sync tool keeps running in its thread after that (Python cannot stop a thread);
    poll this between steps of long work and return or raise early. Its answer is no
    longer delivered, and a side-effecting call stays `in_doubt`. Async tools are
    cancelled outright; for them this is always False.
    """
    call = current_call()
    return call is not None and call.body is not None and call.body.stopped


@dataclass
class Body:
    """One attempt at running a tool body. `on_start` records the start before the body runs."""

    on_start: Callable[[], Coroutine[Any, Any, None]] | None = None
    started: bool = False
    stopped: bool = False  # set on the loop, read by the body's thread: a flag is all it needs
    _thread_running: bool = False
    abandoned: bool = False

    async def begin(self) -> None:
        """Called right before an async body runs: after this, the body may have done anything."""
        if not self.started:
            if self.on_start is not None:
                await self.on_start()
            self.started = True

    def begin_in_thread(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Called by a sync body's thread right before the function runs; False when the call
        gave up meanwhile (then the body must not run).

        The start is recorded here, not while the call waited for a thread: a call cut while
        it waited never began, so its key is free again rather than in doubt. The record is
        written on the loop and waited for, so it is durable before the body runs; what it
        raises (`ClaimLostError`) stops the body. Whether the body runs is decided under the
        lock `abandon` takes, so a call that gave up reads `started` as final.
        """
        if self.stopped:  # the call gave up while it waited: no start mark to write at all
            return False
        if not self.started and self.on_start is not None:
            asyncio.run_coroutine_threadsafe(self.on_start(), loop).result()
        with _ABANDONED.lock:
            if self.stopped:
                return False
            self.started = True
            return True

    def enter_thread(self) -> bool:
        """Called by the body's thread before it runs; False when the call already gave up on it.

        Checked under the lock `abandon` takes: a thread that starts after its call gave up
        never runs the body, because that call was recorded as ended, not as still running.
        """
        with _ABANDONED.lock:
            if self.stopped:
                return False
            self._thread_running = True
            return True

    def leave_thread(self) -> None:
        with _ABANDONED.lock:
            self._thread_running = False
            if self.abandoned:
                _ABANDONED.count -= 1

    def abandon(self) -> None:
        """The caller stopped waiting (time limit, cancellation): tell the body, count its thread."""
        self.stopped = True
        with _ABANDONED.lock:
            if self._thread_running and not self.abandoned:
                self.abandoned = True
                _ABANDONED.count += 1

    @property
    def still_running(self) -> bool:
        """Whether the body goes on in an abandoned thread (its effect may still happen)."""
        return self.abandoned and self._thread_running


class _AbandonedThreads:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0


_ABANDONED = _AbandonedThreads()


def abandoned_threads() -> int:
    """Sync tool bodies still running after their call gave up on them, in this process."""
    return _ABANDONED.count


def is_own_cancellation(exc: BaseException) -> bool:
    """Whether `exc` is the running task being cancelled (a client's cancel, a time limit, the
    server stopping), not a CancelledError that code merely raised or let through from elsewhere
    (e.g. awaiting a future someone else cancelled): only the first may unwind the call."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def current_body() -> Body | None:
    call = current_call()
    # Only set_body puts a body in the call, and only a Body.
    return cast("Body | None", call.body) if call is not None else None


def set_body(body: Body | None) -> Token[Call | None]:
    """Make `body` the current call's; returns the token for `reset_body`.

    A new `Call` rather than a changed one: a worker thread runs in a copy of this
    context and must keep seeing its own body after the call moves on.
    """
    call = current_call()
    return enter_call(Call(call.correlation_id, call.tool, body) if call is not None else Call("", "", body))


def reset_body(token: Token[Call | None]) -> None:
    leave_call(token)
