"""Core behaviours that a mutation run of the core found unpinned, one test each.

Each test fails on a one-line breakage (a flipped condition, a dropped check, a wrong
category) that every other test let through.
"""

from __future__ import annotations

import asyncio
import functools
import os
import select
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import UnexpectedToolError
from starlette.types import Message, Receive, Scope, Send

from idempotency_support import MakeStore
from resilient_mcp.authoring.checks import Check
from resilient_mcp.authoring.errors import FatalError, Part, PartialResult, ResultTooLargeError
from resilient_mcp.authoring.outcomes import Attempts, partial_failure
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.calls import idempotent_call
from resilient_mcp.calls.fatal_exit import FatalExit
from resilient_mcp.calls.idempotent_call import HeldKey, claim_key
from resilient_mcp.calls.request_state import check_shared_request_state
from resilient_mcp.calls.resilience import classify
from resilient_mcp.calls.shutdown import Shutdown
from resilient_mcp.calls.time_limit import time_limits
from resilient_mcp.http.bearer import read_tokens_file
from resilient_mcp.http.exposure import check_exposure, is_loopback
from resilient_mcp.http.json_bounds import ObjectMemberLimit
from resilient_mcp.http.slow_clients import BodyReadTimeout, ProbesOnly
from resilient_mcp.server.health_tool import run_checks
from resilient_mcp.store import LOCAL_CALLER, Claim, IdempotencyStore, fingerprint
from resilient_mcp.store.instances import Instance, OwnerRow, owner_gone_reason
from resilient_mcp.store.rules import ExistingKey, judge
from resilient_mcp.store.sqlite import SQLiteStore
from resilient_mcp.store.store import BODY_NOT_STARTED, BODY_RUNNING, STALE_AFTER_BEATS
from resilient_mcp.telemetry.redaction import redact_text
from resilient_mcp.telemetry.stderr_writer import NonBlockingStderr

pytest_plugins = ["conftest_idempotency"]

TOOL = "send_invoice"
FP = fingerprint({"customer": "c-42", "amount_cents": 1999})


def wrapped(cause: BaseException) -> UnexpectedToolError:
    """What the SDK raises around a tool's exception."""
    try:
        raise UnexpectedToolError("Error executing tool charge") from cause
    except UnexpectedToolError as exc:
        return exc


# --- outcomes ----------------------------------------------------------------------


def test_a_partial_result_is_retryable_when_any_failed_part_is() -> None:
    parts = [
        Part("a.txt", True, "120 words"),
        Part("b.txt", False, error="the disk is busy", retryable=True),
        Part("c.txt", False, error="not found"),
    ]

    result = partial_failure(parts, "c1")

    assert result.meta is not None
    assert result.meta["error"]["retryable"] is True, "retrying the failed parts may help b.txt"


def test_a_side_effects_result_too_large_to_send_is_too_large_not_in_doubt() -> None:
    # The tool finished; only its answer was refused: the model must not be told it may not have run.
    failure = classify(wrapped(ResultTooLargeError("too big")), "charge", "c1", side_effect=True)

    assert failure.category == "too_large"


# --- idempotency rules ---------------------------------------------------------------


def test_a_dead_servers_claim_whose_start_mark_may_be_lost_is_in_doubt_not_taken_over() -> None:
    # "Not started" proves nothing when the start mark may have been lost (a machine restart).
    now = time.time()
    existing = ExistingKey(
        fingerprint=FP,
        state="pending",
        result_json=None,
        lease_until=now + 60,
        owner=None,  # the server that claimed it is gone
        body=BODY_NOT_STARTED,
        start_record_intact=False,
    )

    verdict = judge(existing, FP, now, Instance.new(5.0))

    assert (verdict.claim.kind, verdict.take_over) == ("in_doubt", False)


def test_after_its_own_database_outage_a_server_judges_no_other_by_its_missed_heartbeats() -> None:
    # While the database was down, every server's heartbeat stopped alike.
    now = time.time()
    me = Instance.new(5.0)
    other = OwnerRow("other", "other-host:other-boot:1", "other-host", 4242, now - 60, 5.0)
    assert owner_gone_reason(other, me, now) is not None, "60 s without a heartbeat: gone"

    me.reachability.failed()
    assert owner_gone_reason(other, me, now) is None, "this server cannot reach the database either"
    me.reachability.reached(now - 1)
    assert owner_gone_reason(other, me, now) is None, "reached again, but not for a whole stale window"


@pytest.mark.anyio
async def test_a_started_claim_past_its_lease_is_not_reconcilable_while_its_server_lives(
    store: IdempotencyStore,
) -> None:
    # Its body may still be running: a reconcile function must not settle it yet.
    await store.claim(TOOL, "k", FP, 0.2)
    await store.mark_started(TOOL, "k")
    await anyio.sleep(0.3)

    claim = await store.claim(TOOL, "k", FP, 60.0)

    assert (claim.kind, claim.reconcilable) == ("in_doubt", False)


