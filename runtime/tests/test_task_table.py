"""The tasks table's rules (store/task_table.py), on a real SQLite file and a real PostgreSQL.

A task is its caller's alone; a caller has a bounded number of unfinished tasks and one task
per (tool, idempotency key); answers resume a parked task on the process that took the last
one; a cancelled task stays cancelled and a task is changed only by the process that owns it;
a task whose process is gone is taken over by exactly one live process; finished tasks go
after their TTL; a table of schema 3 gains the tasks table when opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest

from idempotency_support import MakeStore
from resilient_mcp.store import IdempotencyStore, fingerprint
from resilient_mcp.store.sql import SCHEMA_VERSION
from resilient_mcp.store.task_table import TASK_STATUSES, NewTask, TaskRow

pytest_plugins = ["conftest_idempotency"]
pytestmark = pytest.mark.anyio

ANA, BEN = "sub:ana", "sub:ben"
TOOL = "render_report"
ARGS: dict[str, Any] = {"report": "q3", "pages": 12}
MAX_OPEN = 2
DAY_S = 86400.0
ASK_NAME = {"method": "elicitation/create", "params": {"message": "Your name?"}}
ASK_CONFIRM = {"method": "elicitation/create", "params": {"message": "Proceed?"}}
NAME = {"action": "accept", "content": {"name": "Ana"}}
CONFIRM = {"action": "accept", "content": {"confirm": True}}
RESULT = {"content": [{"type": "text", "text": "report q3 rendered"}], "isError": False}


def task(
    caller: str = ANA, *, tool: str = TOOL, key: str | None = None, arguments: Mapping[str, Any] = ARGS
) -> NewTask:
    return NewTask(
        caller=caller,
        tool=tool,
        idempotency_key=key,
        fingerprint=fingerprint(dict(arguments)),
        arguments=arguments,
        answers=None,
        request_state=None,
        capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}},
        correlation_id="0123456789abcdef",
    )


async def created(store: IdempotencyStore, new: NewTask | None = None, max_open: int = MAX_OPEN) -> TaskRow:
    made = await store.tasks.create(new or task(), max_open=max_open)
    assert made.row is not None, "the task was not created"
    assert not made.existing
    return made.row


async def status_of(store: IdempotencyStore, task_id: str) -> str:
    row = await store.tasks.get(task_id)
    assert row is not None
    return row.status


def execute(backend: str, target: str, *statements: str) -> list[tuple[Any, ...]]:
    """Statements on the test's table, as an operator or an older release would run them, in one
    transaction; the rows of the last one."""
    rows: list[tuple[Any, ...]] = []
    if backend == "postgres":
        with psycopg.connect(target, autocommit=True) as conn, conn.transaction():
            for statement in statements:
                cursor = conn.execute(statement.encode())
                rows = cursor.fetchall() if cursor.description else []
        return rows
    with contextlib.closing(sqlite3.connect(target, timeout=30)) as db, db:
        for statement in statements:
            rows = db.execute(statement).fetchall()
    return rows


def age(backend: str, target: str, seconds: float) -> None:
    """Every task's times moved `seconds` into the past, as if they were that old."""
    if backend == "postgres":
        shift = f"make_interval(secs => {seconds})"
        execute(
            backend,
            target,
            f"UPDATE mcp_tasks SET created_at = created_at - {shift}, updated_at = updated_at - {shift},"
            f" finished_at = finished_at - {shift}",
        )
    else:
        execute(
            backend,
            target,
            f"UPDATE mcp_tasks SET created_at = created_at - {seconds}, updated_at = updated_at - {seconds},"
            f" finished_at = finished_at - {seconds}",
        )


# --- create and get --------------------------------------------------------------


async def test_a_created_task_is_working_and_read_back_only_by_its_caller(store: IdempotencyStore) -> None:
    row = await created(store)

    assert (row.caller, row.tool, row.status, row.body) == (ANA, TOOL, "working", 0)
    assert row.owner == store.tasks.owner
    assert row.decoded("arguments") == ARGS
    assert len(row.task_id) == 32
    mine = await store.tasks.get(row.task_id, caller=ANA)
    assert mine is not None
    assert mine.task_id == row.task_id
    assert await store.tasks.get(row.task_id, caller=BEN) is None, "another caller's task reads as none"
    assert await store.tasks.get("0" * 32, caller=ANA) is None


