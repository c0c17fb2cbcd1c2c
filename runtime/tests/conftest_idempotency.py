"""Fixtures for the idempotency store's tests, run against both backends of the store, whichever
the project chose: a real SQLite file and a real PostgreSQL (postgres_fixtures.py).

Load with `pytest_plugins = ["conftest_idempotency"]` in a test module.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from idempotency_support import BACKENDS, MakeStore, WorkerFactory, new_store, start_worker
from resilient_mcp.store import DB_FILENAME, DEFAULT_TTL_S, HEARTBEAT_S, IdempotencyStore
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def store_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's table lives: an SQLite file path, or a PostgreSQL DSN."""
    if backend == "postgres":
        dsn: str = request.getfixturevalue("postgres_schema_dsn")
        return dsn
    return str(tmp_path / "idempotency" / DB_FILENAME)


@pytest.fixture
def project_table(data_dir: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The table this project's own server opens from its settings, made the test's own.

    sqlite: the file in the test's data directory. postgres: a fresh schema, and
    `SAMPLE_SERVER_DATABASE_URL` set to it (hand it on to a server subprocess's environment).
    """
    if IDEMPOTENCY_BACKEND == "postgres":
        dsn: str = request.getfixturevalue("postgres_schema_dsn")
        monkeypatch.setenv(f"{ENV_PREFIX}DATABASE_URL", dsn)
        return dsn
    return str(data_dir / DB_FILENAME)


@pytest.fixture
async def make_store(backend: str, store_target: str) -> AsyncIterator[MakeStore]:
    """Open stores on the test's table (each one an instance, as separate servers are); closed after."""
    opened: list[IdempotencyStore] = []

    async def make(*, ttl_s: float = DEFAULT_TTL_S, heartbeat_s: float = HEARTBEAT_S) -> IdempotencyStore:
        store = new_store(backend, store_target, ttl_s=ttl_s, heartbeat_s=heartbeat_s)
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> IdempotencyStore:
    return await make_store()


@pytest.fixture
def worker(backend: str, store_target: str) -> Iterator[WorkerFactory]:
    """Start worker processes on the test's table; any still running at the end are killed."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        process = start_worker(backend, store_target, *args)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)
