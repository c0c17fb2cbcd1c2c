"""A retried side-effecting call never happens twice: every row of the idempotency table."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.store import DB_FILENAME
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND
from sample_tools.effects import effects_count
from support import error_of

Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]


def idempotency(result: CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    meta: dict[str, Any] = result.meta["idempotency"]
    return meta


def error(result: CallToolResult) -> dict[str, Any]:
    return error_of(result)[1]


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def new_key() -> str:
    return f"run-{uuid.uuid4().hex[:8]}:0"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_same_key_same_arguments_replays_without_running(server: ResilientServer, mode: Mode) -> None:
    key = new_key()
    async with Client(server, mode=mode) as client:
        first = await client.call_tool("charge", {"account": "acme", "cents": 500, "idempotency_key": key})
        retry = await client.call_tool("charge", {"account": "acme", "cents": 500, "idempotency_key": key})
    assert not first.is_error
    assert idempotency(first) == {"key": key, "replayed": False}
    assert idempotency(retry) == {"key": key, "replayed": True}
    assert retry.content == first.content
    assert effects_count() == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_same_key_other_arguments_is_a_conflict(server: ResilientServer, mode: Mode) -> None:
    key = new_key()
    async with Client(server, mode=mode) as client:
        await client.call_tool("charge", {"account": "acme", "cents": 500, "idempotency_key": key})
        other = await client.call_tool("charge", {"account": "acme", "cents": 900, "idempotency_key": key})
    assert error(other)["category"] == "conflict"
    assert error(other)["retryable"] is False
    assert "other arguments" in text(other)
    assert effects_count() == 1


@pytest.mark.anyio
async def test_same_key_while_still_running_is_a_retryable_conflict(server: ResilientServer) -> None:
    key = new_key()
    arguments = {"account": "acme", "cents": 1, "seconds": 1.0, "idempotency_key": key}
    async with Client(server) as client, anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "charge_slowly", arguments)
        while effects_count() == 0:  # noqa: ASYNC110 - the effect is a file, not an event
            await anyio.sleep(0.01)
        busy = await client.call_tool("charge_slowly", arguments)
    assert error(busy)["category"] == "conflict"
    assert error(busy)["retryable"] is True
    assert error(busy)["retry_after_s"] > 0
    async with Client(server) as client:
        later = await client.call_tool("charge_slowly", arguments)
    assert idempotency(later)["replayed"] is True
    assert effects_count() == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_cut_off_mid_way_leaves_the_key_in_doubt(server: ResilientServer, mode: Mode) -> None:
    key = new_key()
    arguments = {"account": "acme", "cents": 1, "seconds": 3, "idempotency_key": key}
    async with Client(server, mode=mode) as client:
        first = await client.call_tool("charge_slowly", arguments)
        retry = await client.call_tool("charge_slowly", arguments)
        health = await client.call_tool("health_check", {})
    # The charge was made before the time limit: the first answer must not invite a retry.
    assert error(first)["category"] == "in_doubt"
    assert error(first)["retryable"] is False
    assert "may or may not have taken effect" in text(first)
    assert error(retry)["category"] == "in_doubt"
    assert error(retry)["retryable"] is False
    assert "keys settle" in text(retry)
    assert effects_count() == 1, "an in-doubt call is never re-run on its own"
    assert isinstance(health.structured_content, dict)
    assert health.structured_content["keys_in_doubt"] == 1
    assert health.structured_content["checks"]["idempotency_store"]["status"] == "degraded"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_cancelled_after_it_started_leaves_the_key_in_doubt(
    server: ResilientServer, mode: Mode
) -> None:
    key = new_key()
    arguments = {"account": "acme", "cents": 1, "seconds": 1.5, "idempotency_key": key}
    async with Client(server, mode=mode) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "charge_slowly", arguments)
            with anyio.fail_after(60):
                while effects_count() == 0:  # noqa: ASYNC110 - the effect is a file, not an event
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()  # the client gives up: the server is told to cancel
        # The claim's lease runs 32 s (time limit + 30): an answer within 20 s comes from the
        # cancellation being recorded, not from the lease running out.
        with anyio.fail_after(20):
            while True:
                retry = await client.call_tool("charge_slowly", arguments)
                if error(retry)["category"] != "conflict":  # until the cancelled call is recorded
                    break
                await anyio.sleep(0.05)
    assert error(retry)["category"] == "in_doubt"
    assert effects_count() == 1


@pytest.mark.anyio
async def test_rejected_arguments_store_nothing(server: ResilientServer) -> None:
    key = new_key()
    async with Client(server) as client:
        rejected = await client.call_tool("charge", {"account": "acme", "cents": 0, "idempotency_key": key})
        accepted = await client.call_tool("charge", {"account": "acme", "cents": 5, "idempotency_key": key})
    assert error(rejected)["category"] == "invalid_input"
    assert idempotency(accepted) == {"key": key, "replayed": False}
    assert effects_count() == 1


@pytest.mark.anyio
@pytest.mark.parametrize("bad_key", ["", "x" * 256, "tab\there", "naïve"])
async def test_malformed_keys_are_rejected(server: ResilientServer, bad_key: str) -> None:
    async with Client(server) as client:
        result = await client.call_tool("charge", {"account": "a", "cents": 5, "idempotency_key": bad_key})
    assert error(result)["category"] == "invalid_input"
    assert "idempotency_key" in text(result)
    assert effects_count() == 0


@pytest.mark.anyio
async def test_a_business_refusal_is_stored_and_replayed(server: ResilientServer) -> None:
    key = new_key()
    arguments = {"account": "acme", "cents": 5, "idempotency_key": key}
    async with Client(server) as client:
        first = await client.call_tool("charge_refused", arguments)
        retry = await client.call_tool("charge_refused", arguments)
    assert error(first)["category"] == "terminal"
    assert text(retry) == text(first)
    assert idempotency(retry)["replayed"] is True


@pytest.mark.anyio
async def test_transient_failures_are_retried_inside_one_claim(server: ResilientServer) -> None:
    key = new_key()
    async with Client(server) as client:
        result = await client.call_tool(
            "charge_after_hiccups", {"account": "a", "cents": 5, "idempotency_key": key}
        )
    assert not result.is_error
    assert "attempt 3" in text(result)
    assert effects_count() == 1


@pytest.mark.anyio
async def test_keys_older_than_the_ttl_are_new_again(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"{ENV_PREFIX}IDEMPOTENCY_TTL_S", "1")
    key = new_key()
    arguments = {"account": "acme", "cents": 5, "idempotency_key": key}
    async with Client(make_server()) as client:
        await client.call_tool("charge", arguments)
        await anyio.sleep(1.2)
        later = await client.call_tool("charge", arguments)
    assert idempotency(later)["replayed"] is False
    assert effects_count() == 2


@pytest.mark.anyio
async def test_fifty_concurrent_calls_with_one_key_charge_once(server: ResilientServer) -> None:
    key = new_key()
    arguments = {"account": "acme", "cents": 5, "idempotency_key": key}
    results: list[CallToolResult] = []

    async def one(client: Client) -> None:
        results.append(await client.call_tool("charge", arguments))

    async with Client(server) as client, anyio.create_task_group() as group:
        for _ in range(50):
            group.start_soon(one, client)
    assert effects_count() == 1
    ran = [r for r in results if not r.is_error and not idempotency(r)["replayed"]]
    assert len(ran) == 1
    for result in results:
        if result.is_error:
            assert error(result)["category"] == "conflict"
            assert error(result)["retryable"] is True
        else:
            assert result.content == ran[0].content


# Another process that takes the SQLite file's write lock and keeps it until its stdin closes.
HOLD_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@contextmanager
def write_lock_held_elsewhere(path: Path) -> Iterator[None]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)


@pytest.mark.skipif(IDEMPOTENCY_BACKEND != "sqlite", reason="this project keeps its keys in PostgreSQL")
@pytest.mark.anyio
async def test_a_write_lock_held_by_another_process_fails_a_new_key_as_transient_and_blocks_no_read(
    server: ResilientServer, data_dir: Path
) -> None:
    key = new_key()
    arguments = {"account": "acme", "cents": 5, "idempotency_key": key}
    async with Client(server) as client:
        await client.call_tool("health_check", {})  # the table exists and is open
        with write_lock_held_elsewhere(data_dir / DB_FILENAME):
            blocked = await client.call_tool("charge", arguments)
            health = await client.call_tool("health_check", {})
        retry = await client.call_tool("charge", arguments)
    assert error(blocked)["category"] == "transient"
    assert error(blocked)["retryable"] is True
    assert "idempotency table is unavailable" in text(blocked)
    assert isinstance(health.structured_content, dict)
    assert health.structured_content["checks"]["idempotency_store"]["status"] == "ok"
    assert idempotency(retry) == {"key": key, "replayed": False}
    assert effects_count() == 1


@pytest.mark.skipif(IDEMPOTENCY_BACKEND != "sqlite", reason="this project keeps its keys in PostgreSQL")
@pytest.mark.anyio
async def test_a_new_key_waiting_for_the_write_lock_leaves_the_server_serving(
    server: ResilientServer, data_dir: Path
) -> None:
    arguments = {"account": "acme", "cents": 5, "idempotency_key": new_key()}
    async with Client(server) as client:
        await client.call_tool("health_check", {})  # the table exists and is open
        with write_lock_held_elsewhere(data_dir / DB_FILENAME):
            blocked: list[CallToolResult] = []

            async def charge() -> None:
                blocked.append(await client.call_tool("charge", arguments))

            async with anyio.create_task_group() as group:
                group.start_soon(charge)
                await anyio.sleep(0.3)  # the claim now waits for the lock (2 s at most)
                health = await client.call_tool("health_check", {})
                answered_while_waiting = not blocked
    assert answered_while_waiting, "a call waiting for the file lock stalled every other call"
    assert health.structured_content is not None
    assert error(blocked[0])["category"] == "transient"
