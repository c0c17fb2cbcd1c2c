"""The SQLite table's file deleted, moved, replaced or truncated under a running server: it says
failing and claims no key it could not remember, and no server starts on the data directory
with a table that would not know the keys already run."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from http_support import get
from resilient_mcp.authoring.errors import FatalError, TableLostError
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from resilient_mcp.http.probes import READYZ_PATH
from resilient_mcp.store import DB_FILENAME, fingerprint
from resilient_mcp.store.sqlite import SQLiteStore
from sample_tools.effects import effects_count
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, http_server, server_argv, sqlite_project

FP = fingerprint({"n": 1})
DONE = {"content": [], "isError": False}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / DB_FILENAME)
    await opened.open()
    await opened.claim("charge", "before", FP, 60.0)
    await opened.complete("charge", "before", DONE)
    yield opened
    await opened.close()


def moved_away(path: Path) -> None:
    path.rename(path.with_name("moved-away.sqlite3"))


def truncated(path: Path) -> None:
    os.truncate(path, 0)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("change", "word"), [(Path.unlink, "deleted"), (moved_away, "moved away"), (truncated, "truncated")]
)
async def test_a_lost_table_fails_its_check_and_answers_no_key(
    store: SQLiteStore, change: Callable[[Path], None], word: str
) -> None:
    change(store.path)

    status, detail = await store.check()

    assert status == "failing"
    assert word in detail
    assert str(store.path.parent) not in detail, "clients see the file's name, never where it lives"
    with pytest.raises(TableLostError):
        await store.claim("charge", "after", FP, 60.0)
    with pytest.raises(TableLostError):  # not even a replay: the path's table does not know it
        await store.claim("charge", "before", FP, 60.0)


@pytest.mark.anyio
async def test_the_heartbeat_notices_a_lost_table_with_nobody_asking(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / DB_FILENAME, heartbeat_s=0.05)
    await store.open()
    note = store.path.with_name(f"{DB_FILENAME}.lost")
    try:
        store.path.unlink()
        with anyio.fail_after(60):  # a beat looks within 0.05 s; the bound is for a loaded machine
            while not note.exists():  # noqa: ASYNC110 - the heartbeat thread writes a file
                await anyio.sleep(0.05)
    finally:
        await store.close()

    assert "was deleted while this server ran" in note.read_text()


@pytest.mark.anyio
async def test_a_wal_without_its_table_stops_the_next_server_at_start(store: SQLiteStore) -> None:
    store.path.unlink()  # the running store has not looked yet: its -wal and -shm are still there

    with pytest.raises(FatalError) as caught:
        await SQLiteStore(store.path).open()

    assert f"{DB_FILENAME} is missing but {DB_FILENAME}-wal is there" in caught.value.problem
    assert not store.path.exists(), "no new table was made"


@pytest.mark.anyio
async def test_a_lost_table_leaves_a_note_that_stops_the_next_server_at_start(store: SQLiteStore) -> None:
    store.path.unlink()
    assert (await store.check())[0] == "failing"
    await store.close()
    note = store.path.with_name(f"{DB_FILENAME}.lost")
    for side in (f"{DB_FILENAME}-wal", f"{DB_FILENAME}-shm"):  # an operator's half-done cleanup
        store.path.with_name(side).unlink(missing_ok=True)

    with pytest.raises(FatalError) as caught:
        await SQLiteStore(store.path).open()

    assert "deleted" in note.read_text()
    assert str(note) in caught.value.problem
    assert "delete it to start" in caught.value.fix


# Over real processes: a server on the data directory of the test, with the sample tools (an
# sqlite project's: a postgres project's server has no table file to lose).


def start(env: dict[str, str]) -> StdioSession:
    session = StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=env)
    open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
    return session


def call(session: StdioSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = session.request("tools/call", with_envelope(MODERN, {"name": name, "arguments": arguments}))
    result: dict[str, Any] = answer["result"]
    return result


def charge(session: StdioSession, key: str) -> dict[str, Any]:
    return call(session, "charge", {"account": "acme", "cents": 100, "idempotency_key": key})


def health_once_failing(session: StdioSession) -> dict[str, Any]:
    """health_check's report, asked again until it says failing (the test's time limit at most)."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        report: dict[str, Any] = call(session, "health_check", {})["structuredContent"]
        if report["status"] == "failing" or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def another_server(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A second server on the data directory, as a client would launch it, until it ends."""
    argv = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    return subprocess.run(argv, env=env, input="", capture_output=True, text=True, timeout=ANSWER_TIMEOUT_S)


def replaced_by_another_table(path: Path) -> None:
    """Another server's table (say, a backup), moved over this one."""
    other = path.with_name("other.sqlite3")

    async def make() -> None:
        store = SQLiteStore(other)
        await store.open()
        await store.close()

    anyio.run(make)
    os.replace(other, path)


@sqlite_project
@pytest.mark.parametrize("change", [Path.unlink, replaced_by_another_table], ids=["deleted", "replaced"])
def test_a_table_lost_under_a_running_server_runs_no_key_twice(
    change: Callable[[Path], None], subprocess_env: dict[str, str], data_dir: Path
) -> None:
    keys = [f"order-{n}:charge" for n in range(4)]
    with start(subprocess_env) as first:
        assert all(charge(first, key)["isError"] is False for key in keys)
        change(data_dir / DB_FILENAME)

        report = health_once_failing(first)
        new_key = charge(first, "order-new:charge")
        retry = charge(first, keys[0])
        meanwhile = another_server(subprocess_env)
    afterwards = another_server(subprocess_env)

    for second in (meanwhile, afterwards):
        assert second.returncode == 78, second.stderr
        assert second.stderr.startswith("FATAL: the idempotency table")
    assert effects_count() == len(keys), "each key ran once, and nothing else ran"
    assert report["status"] == "failing"
    assert report["checks"]["idempotency_store"]["status"] == "failing"
    for refused in (new_key, retry):
        assert refused["isError"] is True
        assert refused["_meta"]["error"]["category"] == "transient"
        assert "must be restarted on a table it can trust" in refused["content"][0]["text"]


@sqlite_project
@pytest.mark.network
def test_readyz_fails_once_the_table_is_deleted(subprocess_env: dict[str, str], data_dir: Path) -> None:
    with http_server(subprocess_env) as (url, _):
        before = get(url, READYZ_PATH)
        (data_dir / DB_FILENAME).unlink()
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        after = get(url, READYZ_PATH)
        while after[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
            after = get(url, READYZ_PATH)
        report = anyio.run(health_over_http, url)

    assert before[0] == 200, before
    assert after[0] == 503, after
    assert "deleted" in after[1]["failing"]["idempotency_store"]["detail"]
    assert report["checks"]["idempotency_store"]["status"] == "failing"


async def health_over_http(url: str) -> dict[str, Any]:
    async with Client(url) as client:
        result = await client.call_tool("health_check", {})
    report: dict[str, Any] = result.structured_content or {}
    return report
