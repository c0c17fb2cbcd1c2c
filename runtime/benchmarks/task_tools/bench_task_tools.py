"""The tools bench_tasks.py and soak.py serve beside the stand-in project's, as tasks or calls.

- `bench_echo`: a trivial read-only tool, the same body as a call or as a task.
- `bench_charge`: the same with `side_effect=True` (a claim on its idempotency key, its
  outcome recorded), and no effect of its own: what is measured is the bookkeeping.
- `bench_wait`: a task body that waits for `bench_release` (an event in this process), so a
  thousand tasks can be kept in flight without a thread or a timer each.
"""

from __future__ import annotations

import anyio

from resilient_mcp import tool

_released: list[anyio.Event] = []  # made on the serving loop by the first waiter


def _release_event() -> anyio.Event:
    if not _released:
        _released.append(anyio.Event())
    return _released[0]


@tool(read_only=True, task_support="optional")
async def bench_echo(n: int) -> int:
    """Return n."""
    return n


@tool(side_effect=True, task_support="optional")
async def bench_charge(n: int, idempotency_key: str) -> int:
    """Return n, once per idempotency key (a retry is replayed)."""
    return n


@tool(read_only=True, task_support="optional", timeout_s=3600)
async def bench_wait(n: int) -> int:
    """Wait until bench_release is called in this process; return n."""
    await _release_event().wait()
    return n


@tool(read_only=True)
async def bench_release(n: int) -> int:
    """Let every bench_wait body go on; returns n."""
    _release_event().set()
    _released.clear()
    return n
