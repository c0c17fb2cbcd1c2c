"""Stopping on purpose: SIGTERM, SIGINT, SIGHUP or the end of stdin, over either transport.

SIGHUP (a closed terminal, a supervisor's reload or stop) would end the process at once, with
no log line and the calls in flight unanswered: it stops the server as SIGTERM does.

From the first signal on, new calls are refused (`transient`: another replica, or this
server restarted, will take them); calls in flight get `SHUTDOWN_GRACE_S` to finish; those
still running then are cut and answered (`in_doubt` for a side-effecting call whose body
began, `transient` for the others), and the process exits 0. A second signal is logged and
changes nothing: cutting calls sooner would only lose answers.

Nothing may keep the process alive past the grace plus `EXIT_BOUND_S`: a sync tool hung in
its worker thread, an executor that waits for its threads, a client that stops reading. A
watchdog thread, started by the first signal, ends the process with `os._exit(0)` then.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time

from resilient_mcp.calls.running import abandoned_threads
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)
EXIT_BOUND_S = 5.0  # past the grace: time to answer the cut calls, close the store, flush the log
ANSWER_CUT_CALLS_S = 2.0  # of that bound: time for the cut calls to write their answers
_POLL_S = 0.05
# Each begins the same stop; SIGHUP does not exist on Windows.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name)
)


class Shutdown:
    """The server's stop: begun once, by whatever asked first; calls register while they run."""

    def __init__(self, grace_s: float, *, exit_bound_s: float = EXIT_BOUND_S) -> None:
        self.grace_s = grace_s
        self.exit_bound_s = exit_bound_s
        self.reason: str | None = None
        self.calls: set[asyncio.Task[object]] = set()  # the tasks of the calls in flight
        self._cut: set[asyncio.Task[object]] = set()
        self._watchdog: threading.Timer | None = None
        self.drained = asyncio.Event()  # set once the calls in flight finished or were answered

    @property
    def stopping(self) -> bool:
        return self.reason is not None

    def begin(self, reason: str) -> bool:
        """Start stopping (True the first time); later requests are only logged."""
        if self.reason is not None:
            log.warning("stop_requested_again", reason=reason, already=self.reason, grace_s=self.grace_s)
            return False
        self.reason = reason
        log.info("draining", reason=reason, grace_s=self.grace_s, calls_in_flight=len(self.calls))
        watchdog = threading.Timer(self.grace_s + self.exit_bound_s, self._exit_now)
        watchdog.daemon = True
        watchdog.start()
        self._watchdog = watchdog
        return True

    async def drain(self) -> None:
        """Wait for the calls in flight within the grace, then cut the rest and let them answer."""
        deadline = time.monotonic() + self.grace_s
        # The set the call path keeps anyway: polled, rather than an event on every call.
        while self.calls and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_POLL_S)
        left = [task for task in self.calls if not task.done()]
        if not left:
            self.drained.set()
            return
        log.warning("drain_grace_exceeded", calls_cut=len(left), grace_s=self.grace_s)
        for task in left:
            self._cut.add(task)
            task.cancel()
        answered_by = time.monotonic() + ANSWER_CUT_CALLS_S
        while self.calls and time.monotonic() < answered_by:  # noqa: ASYNC110
            await asyncio.sleep(_POLL_S)
        self.drained.set()

    def caused(self, exc: BaseException) -> bool:
        """Whether `exc` is this shutdown cutting the running call; if so, the cut is consumed
        (the task is no longer cancelled) and the call answers instead of unwinding."""
        if not isinstance(exc, asyncio.CancelledError):
            return False
        task = asyncio.current_task()
        if task is None or task not in self._cut:
            return False
        self._cut.discard(task)
        task.uncancel()
        return True

    def finished(self) -> None:
        """The server has stopped: exit now if a thread would keep the process alive."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        stuck = abandoned_threads()
        if stuck:  # the interpreter would wait for them at exit, however long they run
            log.warning("exit_with_threads_running", threads=stuck)
            self._exit_now()

    def _exit_now(self) -> None:
        if self._watchdog is not None and threading.current_thread() is self._watchdog:
            log.error("exit_bound_exceeded", bound_s=self.grace_s + self.exit_bound_s)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)
