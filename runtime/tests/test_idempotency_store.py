"""The idempotency table's rules, on a real SQLite file and a real PostgreSQL.

One test per row of the table in DESIGN.md ("Idempotency table"), plus what makes the
rows hold under load and crashes: concurrent claims, separate processes, a server
killed mid-call, an operator settling the keys in doubt.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import anyio
import pytest

from idempotency_support import MakeStore, WorkerFactory, claim_at_once, release_worker, wait_for_line
from resilient_mcp.store import MAX_RETRY_AFTER_S, Claim, IdempotencyStore, fingerprint
from resilient_mcp.store.instances import HeartbeatThread
from resilient_mcp.store.sql import SQLStore

pytest_plugins = ["conftest_idempotency"]
pytestmark = pytest.mark.anyio

TOOL = "send_invoice"
ARGS = {"customer": "c-42", "amount_cents": 1999}
FP = fingerprint(ARGS)
OTHER_FP = fingerprint({**ARGS, "amount_cents": 2999})
LEASE_S = 60.0
OK_RESULT: dict[str, Any] = {
    "content": [{"type": "text", "text": "invoice 7 sent"}],
    "structuredContent": {"invoice": 7},
    "isError": False,
}


# --- the rows of the table -------------------------------------------------------


async def test_new_key_is_claimed_then_its_result_replayed(store: IdempotencyStore) -> None:
    assert (await store.claim(TOOL, "run-1:step-1", FP, LEASE_S)).kind == "new"
    await store.complete(TOOL, "run-1:step-1", OK_RESULT)

    replay = await store.claim(TOOL, "run-1:step-1", FP, LEASE_S)

    assert replay.kind == "replay"
    assert replay.result == OK_RESULT


async def test_terminal_error_result_is_replayed_like_a_success(store: IdempotencyStore) -> None:
    refused = {"content": [{"type": "text", "text": "terminal: card declined"}], "isError": True}
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.complete(TOOL, "k", refused)

    assert (await store.claim(TOOL, "k", FP, LEASE_S)).result == refused


async def test_key_scope_is_the_tool_and_the_key(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)

    assert (await store.claim("other_tool", "k", FP, LEASE_S)).kind == "new"
    assert (await store.claim(TOOL, "K", FP, LEASE_S)).kind == "new"


@pytest.mark.parametrize("state", ["completed", "pending", "in_doubt"])
async def test_same_key_other_arguments_is_a_conflict_in_every_state(
    store: IdempotencyStore, state: str
) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    if state == "completed":
        await store.complete(TOOL, "k", OK_RESULT)
    elif state == "in_doubt":
        await store.mark_in_doubt(TOOL, "k", "timed out")

    assert (await store.claim(TOOL, "k", OTHER_FP, LEASE_S)).kind == "conflict_arguments"
    record = await store.get(TOOL, "k")
    assert record is not None
    assert (record.state, record.fingerprint) == (state, FP), "a conflict changes nothing"


async def test_same_key_still_running_is_in_progress_with_a_capped_retry_hint(make_store: MakeStore) -> None:
    owner, other_server = await make_store(), await make_store()
    await owner.claim(TOOL, "long", FP, 600.0)
    await owner.claim(TOOL, "short", FP, 2.0)

    long_wait = await other_server.claim(TOOL, "long", FP, LEASE_S)
    short_wait = await owner.claim(TOOL, "short", FP, LEASE_S)

    assert (long_wait.kind, long_wait.retry_after_s) == ("in_progress", MAX_RETRY_AFTER_S)
    assert short_wait.kind == "in_progress"
    assert short_wait.retry_after_s is not None
    assert 0 < short_wait.retry_after_s <= 2.0


async def test_claim_that_ran_past_its_lease_is_in_doubt_and_never_rerun(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, 0.2)
    await anyio.sleep(0.3)

    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "in_doubt"
    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "in_doubt", "still in doubt on every retry"
    record = await store.get(TOOL, "k")
    assert record is not None
    assert record.state == "in_doubt"
    assert "lease" in record.note


async def test_marked_in_doubt_answers_in_doubt_and_keeps_the_reason(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.mark_in_doubt(TOOL, "k", "timed out after 60 s")

    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "in_doubt"
    record = await store.get(TOOL, "k")
    assert record is not None
    assert (record.state, record.note) == ("in_doubt", "timed out after 60 s")
    assert await store.in_doubt_count() == 1


async def test_released_key_is_new_again(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.release(TOOL, "k")

    assert await store.get(TOOL, "k") is None
    assert (await store.claim(TOOL, "k", OTHER_FP, LEASE_S)).kind == "new"


async def test_only_the_claiming_server_records_the_outcome(make_store: MakeStore) -> None:
    owner, other_server = await make_store(), await make_store()
    await owner.claim(TOOL, "k", FP, LEASE_S)

    await other_server.complete(TOOL, "k", OK_RESULT)
    await other_server.release(TOOL, "k")

    assert (await other_server.claim(TOOL, "k", FP, LEASE_S)).kind == "in_progress"


async def test_keys_older_than_the_ttl_are_purged_and_new_again(make_store: MakeStore) -> None:
    store = await make_store(ttl_s=0.5)
    await store.claim(TOOL, "old", FP, LEASE_S)
    await store.complete(TOOL, "old", OK_RESULT)
    await store.claim(TOOL, "old-in-doubt", FP, LEASE_S)
    await store.mark_in_doubt(TOOL, "old-in-doubt")
    await store.claim(TOOL, "running", FP, LEASE_S)
    await anyio.sleep(0.6)

    assert (await store.claim(TOOL, "old", OTHER_FP, LEASE_S)).kind == "new", "purged lazily on claim"
    assert await store.purge_expired(0.5) == 1, "the in-doubt key goes; a running claim is kept"
    assert [r.key for r in await store.list_keys()] == ["old", "running"]


async def test_purge_keeps_keys_younger_than_the_ttl(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.complete(TOOL, "k", OK_RESULT)

    assert await store.purge_expired(3600) == 0
    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "replay"


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "x" * 255,
        "run 7:step 2",
        "ключ-🔑-鍵",
        "'; DROP TABLE idempotency_keys; --",
        "%s %(name)s {} \\ \" ' `",
    ],
)
async def test_any_printable_key_round_trips(store: IdempotencyStore, key: str) -> None:
    assert (await store.claim(TOOL, key, FP, LEASE_S)).kind == "new"
    await store.complete(TOOL, key, {"content": [{"type": "text", "text": key}], "isError": False})

    replay = await store.claim(TOOL, key, FP, LEASE_S)
    assert replay.kind == "replay"
    assert replay.result == {"content": [{"type": "text", "text": key}], "isError": False}
    assert [r.key for r in await store.list_keys()] == [key]


async def test_result_with_any_text_is_replayed_exactly(store: IdempotencyStore) -> None:
    result = {"content": [{"type": "text", "text": "\ud800 lone surrogate, \x00 nul, 🔑"}], "isError": False}
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.complete(TOOL, "k", result)

    assert (await store.claim(TOOL, "k", FP, LEASE_S)).result == result


# --- concurrency and crashes ------------------------------------------------------


async def test_claims_and_outcomes_sent_together_each_get_their_own_answer(store: IdempotencyStore) -> None:
    # Outcomes of held keys and claims of new ones in flight at once (PostgreSQL: one statement),
    # with a retry of a held key among them.
    held = [f"held-{n}" for n in range(8)]
    for key in held:
        assert (await store.claim(TOOL, key, FP, LEASE_S)).kind == "new"
    fresh = [f"fresh-{n}" for n in range(8)]
    kinds: dict[str, str] = {}

    async def claim(key: str) -> None:
        kinds[key] = (await store.claim(TOOL, key, FP, LEASE_S)).kind

    async def complete(index: int, key: str) -> None:
        await store.complete(TOOL, key, {**OK_RESULT, "structuredContent": {"invoice": index}})

    async with anyio.create_task_group() as group:
        for index, key in enumerate(held):
            group.start_soon(complete, index, key)
        for key in [*fresh, held[1]]:
            group.start_soon(claim, key)

    assert [kinds[key] for key in fresh] == ["new"] * len(fresh)
    assert kinds[held[1]] in ("in_progress", "replay")
    for index, key in enumerate(held):
        replay = await store.claim(TOOL, key, FP, LEASE_S)
        assert replay.kind == "replay", key
        assert replay.result is not None
        assert replay.result["structuredContent"] == {"invoice": index}


async def test_fifty_concurrent_claims_of_one_key_yield_exactly_one_new(make_store: MakeStore) -> None:
    stores = [await make_store() for _ in range(10)]  # ten servers, each its own connection
    kinds: list[str] = []

    async def claim(store: IdempotencyStore) -> None:
        kinds.append((await store.claim(TOOL, "contended", FP, LEASE_S)).kind)

    async with anyio.create_task_group() as group:
        for _ in range(5):
            for store in stores:
                group.start_soon(claim, store)

    assert len(kinds) == 50
    assert kinds.count("new") == 1
    assert kinds.count("in_progress") == 49


async def test_one_servers_concurrent_claims_and_outcomes_each_get_their_own_answer(
    store: IdempotencyStore,
) -> None:
    # Sent together (one commit per batch): each caller must still hear about its own row.
    keys = [f"batch-{n}" for n in range(16)] + ["batch-3"]
    kinds: dict[int, str] = {}

    async def claim_and_complete(index: int, key: str) -> None:
        claim = await store.claim(TOOL, key, FP, LEASE_S)
        kinds[index] = claim.kind
        if claim.kind == "new":
            await store.complete(TOOL, key, {**OK_RESULT, "structuredContent": {"invoice": index}})

    async with anyio.create_task_group() as group:
        for index, key in enumerate(keys):
            group.start_soon(claim_and_complete, index, key)

    assert sorted(kinds[index] for index in (3, 16)) in (["in_progress", "new"], ["new", "replay"])
    assert all(kinds[index] == "new" for index in range(16) if index != 3)
    replays: dict[str, Claim] = {}

    async def replay(key: str) -> None:
        replays[key] = await store.claim(TOOL, key, FP if key != "batch-5" else OTHER_FP, LEASE_S)

    async with anyio.create_task_group() as group:
        for key in [*keys[:16], "never-claimed"]:
            group.start_soon(replay, key)

    assert replays.pop("never-claimed").kind == "new"
    assert replays.pop("batch-5").kind == "conflict_arguments"
    winner_of_3 = next(index for index in (3, 16) if kinds[index] == "new")
    for index, key in enumerate(keys[:16]):
        if key in replays:
            result = replays[key].result
            assert replays[key].kind == "replay", key
            assert result is not None
            assert result["structuredContent"] == {"invoice": winner_of_3 if key == "batch-3" else index}


async def test_two_processes_claiming_the_same_keys_get_one_new_per_key(worker: WorkerFactory) -> None:
    keys = [f"shared-{n}" for n in range(20)]
    processes = [worker(TOOL, FP, "5", "started", *keys) for _ in range(2)]
    for process in processes:
        assert wait_for_line(process) == "ready"
    for process in processes:
        release_worker(process)

    results = [json.loads(wait_for_line(process)) for process in processes]

    for index, key in enumerate(keys):
        kinds = sorted(result[index] for result in results)
        assert kinds == ["in_progress", "new"], f"{key}: {kinds}"


async def test_claim_of_a_killed_server_is_in_doubt_at_once(
    store: IdempotencyStore, worker: WorkerFactory
) -> None:
    process = worker(TOOL, FP, "5", "started", "charge-1")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new"]
    assert (await store.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "in_progress"

    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    assert (await store.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "in_doubt"
    record = await store.get(TOOL, "charge-1")
    assert record is not None
    assert "no longer running" in record.note


async def test_claim_of_a_frozen_server_is_in_doubt_once_its_heartbeat_is_stale(
    store: IdempotencyStore, worker: WorkerFactory
) -> None:
    heartbeat_s = 0.2
    process = worker(TOOL, FP, str(heartbeat_s), "started", "charge-1")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new"]

    os.kill(process.pid, signal.SIGSTOP)  # alive, but no longer beating
    try:
        await anyio.sleep(heartbeat_s * 5)
        assert (await store.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "in_doubt"
    finally:
        process.kill()
        os.kill(process.pid, signal.SIGCONT)
    record = await store.get(TOOL, "charge-1")
    assert record is not None
    assert "heartbeat" in record.note


async def test_a_live_servers_heartbeat_keeps_its_claims_in_progress(make_store: MakeStore) -> None:
    # Stale after 3 missed beats (3 s): longer than a loaded machine keeps a thread waiting.
    owner = await make_store(heartbeat_s=1.0)
    await owner.claim(TOOL, "k", FP, LEASE_S)
    await anyio.sleep(4.0)  # past the stale-after period: only beats can have kept it fresh
    observer = await make_store(heartbeat_s=1.0)

    assert (await observer.claim(TOOL, "k", FP, LEASE_S)).kind == "in_progress"


def test_the_heartbeat_waits_between_beats_on_its_own_loop_and_stops_at_once() -> None:
    """One thread a store, for its life: the wait between beats is on the heartbeat's own loop
    (no worker thread blocked beside it), and a stop wakes that wait at once."""
    beats: list[float] = []
    exited = threading.Event()

    async def beat() -> None:
        beats.append(time.monotonic())

    async def on_exit() -> None:
        exited.set()

    before = set(threading.enumerate())
    heartbeat = HeartbeatThread(beat, on_exit, interval_s=0.05)
    heartbeat.start()
    deadline = time.monotonic() + 60
    while len(beats) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(beats) >= 3  # it beats, and has waited between beats since
    assert [thread.name for thread in set(threading.enumerate()) - before] == ["idempotency-heartbeat"]

    slow = HeartbeatThread(beat, on_exit, interval_s=120)
    slow.start()
    heartbeat.stop()
    stopping = time.monotonic()
    slow.stop()  # its two minutes' wait ended by the stop (unwoken, the join would give up at 150 s)
    assert time.monotonic() - stopping < 60
    assert exited.is_set()
    assert not any(thread.is_alive() for thread in set(threading.enumerate()) - before)


async def test_closing_a_store_puts_its_running_claims_in_doubt(make_store: MakeStore) -> None:
    stopping, other_server = await make_store(), await make_store()
    await stopping.claim(TOOL, "k", FP, LEASE_S)
    await stopping.mark_started(TOOL, "k")

    await stopping.close()

    assert (await other_server.claim(TOOL, "k", FP, LEASE_S)).kind == "in_doubt"


async def test_closing_a_store_frees_its_claims_that_never_started(make_store: MakeStore) -> None:
    stopping, other_server = await make_store(), await make_store()
    await stopping.claim(TOOL, "k", FP, LEASE_S)

    await stopping.close()

    assert (await other_server.claim(TOOL, "k", FP, LEASE_S)).kind == "new"


async def test_claim_of_a_server_killed_before_the_body_started_is_taken_over(
    store: IdempotencyStore, worker: WorkerFactory
) -> None:
    process = worker(TOOL, FP, "5", "claimed", "charge-1")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new"]

    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    assert (await store.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "new"
    await store.mark_started(TOOL, "charge-1")  # ours now: no ClaimLostError
    assert (await store.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "in_progress"


async def test_two_servers_taking_over_a_dead_servers_claim_at_once_get_one_new(
    make_store: MakeStore, backend: str, store_target: str
) -> None:
    dead = await make_store()
    # Slow heartbeats: no sweep frees the dead server's claim while the two claim it.
    replicas = [await make_store(heartbeat_s=60.0), await make_store(heartbeat_s=60.0)]
    assert (await dead.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "new"
    assert isinstance(dead, SQLStore)
    dead.me.mark_closed()  # its process is gone (a pid of ours not open here), before its body began

    kinds = await claim_at_once(backend, store_target, replicas, TOOL, "charge-1", FP)

    assert sorted(kinds) == ["in_progress", "new"]


async def test_a_claim_that_recorded_its_start_is_in_doubt_once_its_server_is_killed(
    store: IdempotencyStore, worker: WorkerFactory
) -> None:
    # An async tool's claim: its body follows at once, so the claim says it started.
    process = worker(TOOL, FP, "5", "with-claim", "charge-1")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new"]

    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    retry = await store.claim(TOOL, "charge-1", FP, LEASE_S)
    assert (retry.kind, retry.reconcilable) == ("in_doubt", True)


async def test_a_paused_server_whose_claim_was_taken_over_does_not_start_the_body(
    store: IdempotencyStore, worker: WorkerFactory
) -> None:
    heartbeat_s = 0.2
    process = worker(TOOL, FP, str(heartbeat_s), "later", "charge-1")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new"]

    os.kill(process.pid, signal.SIGSTOP)  # alive, but no longer beating
    try:
        await anyio.sleep(heartbeat_s * 5)
        assert (await store.claim(TOOL, "charge-1", FP, LEASE_S)).kind == "new"
    finally:
        os.kill(process.pid, signal.SIGCONT)
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["lost"]
    process.kill()
    process.wait(timeout=30)


async def test_an_in_doubt_key_is_reconcilable_only_when_no_body_can_still_run(
    store: IdempotencyStore,
) -> None:
    for key, still_running in [("ended", False), ("abandoned", True)]:
        await store.claim(TOOL, key, FP, LEASE_S)
        await store.mark_started(TOOL, key)
        await store.mark_in_doubt(TOOL, key, "timed out", still_running=still_running)

    ended, abandoned = [await store.claim(TOOL, key, FP, LEASE_S) for key in ("ended", "abandoned")]
    assert (ended.kind, ended.reconcilable) == ("in_doubt", True)
    assert (abandoned.kind, abandoned.reconcilable) == ("in_doubt", False)


async def test_heartbeat_sweep_lists_a_dead_servers_claims_as_in_doubt(
    make_store: MakeStore, worker: WorkerFactory
) -> None:
    process = worker(TOOL, FP, "5", "started", "a", "b")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new", "new"]
    process.kill()
    process.wait(timeout=30)

    observer = await make_store()  # opening sweeps, as `keys list` does

    assert await observer.in_doubt_count() == 2
    assert sorted(r.key for r in await observer.list_keys(in_doubt_only=True)) == ["a", "b"]


async def test_heartbeat_sweep_frees_a_dead_servers_claims_that_never_started(
    make_store: MakeStore, worker: WorkerFactory
) -> None:
    process = worker(TOOL, FP, "5", "claimed", "a", "b")
    assert wait_for_line(process) == "ready"
    release_worker(process)
    assert json.loads(wait_for_line(process)) == ["new", "new"]
    process.kill()
    process.wait(timeout=30)

    observer = await make_store()  # opening sweeps, as `keys list` does

    assert await observer.in_doubt_count() == 0
    assert await observer.get(TOOL, "a") is None
    assert await observer.get(TOOL, "b") is None


# --- the operator's side ----------------------------------------------------------


async def test_settle_done_makes_retries_replay_an_operator_result(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.mark_in_doubt(TOOL, "k")

    assert await store.settle(TOOL, "k", "done", "provider shows invoice 7 sent")

    replay = await store.claim(TOOL, "k", FP, LEASE_S)
    assert replay.kind == "replay"
    assert replay.result is not None
    # An error-flagged answer: the original result (and its structured content) is lost.
    assert replay.result["isError"] is True
    assert replay.result["_meta"]["error"]["retryable"] is False
    text = replay.result["content"][0]["text"]
    assert "confirmed that it completed" in text
    assert "provider shows invoice 7 sent" in text
    assert await store.in_doubt_count() == 0


async def test_settle_failed_releases_the_key_so_a_retry_runs(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.mark_in_doubt(TOOL, "k")

    assert await store.settle(TOOL, "k", "failed")

    assert (await store.claim(TOOL, "k", FP, LEASE_S)).kind == "new"


async def test_settle_refuses_keys_that_are_not_in_doubt(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "running", FP, LEASE_S)
    await store.claim(TOOL, "completed", FP, LEASE_S)
    await store.complete(TOOL, "completed", OK_RESULT)

    assert not await store.settle(TOOL, "unknown", "done")
    assert not await store.settle(TOOL, "running", "failed")
    assert not await store.settle(TOOL, "completed", "failed")
    assert (await store.claim(TOOL, "completed", FP, LEASE_S)).result == OK_RESULT


async def test_list_keys_newest_first_with_age_and_limit(store: IdempotencyStore) -> None:
    began = time.monotonic()
    for key in ["first", "second", "third"]:
        await store.claim(TOOL, key, FP, LEASE_S)
        await anyio.sleep(0.01)
    await store.mark_in_doubt(TOOL, "second", "timed out")

    records = await store.list_keys(limit=2)
    in_doubt = await store.list_keys(in_doubt_only=True)
    waited = time.monotonic() - began

    assert [r.key for r in records] == ["third", "second"]
    assert [(r.key, r.state, r.note) for r in in_doubt] == [("second", "in_doubt", "timed out")]
    assert 0 <= records[0].age_s <= records[1].age_s <= waited, [(r.key, r.age_s) for r in records]
    assert [r.fingerprint for r in records] == [FP, FP]


async def test_health_check_is_ok_then_degraded_with_keys_in_doubt(store: IdempotencyStore) -> None:
    assert (await store.check())[0] == "ok"
    await store.claim(TOOL, "k", FP, LEASE_S)
    await store.mark_in_doubt(TOOL, "k")

    status, detail = await store.check()

    assert status == "degraded"
    assert "1 keys in doubt" in detail


async def test_health_check_of_a_closed_store_is_failing(store: IdempotencyStore) -> None:
    await store.close()

    assert (await store.check())[0] == "failing"
