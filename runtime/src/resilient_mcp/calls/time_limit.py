"""Per-call time limits that share one timer: what `asyncio.timeout` does, for less.

`asyncio.timeout` schedules a timer handle for every call and cancels it when the call
ends, most of what a time limit costs per call (benchmarks/OVERHEAD.md). Here the
calls in flight are kept in a set, and one timer waits for the earliest deadline among
them. A call that ends before its deadline only leaves the set; when the timer fires it
cancels the tasks whose deadline has passed and waits again for the earliest of the
others. With the usual limit of a minute the timer fires about once a minute, whatever
the rate of calls.

A call past its deadline is stopped the way `asyncio.timeout` stops it: its task is
cancelled, and the CancelledError it raises is recognised as this limit's (and not a
client's cancellation) by the task's cancellation count.
"""

from __future__ import annotations

import asyncio

# The loop runs a timer up to its clock's resolution early; a deadline this close counts as passed.
_EARLY_S = 0.001


class Deadline:
    """One call's time limit, from `TimeLimits.start` until `stop`."""

    __slots__ = ("cancelling", "expired", "task", "when")

    def __init__(self, when: float, task: asyncio.Task[object]) -> None:
        self.when = when
        self.task = task
        self.cancelling = task.cancelling()  # cancellations already requested: not ours
        self.expired = False

    def caused(self, exc: asyncio.CancelledError) -> bool:
        """Whether `exc`, caught in the call, is this limit stopping it (then it is handled here).

        The call was cancelled by its deadline and by nothing else (a client's cancellation
        that came too keeps going up, as from `asyncio.timeout`).
        """
        return self.expired and self.task.uncancel() <= self.cancelling


class TimeLimits:
    """The deadlines of the calls running on one event loop, and the one timer they share."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._running: set[Deadline] = set()
        self._timer: asyncio.TimerHandle | None = None

    def start(self, timeout_s: float) -> Deadline:
        """The deadline of the current task's call, `timeout_s` from now; `stop` it when it ends."""
        task = asyncio.current_task(self.loop)
        assert task is not None, "a time limit needs a task"
        deadline = Deadline(self.loop.time() + timeout_s, task)
        self._running.add(deadline)
        if self._timer is None or deadline.when < self._timer.when():
            self._arm(deadline.when)
        return deadline

    def stop(self, deadline: Deadline) -> None:
        """The call ended (any way): its deadline no longer applies. The timer stays armed."""
        self._running.discard(deadline)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = self.loop.time()
        for deadline in [d for d in self._running if d.when - now <= _EARLY_S]:
            self._running.discard(deadline)
            deadline.expired = True
            deadline.task.cancel()
        if self._running:
            self._arm(min(deadline.when for deadline in self._running))


def time_limits(current: TimeLimits | None) -> TimeLimits:
    """`current` if it belongs to the running loop, else new limits for it (a test may run many loops)."""
    loop = asyncio.get_running_loop()
    return current if current is not None and current.loop is loop else TimeLimits(loop)
