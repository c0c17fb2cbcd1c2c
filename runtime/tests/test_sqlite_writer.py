"""The SQLite writer thread on a real file: what waits goes out as one commit, each caller
hears its own answer, a durable commit reaches the disk, and nothing waits forever."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from resilient_mcp.store.sqlite_writer import SQLiteWriter, WriterStoppedError

pytestmark = pytest.mark.anyio

INSERT = "INSERT INTO items (name) VALUES (:name)"


class Traced:
    """A connection to a fresh file, and every statement SQLite ran on it."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("CREATE TABLE items (name TEXT PRIMARY KEY)")
        self.ran: list[str] = []
        self.conn.set_trace_callback(self.ran.append)

    def names(self) -> list[str]:
        return [name for (name,) in self.conn.execute("SELECT name FROM items ORDER BY name")]


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[Traced, SQLiteWriter]]:
    traced = Traced(tmp_path / "writer.sqlite3")
    writer = SQLiteWriter(traced.conn)
    yield traced, writer
    await anyio.to_thread.run_sync(writer.stop)
    traced.conn.close()


async def test_statements_sent_while_the_thread_is_busy_share_one_commit(
    traced: tuple[Traced, SQLiteWriter],
) -> None:
    database, writer = traced
    changed: dict[str, int] = {}

    async def insert(name: str) -> None:
        changed[name] = await writer.execute(INSERT, {"name": name}, durable=True)

    # The session holds the thread until its block ends; the inserts wait behind it.
    async with anyio.create_task_group() as group, writer.session() as busy:
        await busy.execute(INSERT, {"name": "first"})
        for name in ("a", "b", "c", "d"):
            group.start_soon(insert, name)
        await anyio.wait_all_tasks_blocked()
        database.ran.clear()

    assert changed == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert database.ran.count("BEGIN IMMEDIATE") == 1
    assert database.ran.count("COMMIT") == 2  # the session's, then the batch's
    assert database.ran.index("PRAGMA synchronous = FULL") < database.ran.index("BEGIN IMMEDIATE")
    assert database.names() == ["a", "b", "c", "d", "first"]


async def test_a_batch_wakes_the_event_loop_once_for_all_its_callers(
    traced: tuple[Traced, SQLiteWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each wake-up is a write to the loop's self-pipe and a thread switch: one per batch, not per caller."""
    database, writer = traced
    loop = asyncio.get_running_loop()
    woken: list[str] = []
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any) -> asyncio.Handle:
        woken.append(threading.current_thread().name)
        return call_soon_threadsafe(callback, *args)

    changed: dict[str, int] = {}

    async def insert(name: str) -> None:
        changed[name] = await writer.execute(INSERT, {"name": name}, durable=True)

    async with anyio.create_task_group() as group, writer.session() as busy:
        await busy.execute(INSERT, {"name": "first"})
        for name in ("a", "b", "c", "d", "e", "f"):
            group.start_soon(insert, name)
        await anyio.wait_all_tasks_blocked()
        monkeypatch.setattr(loop, "call_soon_threadsafe", counted)

    assert changed == dict.fromkeys("abcdef", 1)
    assert database.names() == ["a", "b", "c", "d", "e", "f", "first"]
    assert woken == ["idempotency-writer", "idempotency-writer"]  # the session's commit, then the batch


async def test_a_statement_alone_runs_at_once_in_autocommit(traced: tuple[Traced, SQLiteWriter]) -> None:
    database, writer = traced
    database.ran.clear()

    assert await writer.execute(INSERT, {"name": "alone"}) == 1

    assert "BEGIN IMMEDIATE" not in database.ran
    assert database.names() == ["alone"]


async def test_one_failing_statement_of_a_batch_fails_alone(traced: tuple[Traced, SQLiteWriter]) -> None:
    database, writer = traced
    await writer.execute(INSERT, {"name": "taken"})
    answers: dict[str, object] = {}

    async def insert(name: str) -> None:
        try:
            answers[name] = await writer.execute(INSERT, {"name": name})
        except sqlite3.IntegrityError as exc:
            answers[name] = type(exc).__name__

    async with anyio.create_task_group() as group, writer.session():
        for name in ("x", "taken", "y"):
            group.start_soon(insert, name)
        await anyio.wait_all_tasks_blocked()

    assert answers == {"x": 1, "taken": "IntegrityError", "y": 1}
    assert database.names() == ["taken", "x", "y"]


async def test_a_session_that_raises_is_rolled_back(traced: tuple[Traced, SQLiteWriter]) -> None:
    database, writer = traced

    async def fails_half_way() -> None:
        async with writer.session() as session:
            await session.execute(INSERT, {"name": "undone"})
            raise RuntimeError("owner code")

    with pytest.raises(RuntimeError, match="owner code"):
        await fails_half_way()

    assert database.names() == []
    assert await writer.execute(INSERT, {"name": "after"}) == 1


async def test_a_stopped_writer_refuses_work_instead_of_leaving_it_waiting(tmp_path: Path) -> None:
    database = Traced(tmp_path / "stopped.sqlite3")
    writer = SQLiteWriter(database.conn)
    await anyio.to_thread.run_sync(writer.stop)

    with pytest.raises(WriterStoppedError):
        await writer.execute(INSERT, {"name": "late"})
    database.conn.close()
