"""A table made by release 0.3.0 (schema 2, scope (tool, key)), with keys in it, upgraded in place.

Its keys become legacy rows: the one principal (stdio, HTTP without auth) keeps replaying
and refusing them exactly as before; an authenticated caller never gets their result or
state, and a retry across the upgrade never runs an effect a second time.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from idempotency_support import MakeStore, exited_pid
from resilient_mcp.store import LEGACY_CALLER, LOCAL_CALLER, fingerprint
from resilient_mcp.store.instances import host_id

pytest_plugins = ["conftest_idempotency"]
pytestmark = pytest.mark.anyio

TOOL = "send_invoice"
FP = fingerprint({"customer": "c-42", "amount_cents": 1999})
OTHER_FP = fingerprint({"customer": "c-43", "amount_cents": 5})
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "invoice 7 sent"}], "isError": False}
ANA = "sub:ana"

# The DDL of release 0.3.0 (store/sql.py, schema version 2), in each dialect.
SCHEMA_0_3_0 = """
CREATE TABLE idempotency_schema_version (version integer NOT NULL);
INSERT INTO idempotency_schema_version (version) VALUES (2);
CREATE TABLE idempotency_instances (
    instance_id text PRIMARY KEY,
    host_id text NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    started_at {t} NOT NULL{default},
    heartbeat_at {t} NOT NULL{default},
    heartbeat_s {float} NOT NULL
);
CREATE TABLE idempotency_keys (
    tool text NOT NULL,
    key text NOT NULL,
    fingerprint text NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'completed', 'in_doubt')),
    owner text NOT NULL,
    created_at {t} NOT NULL{default},
    updated_at {t} NOT NULL{default},
    lease_until {t} NOT NULL,
    result text,
    note text NOT NULL DEFAULT '',
    PRIMARY KEY (tool, key)
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
CREATE INDEX idempotency_keys_state ON idempotency_keys (state) WHERE state <> 'completed';
ALTER TABLE idempotency_keys ADD COLUMN body {small} NOT NULL DEFAULT 1;
"""
SQLITE = {"t": "REAL", "default": "", "float": "REAL", "small": "INTEGER"}
POSTGRES = {"t": "timestamptz", "default": " DEFAULT now()", "float": "double precision", "small": "smallint"}
DAY_S = 86400.0


def keys_of_a_0_3_0_server(now: float) -> list[tuple[Any, ...]]:
    """(key, fingerprint, state, created_at, lease_until, result, note, body) as a 0.3.0 server of
    this machine, since exited, left them."""
    result = '{"content":[{"type":"text","text":"invoice 7 sent"}],"isError":false}'
    return [
        ("done", FP, "completed", now, now + 60, result, "", 2),
        ("doubt", FP, "in_doubt", now, now + 60, None, "timed out during the call", 2),
        ("started", FP, "pending", now, now + 600, None, "", 1),  # its body began: in doubt
        ("unstarted", FP, "pending", now, now + 600, None, "", 0),  # provably never ran: free
        ("old", FP, "completed", now - 2 * DAY_S, now - 2 * DAY_S, result, "", 2),  # past the TTL
    ]


def make_0_3_0_table(backend: str, target: str) -> None:
    now, pid = time.time(), exited_pid()
    instance = ("old-server", host_id(), "here", pid, now, now, 5.0)
    rows = [
        (TOOL, key, fp, state, "old-server", created, created, lease, result, note, body)
        for key, fp, state, created, lease, result, note, body in keys_of_a_0_3_0_server(now)
    ]
    columns = "tool, key, fingerprint, state, owner, created_at, updated_at, lease_until, result, note, body"
    if backend == "postgres":
        at = "to_timestamp(%s)"
        with psycopg.connect(target, autocommit=True) as conn, conn.transaction():
            for statement in SCHEMA_0_3_0.format(**POSTGRES).split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                f"INSERT INTO idempotency_instances VALUES (%s, %s, %s, %s, {at}, {at}, %s)", instance
            )
            times = f"%s, %s, %s, %s, %s, {at}, {at}, {at}, %s, %s, %s"
            for row in rows:
                conn.execute(f"INSERT INTO idempotency_keys ({columns}) VALUES ({times})", row)
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(target)) as db, db:
        db.executescript(SCHEMA_0_3_0.format(**SQLITE))
        db.execute("INSERT INTO idempotency_instances VALUES (?, ?, ?, ?, ?, ?, ?)", instance)
        db.executemany(f"INSERT INTO idempotency_keys ({columns}) VALUES ({', '.join('?' * 11)})", rows)


@pytest.fixture
def old_table(backend: str, store_target: str) -> str:
    make_0_3_0_table(backend, store_target)
    return store_target


@pytest.mark.usefixtures("old_table")
async def test_the_one_principal_keeps_every_key_of_a_0_3_0_table_as_before(make_store: MakeStore) -> None:
    store = await make_store()

    listed = {record.key: record.caller for record in await store.list_keys()}
    done = await store.claim(TOOL, "done", FP, 60.0)
    kinds = {key: (await store.claim(TOOL, key, FP, 60.0)).kind for key in ("doubt", "started", "unstarted")}
    await store.mark_started(TOOL, "unstarted")  # freed by the first sweep: now this caller's own claim
    await store.complete(TOOL, "unstarted", RESULT)

    assert set(listed.values()) == {LEGACY_CALLER}
    assert (done.kind, done.result) == ("replay", RESULT)
    assert kinds == {"doubt": "in_doubt", "started": "in_doubt", "unstarted": "new"}
    assert (await store.claim(TOOL, "unstarted", FP, 60.0)).result == RESULT
    assert (await store.claim(TOOL, "done", OTHER_FP, 60.0)).kind == "conflict_arguments"
    assert (await store.claim(TOOL, "old", FP, 60.0)).kind == "new", "legacy keys age out with the TTL"


@pytest.mark.usefixtures("old_table")
async def test_an_authenticated_caller_never_gets_a_legacy_keys_result_or_runs_it_again(
    make_store: MakeStore,
) -> None:
    store = await make_store()

    kinds = {
        (key, fp == FP): (await store.claim(TOOL, key, fp, 60.0, caller=ANA)).kind
        for key in ("done", "doubt", "started")
        for fp in (FP, OTHER_FP)
    }

    assert set(kinds.values()) == {"legacy"}, kinds
    assert (await store.claim(TOOL, "old", FP, 60.0, caller=ANA)).kind == "new", "past the TTL: a new key"
    # Its server died before its body began (the store's first sweep freed it): nothing to repeat.
    assert (await store.claim(TOOL, "unstarted", FP, 60.0, caller=ANA)).kind == "new"
    assert (await store.claim(TOOL, "fresh", FP, 60.0, caller=ANA)).kind == "new"
    # The legacy rows are as they were: the one principal still replays and refuses them.
    assert (await store.claim(TOOL, "done", FP, 60.0)).result == RESULT
    assert (await store.claim(TOOL, "started", FP, 60.0)).kind == "in_doubt"


@pytest.mark.usefixtures("old_table")
async def test_a_legacy_key_settled_by_an_operator_is_settled_for_every_caller(make_store: MakeStore) -> None:
    store = await make_store()

    assert await store.settle(TOOL, "doubt", "failed", caller=LEGACY_CALLER)

    assert (await store.claim(TOOL, "doubt", FP, 60.0, caller=ANA)).kind == "new"
    assert (await store.claim(TOOL, "doubt", FP, 60.0, caller=LOCAL_CALLER)).kind == "new"
