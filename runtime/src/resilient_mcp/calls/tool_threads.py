"""Worker threads for sync tool bodies, entered without a detour through the event loop.

`anyio.to_thread.run_sync` yields to the event loop before it hands a function to a thread
(a checkpoint, then its capacity limiter), so with other calls in flight their work runs
first, and every call is slower by it. Here the body goes to a thread at once
(`loop.run_in_executor`), in a copy of the call's context, and that thread is claimed as an
AnyIO worker thread, as `to_thread`'s are, so `anyio.from_thread.run` works in a sync tool.
A body the call stops waiting for goes on in its thread (Python cannot stop a thread);
`calls.running` counts it. With every thread busy, a body waits in the pool's queue: a
side-effecting body records its start only once its thread takes it
(`Body.begin_in_thread`), so a call cut while it waited never began.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from resilient_mcp.sdk_fence import claim_anyio_worker_thread

T = TypeVar("T")
MAX_TOOL_THREADS = 40  # as anyio's default thread limiter: past this, bodies queue for a thread

_POOL = ThreadPoolExecutor(max_workers=MAX_TOOL_THREADS, thread_name_prefix="tool")


async def run_in_thread(fn: Callable[[], T]) -> T:
    """`fn()` in a worker thread, in a copy of the current context; cancelling the caller
    abandons the thread (as `to_thread.run_sync(..., abandon_on_cancel=True)` does)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, _as_worker, loop, contextvars.copy_context(), fn)


def _as_worker(loop: asyncio.AbstractEventLoop, context: contextvars.Context, fn: Callable[[], T]) -> T:
    with claim_anyio_worker_thread(loop):
        return context.run(fn)