@pytest.mark.anyio
async def test_a_call_still_running_is_not_counted_as_in_doubt(store: IdempotencyStore) -> None:
    await store.claim(TOOL, "running", FP, 60.0)
    await store.mark_started(TOOL, "running")

    assert await store.in_doubt_count() == 0
    assert (await store.check())[0] == "ok"


def test_sqlite_trusts_a_missing_start_mark_only_since_this_machines_boot(tmp_path: Path) -> None:
    # A start mark SQLite left in the page cache is lost when the machine restarts.
    store = SQLiteStore(tmp_path / "idempotency.sqlite3")
    store.me = Instance("me", "host:boot-a:1", "host", 1, 5.0)

    def owner(host_id: str) -> OwnerRow:
        return OwnerRow("other", host_id, "host", 4242, time.time(), 5.0)

    assert store._start_record_intact(owner("host:boot-a:1"))
    assert not store._start_record_intact(owner("host:boot-b:1")), "written before a restart"


@pytest.mark.anyio
async def test_a_side_effects_partial_result_is_replayed_not_left_in_doubt(store: IdempotencyStore) -> None:
    # The parts that worked must not be redone: a retry with the key gets the same answer.
    held = await claim_key(
        store, caller=LOCAL_CALLER, tool=TOOL, key="k", fingerprint=FP, lease_s=60.0, correlation_id="c1"
    )
    assert isinstance(held, HeldKey)
    await held.body.begin()
    parts = [Part("a", True, "sent"), Part("b", False, error="refused")]
    failure = classify(wrapped(PartialResult(parts)), TOOL, "c1", side_effect=True)

    await held.record(Attempts(failure=failure, count=1), "c1")

    retry = await store.claim(TOOL, "k", FP, 60.0)
    assert retry.kind == "replay"
    assert retry.result is not None
    assert retry.result["_meta"]["error"]["category"] == "partial"


