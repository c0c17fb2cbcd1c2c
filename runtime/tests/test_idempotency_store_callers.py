"""A key belongs to its caller: the table's scope is (caller, tool, key), on every backend.

Another caller's key is a new key: no replay of its result, no conflict, no answer that
tells it exists. An operator settles one caller's key, and never one whose body may
still be running.
"""

from __future__ import annotations

import functools
import json
import signal
from typing import Any

import anyio
import pytest

from idempotency_support import MakeStore, WorkerFactory, release_worker, wait_for_line
from resilient_mcp.store import LOCAL_CALLER, IdempotencyStore, fingerprint

pytest_plugins = ["conftest_idempotency"]
pytestmark = pytest.mark.anyio

TOOL = "send_invoice"
FP = fingerprint({"customer": "c-42", "amount_cents": 1999})
OTHER_FP = fingerprint({"customer": "c-43", "amount_cents": 5})
LEASE_S = 60.0
ANA, BEN = "sub:ana", "sub:ben"


def result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


async def test_another_callers_completed_key_is_a_new_key_and_each_replays_its_own(
    store: IdempotencyStore,
) -> None:
    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=ANA)).kind == "new"
    await store.complete(TOOL, "k", result("ana's invoice"), caller=ANA)

    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=BEN)).kind == "new"
    await store.complete(TOOL, "k", result("ben's invoice"), caller=BEN)

    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=ANA)).result == result("ana's invoice")
    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=BEN)).result == result("ben's invoice")
    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "new", "the one principal is a caller too"


@pytest.mark.parametrize("state", ["pending", "in_doubt", "completed"])
async def test_another_callers_key_in_any_state_is_new_whatever_the_arguments(
    store: IdempotencyStore, state: str
) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S, caller=ANA)
    await store.mark_started(TOOL, "k", caller=ANA)
    if state == "in_doubt":
        await store.mark_in_doubt(TOOL, "k", "timed out", caller=ANA)
    elif state == "completed":
        await store.complete(TOOL, "k", result("ana's invoice"), caller=ANA)

    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=BEN)).kind == "new"
    assert (await store.claim(TOOL, "k2", FP, LEASE_S, caller=ANA)).kind == "new"
    assert (await store.claim(TOOL, "k2", OTHER_FP, LEASE_S, caller=BEN)).kind == "new"


async def test_one_callers_outcomes_leave_another_callers_row_alone(store: IdempotencyStore) -> None:
    for caller in (ANA, BEN):
        await store.claim(TOOL, "k", FP, LEASE_S, caller=caller)
        await store.mark_started(TOOL, "k", caller=caller)

    await store.complete(TOOL, "k", result("ana's invoice"), caller=ANA)
    await store.mark_in_doubt(TOOL, "k", "timed out", caller=BEN)

    ana, ben = await store.get(TOOL, "k", caller=ANA), await store.get(TOOL, "k", caller=BEN)
    assert ana is not None
    assert (ana.caller, ana.state) == (ANA, "completed")
    assert ben is not None
    assert (ben.caller, ben.state) == (BEN, "in_doubt")
    assert [(r.caller, r.state) for r in await store.find(TOOL, "k")] == [
        (ANA, "completed"),
        (BEN, "in_doubt"),
    ]
    assert {r.caller for r in await store.list_keys()} == {ANA, BEN}


async def _at_once(*calls: Any) -> None:
    """Sent together: a backend that batches concurrent statements sends them as one."""
    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(call)


async def test_callers_claiming_and_replaying_one_key_together_each_get_their_own(
    store: IdempotencyStore,
) -> None:
    callers = [f"sub:caller-{n}" for n in range(8)]
    kinds: dict[str, str] = {}

    async def claim(caller: str) -> None:
        kinds[caller] = (await store.claim(TOOL, "k", FP, LEASE_S, caller=caller)).kind

    await _at_once(*(functools.partial(claim, caller) for caller in callers))
    assert kinds == dict.fromkeys(callers, "new")
    await _at_once(
        *(functools.partial(store.complete, TOOL, "k", result(caller), caller=caller) for caller in callers)
    )

    replays: dict[str, Any] = {}

    async def replay(caller: str) -> None:
        replays[caller] = (await store.claim(TOOL, "k", FP, LEASE_S, caller=caller)).result

    await _at_once(*(functools.partial(replay, caller) for caller in callers))
    assert replays == {caller: result(caller) for caller in callers}


# --- settling one caller's key ------------------------------------------------------


async def test_settle_touches_only_the_named_callers_key(store: IdempotencyStore) -> None:
    for caller in (ANA, BEN):
        await store.claim(TOOL, "k", FP, LEASE_S, caller=caller)
        await store.mark_started(TOOL, "k", caller=caller)
        await store.mark_in_doubt(TOOL, "k", "timed out", caller=caller)

    assert not await store.settle(TOOL, "k", "failed"), "the one principal has no such key"
    assert await store.settle(TOOL, "k", "failed", caller=BEN)

    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=BEN)).kind == "new"
    assert (await store.claim(TOOL, "k", FP, LEASE_S, caller=ANA)).kind == "in_doubt"


async def test_settle_refuses_a_key_whose_body_still_runs_in_an_abandoned_thread(
    store: IdempotencyStore, make_store: MakeStore
) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.mark_started(TOOL, "k")
    await store.mark_in_doubt(TOOL, "k", "timed out", still_running=True)
    operator = await make_store()  # `keys settle` opens its own store

    running = await operator.still_running(TOOL, "k")
    assert not await operator.settle(TOOL, "k", "failed")

    assert running is not None
    assert "may still be running" in running
    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "in_doubt", "released, it would run twice"
    assert await operator.settle(TOOL, "k", "failed", force=True)
    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "new"


async def test_settle_refuses_a_claim_past_its_lease_while_its_server_lives(
    store: IdempotencyStore, make_store: MakeStore
) -> None:
    await store.claim(TOOL, "k", FP, 0.1)
    await store.mark_started(TOOL, "k")
    await anyio.sleep(0.2)
    operator = await make_store()

    assert not await operator.settle(TOOL, "k", "failed")
    running = await operator.still_running(TOOL, "k")
    assert running is not None
    assert "running in the server on" in running


async def test_settle_accepts_a_dead_servers_claim_not_yet_swept(
    store: IdempotencyStore, worker: WorkerFactory
) -> None:
    process = worker(TOOL, FP, "5", "started", "charge-1")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new"]
    assert not await store.settle(TOOL, "charge-1", "failed"), "its server runs it"

    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    assert await store.still_running(TOOL, "charge-1") is None
    assert await store.settle(TOOL, "charge-1", "failed")
    assert (await store.claim(TOOL, "charge-1", FP, LEASE_S, caller=LOCAL_CALLER)).kind == "new"
