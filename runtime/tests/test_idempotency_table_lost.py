"""The SQLite table's file deleted, moved, replaced or truncated under a running server: it says
failing and claims no key it could not remember, and no server starts on the data directory
with a table that would not know the keys already run."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from resilient_mcp.authoring.errors import FatalError, TableLostError
from resilient_mcp.store import DB_FILENAME, fingerprint
from resilient_mcp.store.sqlite import SQLiteStore

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