async def test_a_caller_has_at_most_max_open_unfinished_tasks_input_required_included(
    store: IdempotencyStore,
) -> None:
    first = await created(store, task(key="report-1"))
    second = await created(store)
    assert await store.tasks.park(first.task_id, {"name": ASK_NAME}, None, "waiting for a name")

    refused = await store.tasks.create(task(), max_open=MAX_OPEN)
    retried = await store.tasks.create(task(key="report-1"), max_open=MAX_OPEN)
    others = await store.tasks.create(task(BEN), max_open=MAX_OPEN)
    assert await store.tasks.finish(second.task_id, "completed", RESULT)
    freed = await store.tasks.create(task(), max_open=MAX_OPEN)

    assert (refused.row, refused.existing) == (None, False), "an input_required task counts"
    assert retried.row is not None, "at the bound, a retry of a key still gets its task"
    assert (retried.existing, retried.row.task_id) == (True, first.task_id)
    assert others.row is not None, "the bound is per caller"
    assert freed.row is not None, "a finished task frees its slot"
    assert await store.tasks.open_count(ANA) == 2
    assert (await store.tasks.counts())["working"] == 2


# --- one task per (caller, tool, key) ----------------------------------------------


async def test_one_task_per_caller_tool_and_key(store: IdempotencyStore) -> None:
    first = await created(store, task(key="order-7"))

    again = await store.tasks.create(task(key="order-7"), max_open=MAX_OPEN)
    other_arguments = await store.tasks.create(
        task(key="order-7", arguments={**ARGS, "pages": 13}), max_open=MAX_OPEN
    )
    bens = await store.tasks.create(task(BEN, key="order-7"), max_open=MAX_OPEN)

    assert again.existing
    assert again.row is not None
    assert again.row.task_id == first.task_id
    assert other_arguments.existing, "the key's task is answered: the caller sees the other fingerprint"
    assert other_arguments.row is not None
    assert other_arguments.row.fingerprint == first.fingerprint != task(arguments={"pages": 13}).fingerprint
    assert bens.row is not None
    assert not bens.existing
    assert bens.row.task_id != first.task_id, "another caller's key is a new task"
    assert (await store.tasks.counts())["working"] == 2


async def test_two_creates_of_one_key_at_once_make_one_task(make_store: MakeStore) -> None:
    one, other = await make_store(), await make_store()

    made = await asyncio.gather(
        one.tasks.create(task(key="order-8"), max_open=MAX_OPEN),
        other.tasks.create(task(key="order-8"), max_open=MAX_OPEN),
    )

    assert sorted(m.existing for m in made) == [False, True]
    assert len({m.row.task_id for m in made if m.row is not None}) == 1
    assert (await one.tasks.counts())["working"] == 1


# --- asking: park, answer ------------------------------------------------------------


async def test_answers_leave_the_pending_map_and_the_last_one_resumes_the_task_where_it_came(
    make_store: MakeStore,
) -> None:
    here, there = await make_store(), await make_store()
    row = await created(here)
    assert await here.tasks.mark_started(row.task_id)
    asks = {"name": ASK_NAME, "confirm": ASK_CONFIRM}
    assert await here.tasks.park(row.task_id, asks, "state-1", "two questions")

    nobody = await there.tasks.answer(row.task_id, BEN, {"name": NAME})
    partial = await here.tasks.answer(row.task_id, ANA, {"name": NAME, "unasked": CONFIRM})
    complete = await there.tasks.answer(row.task_id, ANA, {"confirm": CONFIRM})

    assert nobody is None, "another caller's task is not answered"
    assert partial is not None
    assert (partial.status, partial.request_state) == ("input_required", "state-1")
    assert partial.decoded("input_requests") == {"confirm": ASK_CONFIRM}
    assert partial.decoded("answers") == {"name": NAME}, "an answer to nothing asked is ignored"
    assert complete is not None
    assert complete.status == "working"
    assert complete.owner == there.tasks.owner, "the process that took the last answer runs it"
    assert complete.body == 0, "its run starts again from the beginning"
    assert complete.decoded("input_requests") is None
    assert complete.decoded("answers") == {"name": NAME, "confirm": CONFIRM}
    assert not await here.tasks.finish(row.task_id, "completed", RESULT), "no longer the first process's"
    assert await there.tasks.finish(row.task_id, "completed", RESULT)


