"""Opening the idempotency table: a schema created once and upgraded in place, and a
one-line FatalError naming the setting to fix when the table cannot be reached."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from idempotency_support import MakeStore, exited_pid, new_store
from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.project import Backend, use_project
from resilient_mcp.store import DB_FILENAME, IdempotencyStore, create_store, fingerprint
from resilient_mcp.store.instances import host_id
from resilient_mcp.store.postgres import PostgresStore
from resilient_mcp.store.sqlite import SCHEMA_VERSION, SQLiteStore
from sample_server.project import ENV_PREFIX, PROJECT

pytest_plugins = ["conftest_idempotency"]
pytestmark = pytest.mark.anyio

FP = fingerprint({"n": 1})


async def open_fails(store: IdempotencyStore) -> FatalError:
    with pytest.raises(FatalError) as caught:
        await store.open()
    await store.close()
    message = str(caught.value)
    assert "\n" not in message, "the FATAL line is one line"
    return caught.value


async def test_opening_twice_keeps_the_schema_and_the_keys(make_store: MakeStore) -> None:
    first = await make_store()
    await first.claim("tool", "k", FP, 60.0)
    await first.complete("tool", "k", {"content": [], "isError": False})

    second = await make_store()
    await second.open()  # open() of an open store is a no-op

    assert (await second.claim("tool", "k", FP, 60.0)).kind == "replay"


async def test_servers_starting_together_create_the_schema_once(backend: str, store_target: str) -> None:
    stores = [new_store(backend, store_target) for _ in range(4)]
    try:
        async with anyio.create_task_group() as group:
            for store in stores:
                group.start_soon(store.open)
        kinds = [(await store.claim("tool", "k", FP, 60.0)).kind for store in stores]
    finally:
        for store in stores:
            await store.close()

    assert sorted(kinds) == ["in_progress", "in_progress", "in_progress", "new"]


async def test_a_table_from_a_newer_version_is_fatal(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    store = SQLiteStore(path)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE idempotency_schema_version SET version = ?", (SCHEMA_VERSION + 1,))

    error = await open_fails(SQLiteStore(path))

    assert "newer" in error.problem
    assert f"{ENV_PREFIX}DATA_DIR" in error.fix


# The tables as release 0.1.0 created them (schema version 1: no `body` column).
SCHEMA_V1 = """
CREATE TABLE idempotency_schema_version (version INTEGER NOT NULL);
INSERT INTO idempotency_schema_version (version) VALUES (1);
CREATE TABLE idempotency_instances (
    instance_id TEXT PRIMARY KEY, host_id TEXT NOT NULL, hostname TEXT NOT NULL, pid INTEGER NOT NULL,
    started_at REAL NOT NULL, heartbeat_at REAL NOT NULL, heartbeat_s REAL NOT NULL
);
CREATE TABLE idempotency_keys (
    tool TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'in_doubt')),
    owner TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, lease_until REAL NOT NULL,
    result TEXT, note TEXT NOT NULL DEFAULT '', PRIMARY KEY (tool, key)
);
"""


async def test_a_version_1_table_is_upgraded_and_its_running_claims_are_never_rerun(tmp_path: Path) -> None:
    # A server of this machine, since exited, claimed a key under version 1: nothing says
    # whether its body started, so the key is in doubt, never taken over and run again.
    path = tmp_path / DB_FILENAME
    now = time.time()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(SCHEMA_V1)
        conn.execute(
            "INSERT INTO idempotency_instances VALUES ('old-server', ?, 'here', ?, ?, ?, 5.0)",
            (host_id(), exited_pid(), now, now),
        )
        conn.execute(
            "INSERT INTO idempotency_keys (tool, key, fingerprint, state, owner, created_at, updated_at,"
            " lease_until, result) VALUES ('charge', 'running', ?, 'pending', 'old-server', ?, ?, ?, NULL),"
            " ('charge', 'done', ?, 'completed', 'old-server', ?, ?, ?, ?)",
            (FP, now, now, now + 600, FP, now, now, now + 600, '{"content":[],"isError":false}'),
        )
    store = SQLiteStore(path)
    await store.open()
    try:
        running = await store.claim("charge", "running", FP, 60.0)
        done = await store.claim("charge", "done", FP, 60.0)
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        version = conn.execute("SELECT version FROM idempotency_schema_version").fetchall()

    assert running.kind == "in_doubt"
    assert done.kind == "replay"
    assert done.result == {"content": [], "isError": False}
    assert version == [(SCHEMA_VERSION,)]


async def test_unwritable_data_directory_is_fatal_and_names_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # root may write anywhere, but not below a file

    error = await open_fails(SQLiteStore(blocker / "data" / DB_FILENAME))

    assert str(blocker / "data") in error.problem
    assert f"set {ENV_PREFIX}DATA_DIR to a writable directory" in error.fix


async def test_a_file_that_is_not_a_database_is_fatal(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    path.write_bytes(b"this is not an SQLite database, it is long enough to have a header" * 20)

    error = await open_fails(SQLiteStore(path))

    assert "not an SQLite database" in error.problem
    assert f"{ENV_PREFIX}DATA_DIR" in error.fix


async def test_unreachable_database_is_fatal_and_names_the_setting() -> None:
    error = await open_fails(PostgresStore("postgresql://app:s3cret@127.0.0.1:1/orders"))

    assert "127.0.0.1:1/orders is unreachable" in error.problem
    assert f"{ENV_PREFIX}DATABASE_URL" in error.fix
    assert "`nox -s db` starts one" in error.fix  # the generated project's local PostgreSQL
    assert "s3cret" not in str(error), "the password never reaches the message"


async def test_missing_database_url_is_fatal_and_names_the_setting() -> None:
    error = await open_fails(PostgresStore(None))

    assert error.problem == f"{ENV_PREFIX}DATABASE_URL is not set"
    assert "`nox -s db` starts one" in error.fix


async def test_a_sql_ascii_database_replays_a_retry(postgres_dsn: str) -> None:
    """A database made under the C locale holds text as SQL_ASCII, which psycopg hands back as
    bytes unless the connection asks for UTF-8: the stored fingerprint must still match."""
    name = f"ascii_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        create = "CREATE DATABASE {} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        admin.execute(sql.SQL(create).format(sql.Identifier(name)))
    store = PostgresStore(make_conninfo(postgres_dsn, dbname=name))
    try:
        await store.open()
        assert (await store.claim("append_note", "note-1", FP, 30.0)).kind == "new"
        await store.complete("append_note", "note-1", {"content": [], "isError": False})

        retry = await store.claim("append_note", "note-1", FP, 30.0)
    finally:
        await store.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))

    assert retry.kind == "replay"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_create_store_uses_the_projects_backend(backend: Backend, tmp_path: Path) -> None:
    settings = CoreSettings(data_dir=tmp_path, database_url="postgresql://localhost/x")
    use_project(replace(PROJECT, idempotency_backend=backend))
    try:
        store = create_store(settings)
    finally:
        use_project(PROJECT)

    if backend == "postgres":
        assert isinstance(store, PostgresStore)
        assert store.dsn == "postgresql://localhost/x"
    else:
        assert isinstance(store, SQLiteStore)
        assert store.path == tmp_path / DB_FILENAME
    assert store.ttl_s == settings.idempotency_ttl_s
