"""Sync tools past their time limit: they can stop cooperatively, and the threads left behind are bounded."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client

from resilient_mcp.calls.running import MAX_ABANDONED_THREADS, Body, abandoned_threads
from resilient_mcp.server.resilient_server import ResilientServer
from sample_tools.effects import RECONCILE_ASKED, RELEASE_LATE_CHARGE, effects_count
from sample_tools.failing import RELEASE_STUCK, STOPPED_EARLY
from support import error_of


def wait_until_no_thread_is_abandoned() -> None:
    """Threads other tests left behind finish on their own; these tests count from zero."""
    deadline = time.monotonic() + 60
    while abandoned_threads():
        assert time.monotonic() < deadline, f"{abandoned_threads()} threads still abandoned after 60 s"
        time.sleep(0.05)


@pytest.fixture
def stuck_threads_released() -> Iterator[None]:
    RELEASE_STUCK.clear()
    wait_until_no_thread_is_abandoned()
    try:
        yield
    finally:
        RELEASE_STUCK.set()


async def health(client: Client) -> dict[str, Any]:
    result = await client.call_tool("health_check", {})
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@pytest.mark.anyio
async def test_a_sync_tool_sees_cancelled_once_its_call_gave_up(server: ResilientServer) -> None:
    key = uuid.uuid4().hex
    async with Client(server) as client:
        result = await client.call_tool("patient", {"key": key})
    assert error_of(result)[1]["category"] == "timeout"
    with anyio.fail_after(60):
        while key not in STOPPED_EARLY:  # noqa: ASYNC110 - the thread reports through a set
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_abandoned_threads_show_in_health_and_are_bounded(
    server: ResilientServer, stuck_threads_released: None
) -> None:
    async with Client(server) as client:
        async with anyio.create_task_group() as group:
            for _ in range(MAX_ABANDONED_THREADS):
                group.start_soon(client.call_tool, "stuck", {"label": "a"})
        report = await health(client)
        refused = await client.call_tool("stuck", {"label": "b"})
        quick = await client.call_tool("slow", {"seconds": 0})  # async tools need no thread

        assert report["status"] == "degraded"
        assert report["checks"]["worker_threads"]["status"] == "degraded"
        assert f"{MAX_ABANDONED_THREADS} sync calls" in report["checks"]["worker_threads"]["detail"]
        text, error = error_of(refused)
        assert (error["category"], error["retryable"]) == ("transient", True)
        assert "still running past their time limit" in text
        assert not quick.is_error

        RELEASE_STUCK.set()
        await anyio.to_thread.run_sync(wait_until_no_thread_is_abandoned)
        assert (await health(client))["checks"]["worker_threads"]["status"] == "ok"


@pytest.mark.anyio
async def test_a_side_effect_still_running_in_its_thread_is_never_reconciled(server: ResilientServer) -> None:
    """Its effect may still happen: reconcile saying "not done" now would let the retry charge twice."""
    key = uuid.uuid4().hex
    arguments = {"cents": 700, "idempotency_key": key}
    RELEASE_LATE_CHARGE.clear()
    try:
        async with Client(server) as client:
            first = await client.call_tool("charge_late", arguments)
            retry = await client.call_tool("charge_late", arguments)
        assert error_of(first)[1]["category"] == "in_doubt"
        assert "may still be running" in error_of(first)[0]
        assert error_of(retry)[1]["category"] == "in_doubt"
        assert key not in RECONCILE_ASKED
    finally:
        RELEASE_LATE_CHARGE.set()
    with anyio.fail_after(60):
        while effects_count() < 1:  # noqa: ASYNC110 - the abandoned thread reports through the file
            await anyio.sleep(0.02)
    assert effects_count() == 1


def test_a_thread_starting_after_its_call_gave_up_never_runs_the_body(stuck_threads_released: None) -> None:
    body = Body()
    body.abandon()  # the time limit struck while the pool was still handing the body to a thread

    assert body.enter_thread() is False  # the call was recorded as ended: its body must never run
    assert not body.still_running
    assert abandoned_threads() == 0


def test_a_thread_the_call_gave_up_on_counts_until_it_returns(stuck_threads_released: None) -> None:
    body = Body()
    assert body.enter_thread() is True
    body.abandon()

    assert body.still_running
    assert abandoned_threads() == 1
    body.leave_thread()
    assert not body.still_running
    assert abandoned_threads() == 0