async def test_an_answer_to_a_task_that_asks_nothing_changes_nothing(store: IdempotencyStore) -> None:
    row = await created(store)

    answered = await store.tasks.answer(row.task_id, ANA, {"name": NAME})

    assert answered is not None
    assert (answered.status, answered.answers) == ("working", None)


# --- cancel, and who may write -------------------------------------------------------


async def test_cancel_ends_an_open_task_and_leaves_a_finished_one_as_it_is(store: IdempotencyStore) -> None:
    working, parked, done = await created(store), await created(store), await created(store, task(BEN))
    assert await store.tasks.park(parked.task_id, {"name": ASK_NAME}, None, None)
    assert await store.tasks.finish(done.task_id, "completed", RESULT)

    by_ben = await store.tasks.cancel(working.task_id, BEN, "cancelled by the client")
    cancelled = await store.tasks.cancel(working.task_id, ANA, "cancelled by the client")
    cancelled_parked = await store.tasks.cancel(parked.task_id, ANA, "cancelled by the client")
    finished = await store.tasks.cancel(done.task_id, BEN, "cancelled by the client")

    assert by_ben is None, "another caller's task cannot be cancelled"
    assert cancelled is not None
    assert (cancelled.status, cancelled.status_message) == ("cancelled", "cancelled by the client")
    assert cancelled_parked is not None
    assert (cancelled_parked.status, cancelled_parked.input_requests) == ("cancelled", None)
    assert finished is not None
    assert (finished.status, finished.decoded("outcome")) == ("completed", RESULT)
    assert finished.status_message is None
    assert await store.tasks.cancelled_mine(60.0) == {working.task_id, parked.task_id}


async def test_an_unflushed_end_is_an_end_and_working_mine_names_what_this_process_owns(
    store: IdempotencyStore,
) -> None:
    first, second = await created(store), await created(store, task(BEN))
    assert await store.tasks.working_mine() == {first.task_id, second.task_id}
    assert await store.tasks.finish(first.task_id, "completed", RESULT, flushed=False)
    assert await status_of(store, first.task_id) == "completed"
    assert await store.tasks.working_mine() == {second.task_id}


async def test_a_cancelled_task_is_never_finished_or_resumed(store: IdempotencyStore) -> None:
    row = await created(store)
    parked = await created(store)
    assert await store.tasks.park(parked.task_id, {"name": ASK_NAME}, None, None)
    for task_id in (row.task_id, parked.task_id):
        assert await store.tasks.cancel(task_id, ANA, "cancelled by the client") is not None

    finished = await store.tasks.finish(row.task_id, "completed", RESULT)
    started = await store.tasks.mark_started(row.task_id)
    re_parked = await store.tasks.park(row.task_id, {"name": ASK_NAME}, None, None)
    answered = await store.tasks.answer(parked.task_id, ANA, {"name": NAME})

    assert (finished, started, re_parked) == (False, False, False)
    assert answered is not None
    assert answered.status == "cancelled"
    assert await status_of(store, row.task_id) == "cancelled"


async def test_only_the_owner_writes_a_task(make_store: MakeStore) -> None:
    owner, other = await make_store(), await make_store()
    row = await created(owner)

    refused = (
        await other.tasks.mark_started(row.task_id),
        await other.tasks.park(row.task_id, {"name": ASK_NAME}, None, None),
        await other.tasks.finish(row.task_id, "failed", {"code": -32603, "message": "not mine"}),
    )
    await other.tasks.set_message(row.task_id, "not mine")
    after = await owner.tasks.get(row.task_id)
    await owner.tasks.set_message(row.task_id, "half way (1/2)")
    accepted = await owner.tasks.finish(row.task_id, "completed", RESULT)

    assert refused == (False, False, False)
    assert after is not None
    assert (after.status, after.body, after.status_message) == ("working", 0, None)
    assert accepted
    done = await owner.tasks.get(row.task_id)
    assert done is not None
    assert (done.status, done.decoded("outcome"), done.status_message) == ("completed", RESULT, None)


# --- orphans ---------------------------------------------------------------------------


