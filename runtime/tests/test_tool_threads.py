"""The worker threads of sync tools, against their plain twin `anyio.to_thread.run_sync`.

`run_in_thread` skips the trip through the event loop that `to_thread` makes before it hands
the function over; everything a tool can notice must be the same: the context it runs in,
`anyio.from_thread`, what it raises, and a cancelled caller leaving the thread to finish.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.from_thread
import pytest

from resilient_mcp.calls.tool_threads import run_in_thread

Runner = Callable[[Callable[[], Any]], Awaitable[Any]]
SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


async def plain_twin(fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)


RUNNERS = pytest.mark.parametrize("runner", [run_in_thread, plain_twin], ids=["run_in_thread", "to_thread"])


async def loop_thread_name() -> str:
    return threading.current_thread().name


@pytest.mark.anyio
@RUNNERS
async def test_the_body_sees_the_callers_context_and_can_reach_the_loop(runner: Runner) -> None:
    SEEN.set("the call's")
    caller = threading.current_thread().name

    def body() -> tuple[str, str, str]:
        return SEEN.get(), threading.current_thread().name, anyio.from_thread.run(loop_thread_name)

    seen, thread, from_loop = await runner(body)
    assert seen == "the call's"
    assert thread != caller
    assert from_loop == caller


@pytest.mark.anyio
@RUNNERS
async def test_what_the_body_raises_reaches_the_caller(runner: Runner) -> None:
    def body() -> None:
        raise LookupError("no such account")

    with pytest.raises(LookupError, match="no such account"):
        await runner(body)


@pytest.mark.anyio
@RUNNERS
async def test_a_cancelled_caller_leaves_the_body_to_finish_in_its_thread(runner: Runner) -> None:
    release, finished = threading.Event(), threading.Event()

    def body() -> None:
        release.wait(60)
        finished.set()

    with anyio.move_on_after(0.2) as scope:
        await runner(body)
    assert scope.cancelled_caught
    assert not finished.is_set(), "the caller waited for the thread"
    release.set()
    assert await anyio.to_thread.run_sync(finished.wait, 60)
