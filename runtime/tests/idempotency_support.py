"""Helpers for the idempotency store's tests and their worker processes (fixtures: conftest_idempotency)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import psycopg
import pytest

from resilient_mcp.store import DEFAULT_TTL_S, HEARTBEAT_S, IdempotencyStore
from resilient_mcp.store.postgres import PostgresStore
from resilient_mcp.store.sqlite import SQLiteStore
from sample_server.project import ENV_PREFIX

# The library has both backends whichever one the project chose: its store tests run on both.
BACKENDS = ["sqlite", "postgres"]
TEST_DSN_VARIABLE = f"{ENV_PREFIX}TEST_DATABASE_URL"
TEST_DSN = os.environ.get(TEST_DSN_VARIABLE, "")  # read at import: each test's environment is wiped
WORKER = Path(__file__).with_name("idempotency_worker.py")


class MakeStore(Protocol):
    def __call__(
        self, *, ttl_s: float = DEFAULT_TTL_S, heartbeat_s: float = HEARTBEAT_S
    ) -> Awaitable[IdempotencyStore]: ...


WorkerFactory = Callable[..., subprocess.Popen[str]]


def new_store(
    backend: str, target: str, *, ttl_s: float = DEFAULT_TTL_S, heartbeat_s: float = HEARTBEAT_S
) -> IdempotencyStore:
    """A store (not yet opened) of this backend on this target."""
    if backend == "postgres":
        return PostgresStore(target, ttl_s=ttl_s, heartbeat_s=heartbeat_s)
    return SQLiteStore(Path(target), ttl_s=ttl_s, heartbeat_s=heartbeat_s)


def start_worker(backend: str, target: str, *args: str) -> subprocess.Popen[str]:
    """A separate process with its own store on the same table (see idempotency_worker.py)."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), backend, target, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def exited_pid() -> int:
    """The pid of a process of this machine that has exited."""
    argv = [sys.executable, "-c", "import os; print(os.getpid())"]
    process = subprocess.run(argv, capture_output=True, check=True)
    return int(process.stdout)


def wait_for_line(process: subprocess.Popen[str]) -> str:
    """The worker's next line of output; fails with its stderr if it ended instead."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        _, stderr = process.communicate(timeout=30)
        pytest.fail(f"the worker process ended early (exit {process.returncode}): {stderr[-2000:]}")
    return line.strip()


def release_worker(process: subprocess.Popen[str]) -> None:
    """Let a worker claim its keys: it is waiting for one line on stdin."""
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()


async def claim_at_once(
    backend: str, target: str, stores: list[IdempotencyStore], tool: str, key: str, fingerprint: str
) -> list[str]:
    """What each store's claim of an existing (tool, key), sent at the same moment, answers.

    postgres: the row is locked until every claim waits for it, so each one reads it before
    any can change it (unlocked, the first claim might finish before the next one starts).
    """
    kinds: list[str] = []

    async def claim(store: IdempotencyStore) -> None:
        kinds.append((await store.claim(tool, key, fingerprint, 60.0)).kind)

    if backend == "postgres":
        async with (
            await psycopg.AsyncConnection.connect(target, autocommit=True) as holder,
            await psycopg.AsyncConnection.connect(target, autocommit=True) as watcher,
        ):
            await holder.execute("BEGIN")
            await holder.execute(
                "SELECT 1 FROM idempotency_keys WHERE tool = %s AND key = %s FOR UPDATE", (tool, key)
            )
            async with anyio.create_task_group() as group:
                for store in stores:
                    group.start_soon(claim, store)
                with anyio.fail_after(60):
                    while await _waiting_for(watcher, holder.info.backend_pid) < len(stores):  # noqa: ASYNC110
                        await anyio.sleep(0.02)  # the database says when they wait: polled
                await holder.execute("COMMIT")
        return kinds

    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(claim, store)
    return kinds


async def _waiting_for(watcher: psycopg.AsyncConnection[Any], holder_pid: int) -> int:
    """How many backends wait for the holder's lock, directly or queued behind another waiter."""
    cursor = await watcher.execute(
        "WITH RECURSIVE waiting (pid) AS ("
        " SELECT pid FROM pg_stat_activity WHERE %(holder)s = ANY(pg_blocking_pids(pid))"
        " UNION SELECT a.pid FROM pg_stat_activity AS a"
        " JOIN waiting AS w ON w.pid = ANY(pg_blocking_pids(a.pid))"
        ") SELECT count(*) FROM waiting",
        {"holder": holder_pid},
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0