async def test_a_task_whose_process_is_gone_is_adopted_by_exactly_one_live_process(
    make_store: MakeStore,
) -> None:
    gone, one, other = await make_store(), await make_store(), await make_store()
    orphan = await created(gone)
    parked = await created(gone)
    assert await gone.tasks.park(parked.task_id, {"name": ASK_NAME}, None, None)
    alive = await created(one, task(BEN))
    await gone.close()  # unregisters its instance row, as the heartbeat sweep does for a dead one

    seen = await one.tasks.orphans()
    adopted = await asyncio.gather(
        one.tasks.adopt(orphan.task_id, gone.tasks.owner), other.tasks.adopt(orphan.task_id, gone.tasks.owner)
    )

    assert seen == [(orphan.task_id, gone.tasks.owner)], "only working tasks of a gone process"
    assert sorted(adopted) == [False, True]
    winner = one if adopted[0] else other
    row = await winner.tasks.get(orphan.task_id)
    assert row is not None
    assert (row.owner, row.status) == (winner.tasks.owner, "working")
    assert await other.tasks.orphans() == []
    assert await status_of(one, alive.task_id) == "working"


# --- keeping: purge, counts -------------------------------------------------------------


async def test_tasks_past_the_ttl_are_purged_unless_still_running(
    store: IdempotencyStore, backend: str, store_target: str
) -> None:
    rows = {
        name: await created(store, max_open=10)
        for name in ("completed", "failed", "cancelled", "asks", "runs")
    }
    assert await store.tasks.finish(rows["completed"].task_id, "completed", RESULT)
    assert await store.tasks.finish(rows["failed"].task_id, "failed", {"code": -32603, "message": "lost"})
    assert await store.tasks.cancel(rows["cancelled"].task_id, ANA, "cancelled by the client") is not None
    assert await store.tasks.park(rows["asks"].task_id, {"name": ASK_NAME}, None, None)
    age(backend, store_target, 2 * DAY_S)
    young = await created(store, max_open=10)
    assert await store.tasks.finish(young.task_id, "completed", RESULT)

    kept_within_ttl = await store.tasks.purge(3 * DAY_S)
    purged = await store.tasks.purge(DAY_S)

    assert kept_within_ttl == 0
    assert purged == 4, "finished tasks and one left waiting for answers go; a running one stays"
    left = {row.task_id for row in await store.tasks.newest()}
    assert left == {rows["runs"].task_id, young.task_id}


async def test_counts_name_every_status(store: IdempotencyStore) -> None:
    empty = await store.tasks.counts()
    working, parked, done = [await created(store, max_open=10) for _ in range(3)]
    assert await store.tasks.park(parked.task_id, {"name": ASK_NAME}, None, None)
    assert await store.tasks.finish(done.task_id, "failed", {"code": -32603, "message": "lost"})

    counts = await store.tasks.counts()

    assert empty == dict.fromkeys(TASK_STATUSES, 0)
    assert counts == {"working": 1, "input_required": 1, "completed": 0, "failed": 1, "cancelled": 0}
    assert [row.task_id for row in await store.tasks.newest(status="failed")] == [done.task_id]
    assert working.status == "working"


# --- the schema upgrade -------------------------------------------------------------------


async def test_a_schema_3_table_gains_the_tasks_table_when_opened(
    make_store: MakeStore, backend: str, store_target: str
) -> None:
    before = await make_store()
    key_fp = fingerprint(ARGS)
    await before.claim(TOOL, "k", key_fp, 60.0)
    await before.complete(TOOL, "k", RESULT)
    await before.close()
    # What a release of schema 3 left: every table but mcp_tasks (and those of later schemas).
    execute(
        backend,
        store_target,
        "DROP TABLE mcp_tasks",
        "DROP TABLE mcp_stream_events",
        "DELETE FROM idempotency_schema_version",
        "INSERT INTO idempotency_schema_version (version) VALUES (3)",
    )

    upgraded = await make_store()
    row = await created(upgraded)

    assert await status_of(upgraded, row.task_id) == "working"
    assert (await upgraded.claim(TOOL, "k", key_fp, 60.0)).result == RESULT, "the keys are kept"
    assert execute(backend, store_target, "SELECT version FROM idempotency_schema_version") == [
        (SCHEMA_VERSION,)
    ]