async def _at_once(*calls: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Sent together: a backend that batches concurrent statements sends them as one."""
    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(call)


@pytest.mark.anyio
async def test_claims_sent_together_that_record_their_start_are_in_doubt_once_their_server_stops(
    make_store: MakeStore,
) -> None:
    first = await make_store()
    keys = [f"started-{n}" for n in range(8)]
    claimed = time.time()
    await _at_once(*(functools.partial(first.claim, TOOL, key, FP, 60.0, started=True) for key in keys))
    records = [await first.get(TOOL, key) for key in keys]
    assert all(r is not None and r.updated_at >= r.created_at >= claimed - 60 for r in records)
    await first.close()  # its bodies began: they may have had their effect

    second = await make_store()

    assert [(await second.claim(TOOL, key, FP, 60.0)).kind for key in keys] == ["in_doubt"] * len(keys)


@pytest.mark.anyio
async def test_outcomes_sent_together_by_a_server_that_does_not_own_the_keys_are_not_stored(
    make_store: MakeStore,
) -> None:
    owner, other = await make_store(), await make_store()
    keys = [f"owned-{n}" for n in range(8)]
    for key in keys:
        await owner.claim(TOOL, key, FP, 60.0)

    result = {"content": [{"type": "text", "text": "not mine"}], "isError": False}
    await _at_once(*(functools.partial(other.complete, TOOL, key, result) for key in keys))

    assert [(await owner.get(TOOL, key) or pytest.fail(key)).state for key in keys] == ["pending"] * len(keys)


@pytest.mark.anyio
async def test_a_body_that_began_is_in_doubt_once_its_server_stops(make_store: MakeStore) -> None:
    first = await make_store()
    held = await claim_key(
        first, caller=LOCAL_CALLER, tool=TOOL, key="k", fingerprint=FP, lease_s=60.0, correlation_id="c1"
    )
    assert isinstance(held, HeldKey)
    await held.body.begin()  # right before the tool body: from here its effect may happen
    await first.close()

    second = await make_store()

    assert (await second.claim(TOOL, "k", FP, 60.0)).kind == "in_doubt", "never run a second time"


@pytest.mark.parametrize("missed", [1, 2])
def test_a_server_that_missed_one_or_two_heartbeats_is_not_judged_gone(missed: int) -> None:
    # Judged gone, its claim would be in doubt and reconcilable while its body still runs.
    now, beat = time.time(), 5.0
    me = Instance.new(beat)
    late = OwnerRow("other", "other-host:other-boot:1", "other-host", 4242, now - (missed + 0.9) * beat, beat)
    running = ExistingKey(FP, "pending", None, now + 60, late, BODY_RUNNING, start_record_intact=True)

    assert owner_gone_reason(late, me, now) is None
    assert judge(running, FP, now, me).claim.kind == "in_progress"
    silent = replace(late, heartbeat_at=now - (STALE_AFTER_BEATS + 0.5) * beat)
    assert judge(replace(running, owner=silent), FP, now, me).claim == Claim("in_doubt", reconcilable=True)


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["raises", "hangs"])
async def test_a_reconcile_that_fails_or_hangs_past_its_bound_leaves_the_key_in_doubt(
    store: IdempotencyStore, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taken for "not done", the key would be freed and the retry would run the effect again.
    monkeypatch.setattr(idempotent_call, "RECONCILE_TIMEOUT_S", 0.2)
    await store.claim(TOOL, "k", FP, 60.0)
    await store.mark_started(TOOL, "k")
    await store.mark_in_doubt(TOOL, "k", "timed out")
    asked: list[str] = []

    async def reconcile(key: str) -> Any:
        asked.append(key)
        if how == "raises":
            raise ConnectionError("the payment API did not answer")
        await anyio.sleep(60)
        return "not_done"

    retries = [
        await claim_key(
            store,
            caller=LOCAL_CALLER,
            tool=TOOL,
            key="k",
            fingerprint=FP,
            lease_s=60.0,
            correlation_id="c1",
            reconcile=reconcile,
        )
        for _ in range(2)
    ]

    assert asked == ["k", "k"], "each retry asked"
    for retry in retries:
        assert isinstance(retry, Attempts), "nothing to run: the key was not handed out"
        assert retry.failure is not None
        assert retry.failure.category == "in_doubt"
    assert (record := await store.get(TOOL, "k")) is not None
    assert record.state == "in_doubt"


@pytest.mark.anyio
async def test_a_key_in_doubt_whose_server_is_gone_is_reconciled_by_its_retry(make_store: MakeStore) -> None:
    # Its body was left running in a thread of that server: gone with it, it can run no more.
    first = await make_store()
    await first.claim(TOOL, "k", FP, 60.0)
    await first.mark_started(TOOL, "k")
    await first.mark_in_doubt(TOOL, "k", "timed out", still_running=True)
    await first.close()
    second = await make_store()
    asked: list[str] = []

    def reconcile(key: str) -> Any:
        asked.append(key)
        return "done"

    retry = await claim_key(
        second,
        caller=LOCAL_CALLER,
        tool=TOOL,
        key="k",
        fingerprint=FP,
        lease_s=60.0,
        correlation_id="c1",
        reconcile=reconcile,
    )

    assert asked == ["k"]
    assert isinstance(retry, Attempts)
    assert retry.replayed, "settled as done: the retry is told so, and nothing runs"


# --- redaction ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["ghp", "gho", "ghu", "ghs", "ghr"])
def test_every_kind_of_github_token_is_redacted(prefix: str) -> None:
    # Lowercase and digits only: the long-random-run rule alone would keep it.
    token = f"{prefix}_0123456789abcdefghijklmnopqrstuvwxyz"

    assert token not in redact_text(f"using {token} for the push")


@pytest.mark.parametrize("label", ["EC", "OPENSSH", "DSA", ""])
def test_a_private_key_of_any_kind_is_redacted_whole(label: str) -> None:
    # A short body line is no long base64 run: only the PEM rule hides it.
    marker = f"{label} PRIVATE KEY-----".lstrip()
    key = f"-----BEGIN {marker}\nMHcCAQEEIBk0cmFuZG9t\n-----END {marker}"

    redacted = redact_text(f"loaded {key} from the vault")

    assert "MHcCAQEEIBk0cmFuZG9t" not in redacted
    assert "[redacted]" in redacted


def test_a_jwt_with_short_parts_is_redacted() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"

    assert redact_text(f"token {jwt} expired") == "token [redacted] expired"


# --- bearer tokens, exposure ---------------------------------------------------------


def test_a_tokens_file_line_with_more_than_a_subject_and_a_token_is_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {'a' * 40} {'b' * 40}\n")

    with pytest.raises(FatalError, match="line 1"):
        read_tokens_file(tokens)


def test_a_bind_to_a_private_address_is_not_loopback_and_needs_allowed_hosts(tmp_path: Path) -> None:
    assert not is_loopback("10.1.2.3")
    assert not is_loopback("0.0.0.0")
    with pytest.raises(FatalError, match="ALLOWED_HOSTS"):
        check_exposure(CoreSettings(data_dir=tmp_path, allowed_hosts=[]), "10.1.2.3")


def test_stateless_http_without_shared_request_state_keys_is_refused(tmp_path: Path) -> None:
    settings = CoreSettings(data_dir=tmp_path, http_stateless=True, request_state_keys=[])

    with pytest.raises(FatalError, match="REQUEST_STATE_KEYS"):
        check_shared_request_state(settings)


# --- request bounds ------------------------------------------------------------------


class Recorder:
    """An ASGI app that reads the whole body, and what was sent to the client."""

    def __init__(self) -> None:
        self.called = False
        self.sent: list[Message] = []

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.called = True
        while (await receive()).get("more_body", False):
            pass

    async def send(self, message: Message) -> None:
        self.sent.append(message)


@pytest.mark.anyio
async def test_a_caller_auth_turns_away_gets_its_401_without_its_body_being_read() -> None:
    reads = 0

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        """The auth middleware's 401 comes next: it reads nothing."""

    scope = {"type": "http", "method": "POST", "user": SimpleNamespace(is_authenticated=False)}
    await ObjectMemberLimit(refuse, 1000)(scope, receive, Recorder().send)

    assert reads == 0


@pytest.mark.anyio
async def test_the_body_time_limit_is_for_the_whole_body_not_each_chunk() -> None:
    recorder = Recorder()

    chunks = 6

    async def trickle() -> Message:
        nonlocal chunks
        await anyio.sleep(0.15)  # each chunk well within the limit, the body not
        chunks -= 1
        return {"type": "http.request", "body": b"x", "more_body": chunks > 0}

    await BodyReadTimeout(recorder.app, 0.4)({"type": "http"}, trickle, recorder.send)

    assert recorder.sent[0]["status"] == 408


@pytest.mark.anyio
async def test_a_connection_past_the_limit_serves_only_the_probes() -> None:
    recorder = Recorder()

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    await ProbesOnly(recorder.app)(scope, receive, recorder.send)

    assert not recorder.called
    assert recorder.sent[0]["status"] == 503


# --- time limit, fatal exit ----------------------------------------------------------


@pytest.mark.anyio
async def test_a_shorter_limit_started_after_a_longer_one_stops_its_call_at_its_own_deadline() -> None:
    limits = time_limits(None)
    long_deadline = limits.start(3600.0)
    try:
        short_deadline = limits.start(0.05)
        with pytest.raises(asyncio.CancelledError) as stopped:
            await asyncio.sleep(5)  # the short limit ends this long before
        assert short_deadline.caused(stopped.value)
        limits.stop(short_deadline)
    finally:
        limits.stop(long_deadline)


def test_a_fatal_error_exits_only_once_the_answer_to_its_own_call_is_written() -> None:
    fatal_exit, exits = FatalExit(grace_s=3600.0), []
    fatal_exit.exit_now = lambda: exits.append("exit")  # type: ignore[method-assign]
    fatal_exit.arm("7")

    fatal_exit.written('{"jsonrpc": "2.0", "id": 3, "result": {}}')
    assert exits == [], "another call's answer: the fatal call's is not written yet"
    fatal_exit.written('{"jsonrpc": "2.0", "id": 7, "result": {}}')
    assert exits == ["exit"]


@pytest.mark.anyio
async def test_a_cancellation_the_shutdown_did_not_make_is_not_taken_for_its_cut() -> None:
    # A client's cancellation unwinds the call; only the shutdown's own cut is answered instead.
    assert not Shutdown(grace_s=1.0).caused(asyncio.CancelledError())


@pytest.mark.anyio
async def test_a_health_check_that_does_not_answer_in_time_is_failing() -> None:
    async def hangs() -> Check:
        await anyio.sleep(3600)
        return Check(status="ok")

    results = await run_checks({"database": hangs}, limit_s=0.05)

    assert results["database"].status == "failing"


# --- stderr ------------------------------------------------------------------------


def test_the_stderr_queue_is_bounded_and_its_room_comes_back_as_the_pipe_drains() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    writer = NonBlockingStderr(write_end, max_queued_bytes=300)
    line = b"x" * 99 + b"\n"
    dropped_by_round = []
    try:
        for _ in range(2):  # the second round finds the room the first one's lines took free again
            while select.select([], [write_end], [], 0)[1]:
                os.write(write_end, b"." * select.PIPE_BUF)  # the host stops reading
            before = writer.dropped
            for _ in range(5):
                writer.write_bytes(line)  # 300 bytes queued, and one line the thread may hold
            dropped_by_round.append(writer.dropped - before)
            received, deadline = bytearray(), time.monotonic() + 30
            while received.count(line) < 5 - dropped_by_round[-1] and time.monotonic() < deadline:
                try:
                    received.extend(os.read(read_end, 1 << 16))  # the host reads again
                except BlockingIOError:
                    time.sleep(0.01)
            writer.flush()
        assert all(1 <= dropped <= 2 for dropped in dropped_by_round), dropped_by_round
    finally:
        os.close(read_end)
