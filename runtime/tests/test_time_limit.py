"""Call time limits on one shared timer: each call is stopped at its own deadline, and only then,
as `asyncio.timeout` (its plain twin) stops it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import looptime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_mcp.calls.time_limit import TimeLimits, time_limits

pytestmark = pytest.mark.anyio
FOREVER_S = 3600.0
WAIT_S = 60.0  # what the test waits at most for something that should happen at once


async def limited(limits: TimeLimits, timeout_s: float, work: asyncio.Future[None]) -> str:
    """A call under a time limit, as the seam runs one: how it ended."""
    deadline = limits.start(timeout_s)
    try:
        await work
        return "finished"
    except asyncio.CancelledError as exc:
        if not deadline.caused(exc):
            raise
        return "past its limit"
    finally:
        limits.stop(deadline)


async def test_a_shorter_limit_started_later_stops_its_call_first_and_only_that_call() -> None:
    limits = time_limits(None)
    loop = asyncio.get_running_loop()
    long_work, short_work = loop.create_future(), loop.create_future()
    long_call = asyncio.create_task(limited(limits, FOREVER_S, long_work))
    await asyncio.sleep(0)  # the long call arms the timer first
    short_call = asyncio.create_task(limited(limits, 0.05, short_work))

    await asyncio.wait({short_call}, timeout=WAIT_S)  # waits without cancelling it

    assert short_call.done()
    assert short_call.result() == "past its limit"
    assert not long_call.done()
    long_work.set_result(None)
    assert await asyncio.wait_for(long_call, WAIT_S) == "finished"


async def test_a_call_that_ended_is_not_stopped_when_its_deadline_passes() -> None:
    limits = time_limits(None)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    done.set_result(None)

    assert await limited(limits, 0.05, done) == "finished"
    await asyncio.sleep(0.2)  # past the deadline: the timer fires and finds no call
    assert await limited(limits, FOREVER_S, done) == "finished"


async def test_a_cancellation_from_elsewhere_is_not_taken_for_the_limit() -> None:
    limits = time_limits(None)
    loop = asyncio.get_running_loop()
    call = asyncio.create_task(limited(limits, FOREVER_S, loop.create_future()))
    await asyncio.sleep(0)

    call.cancel()  # as a client's notifications/cancelled does
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, WAIT_S)


async def test_a_deadline_that_passed_with_another_cancellation_leaves_that_one_going_up() -> None:
    limits = time_limits(None)

    async def cancelled_twice() -> tuple[bool, int]:
        deadline = limits.start(FOREVER_S)
        task = asyncio.current_task()
        assert task is not None
        deadline.expired = True  # what the timer does at the deadline,
        task.cancel()
        task.cancel()  # and a client's cancellation at the same moment
        try:
            await asyncio.sleep(FOREVER_S)
        except asyncio.CancelledError as exc:
            return deadline.caused(exc), task.cancelling()
        finally:
            limits.stop(deadline)
        return True, -1

    assert await asyncio.wait_for(asyncio.create_task(cancelled_twice()), WAIT_S) == (False, 1)


async def test_the_limits_of_a_loop_are_kept_and_a_new_loop_gets_its_own() -> None:
    limits = time_limits(None)

    assert time_limits(limits) is limits
    other = TimeLimits(asyncio.new_event_loop())
    try:
        assert time_limits(other) is not other
    finally:
        other.loop.close()


# --- the plain twin: asyncio.timeout, on the same calls, in virtual time ---------------------------

# One call: when it starts, its limit, how long its body takes, and when (if ever) something else
# cancels it; all in seconds of the loop's virtual time (looptime), so no load can reorder them.
CallPlan = tuple[float, float, float, float | None]
# Times on a grid far coarser than the limits' tolerance (_EARLY_S), so no two events tie.
moments = st.integers(min_value=1, max_value=400).map(lambda tick: tick * 0.25)
call_plans = st.tuples(moments, moments, moments, st.none() | moments)
LimitedCall = Callable[[float, float], Awaitable[str]]  # (timeout_s, body_s) -> how the call ended


async def run_plan(plan: list[CallPlan], limited_call: LimitedCall) -> list[str]:
    """Every call of the plan, as `limited_call(timeout_s, body_s)` runs it: how each ended, and when."""
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def one(start: float, timeout_s: float, body_s: float) -> str:
        await asyncio.sleep(start)
        try:
            how = await limited_call(timeout_s, body_s)
        except asyncio.CancelledError:
            how = "cancelled"
        return f"{how} at {loop.time() - started:.2f}"

    tasks = [asyncio.create_task(one(start, timeout_s, body_s)) for start, timeout_s, body_s, _ in plan]
    for task, (start, _, _, cancel_after) in zip(tasks, plan, strict=True):
        if cancel_after is not None:
            loop.call_at(started + start + cancel_after, task.cancel)
    return list(await asyncio.gather(*tasks))


def in_virtual_time(
    plan: list[CallPlan], limited_call: Callable[[float, float], Awaitable[str]]
) -> list[str]:
    loop = looptime.new_event_loop(start=0)
    try:
        return loop.run_until_complete(run_plan(plan, limited_call))
    finally:
        loop.close()


def distinct_moments(plan: list[CallPlan]) -> bool:
    """No two of the plan's events (ends, deadlines, cancellations) fall at the same moment."""
    events = []
    for start, timeout_s, body_s, cancel_after in plan:
        events += [
            start + timeout_s,
            start + body_s,
            *([start + cancel_after] if cancel_after is not None else []),
        ]
    return len(set(events)) == len(events)


@settings(max_examples=150, deadline=None)
@given(plan=st.lists(call_plans, min_size=1, max_size=12).filter(distinct_moments))
def test_the_shared_timer_ends_every_call_as_asyncio_timeout_would(plan: list[CallPlan]) -> None:
    limits: list[TimeLimits | None] = [None]

    async def shared_timer(timeout_s: float, body_s: float) -> str:
        current = limits[0] = time_limits(limits[0])
        return await limited(current, timeout_s, asyncio.ensure_future(asyncio.sleep(body_s)))

    async def plain(timeout_s: float, body_s: float) -> str:
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.sleep(body_s)
        except TimeoutError:
            return "past its limit"
        return "finished"

    assert in_virtual_time(plan, shared_timer) == in_virtual_time(plan, plain)
