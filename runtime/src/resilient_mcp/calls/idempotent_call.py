"""A side-effecting call behind the idempotency table: claimed before it runs, answered once.

Two phases around the run, which `calls.tool_call` does between them: `claim_key` answers a
known key without running anything or holds a new one, and `HeldKey.record` stores the
outcome (`HeldKey.interrupted` when the call ended with none).

How the call ended decides what the table keeps: a success or a business refusal is
stored and replayed to every retry; a failure that promises nothing was applied (bad
input, the tool's own TransientError), or a call that never reached the tool body,
frees the key; anything else after the body started (a crash, a time limit, a
cancellation) leaves the key in doubt, never re-run on its own. A tool's `reconcile`
function, when it has one, settles a key in doubt on the next retry.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.types import CallToolResult, InputRequiredResult

from resilient_mcp.authoring.errors import StoreUnavailableError, TableLostError
from resilient_mcp.authoring.outcomes import Attempts, Category, Failure
from resilient_mcp.authoring.tool import Reconcile, Reconciled
from resilient_mcp.calls.resilience import classify
from resilient_mcp.calls.running import Body
from resilient_mcp.project import this_project
from resilient_mcp.store import Claim, IdempotencyStore, Outcome
from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.text import clip

log = get_logger(__name__)

STORED = {"terminal", "partial", "too_large"}  # the call ended and the model saw this: replay it
FREED = {"invalid_input", "transient"}  # nothing happened: the key is new again
RECONCILE_TIMEOUT_S = 10.0
# How long an outcome's write is retried while the store does not answer (a database that
# restarts after a crash takes seconds): unrecorded, a success already sent would be in doubt.
RECORD_RETRY_S = 10.0
_RECORD_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)
RECONCILED_NOTE = "settled by the tool's reconcile function"


async def claim_key(
    store: IdempotencyStore,
    *,
    caller: str,
    tool: str,
    key: str,
    fingerprint: str,
    lease_s: float,
    correlation_id: str,
    reconcile: Reconcile | None = None,
    start_with_claim: bool = False,
) -> HeldKey | Attempts:
    """Claim (caller, tool, key) before the tool runs: the key held for this call, or the answer
    without running (a replay, a conflict, a key in doubt, the store not answering). Another
    caller's key is a new key: its row is never read, so no answer tells that it exists.

    `start_with_claim`: nothing can come between the claim and the body (an async tool
    that asks the client nothing first), so the claim records the body's start itself,
    where the store finds that worth it (`start_in_claim`).
    """
    start_with_claim = start_with_claim and store.start_in_claim
    try:
        claim = await store.claim(tool, key, fingerprint, lease_s, caller=caller, started=start_with_claim)
        if claim.kind == "in_doubt" and reconcile is not None and claim.reconcilable:
            claim = await _reconciled(
                store, caller, tool, key, fingerprint, lease_s, reconcile, start_with_claim
            )
    except StoreUnavailableError as exc:
        return Attempts(failure=classify(exc, tool, correlation_id))
    if claim.kind != "new":
        return _answer_without_running(claim, tool, key)
    on_start = None if start_with_claim else functools.partial(store.mark_started, tool, key, caller=caller)
    return HeldKey(store, caller, tool, key, Body(on_start=on_start))


class HeldKey:
    """A key claimed for one call: the body runs once, then the table keeps how it ended."""

    __slots__ = ("body", "caller", "key", "store", "tool")

    def __init__(self, store: IdempotencyStore, caller: str, tool: str, key: str, body: Body) -> None:
        self.store = store
        self.caller = caller  # whose key it is: every write names it
        self.tool = tool
        self.key = key
        self.body = body  # the call's current body while it runs: its start is marked in the row

    async def record(self, outcome: Attempts, correlation_id: str) -> Attempts:
        """Store how the call ended for every retry; the answer marked with its key."""
        await _record(self, outcome, correlation_id)
        if isinstance(outcome.result, CallToolResult):
            outcome.result = _marked(outcome.result, self.key, replayed=False)
        return outcome

    async def interrupted(self, why: str) -> None:
        """The call ended with no outcome (cancelled, a protocol error): freed or in doubt."""
        with anyio.CancelScope(shield=True):
            await _unfinished(self, why)


def _answer_without_running(claim: Claim, tool: str, key: str) -> Attempts:
    if claim.kind == "replay":
        assert claim.result is not None
        result = _marked(CallToolResult.model_validate(claim.result), key, replayed=True)
        return Attempts(result=result, replayed=True)
    if claim.kind == "conflict_arguments":
        return _refused(
            "conflict",
            f"idempotency key {key!r} was already used for {tool} with other arguments; nothing was run. "
            "Use a new key for a new operation, or resend the original arguments to get the original result",
        )
    if claim.kind == "in_progress":
        wait = claim.retry_after_s or 1.0
        return _refused(
            "conflict",
            f"a call to {tool} with idempotency key {key!r} is still running; nothing new was started. "
            f"Retry with the same key and arguments in {wait:g} s to get its result",
            retryable=True,
            retry_after_s=wait,
        )
    if claim.kind == "legacy":
        return _refused(
            "conflict",
            f"idempotency key {key!r} for {tool} was stored before this server kept each caller's keys "
            "apart, so it cannot tell whose it was; nothing was run. If this call retries one made "
            "before that, check first whether that call took effect; then use a new key",
            retryable=False,
        )
    return _refused(
        "in_doubt",
        f"an earlier call to {tool} with idempotency key {key!r} was interrupted and may or may not "
        "have taken effect; it will not be run again automatically. Check the outside system "
        f"before anything else; an operator can settle the key with `{this_project().slug} keys settle`",
    )


async def _reconciled(
    store: IdempotencyStore,
    caller: str,
    tool: str,
    key: str,
    fingerprint: str,
    lease_s: float,
    reconcile: Reconcile,
    start_with_claim: bool,
) -> Claim:
    """Ask the tool's reconcile function about a key in doubt; settle it and claim again if it knows."""
    verdict = await _ask(reconcile, tool, key)
    log.info("idempotency_reconciled", tool=tool, verdict=verdict)
    if verdict == "unknown":
        return Claim("in_doubt")
    outcome: Outcome = "done" if verdict == "done" else "failed"
    await store.settle(tool, key, outcome, RECONCILED_NOTE, caller=caller)
    # done: a replay; not_done: new
    return await store.claim(tool, key, fingerprint, lease_s, caller=caller, started=start_with_claim)


async def _ask(reconcile: Reconcile, tool: str, key: str) -> Reconciled:
    try:
        with anyio.fail_after(RECONCILE_TIMEOUT_S):
            if inspect.iscoroutinefunction(reconcile):
                answer: object = await reconcile(key)
            else:
                answer = await anyio.to_thread.run_sync(reconcile, key, abandon_on_cancel=True)
    except Exception:
        log.error("idempotency_reconcile_failed", tool=tool, exc_info=True)
        return "unknown"
    if answer not in ("done", "not_done", "unknown"):
        log.error("idempotency_reconcile_failed", tool=tool, answer=clip(repr(answer), 100, mark=""))
        return "unknown"
    return answer


async def _record(held: HeldKey, outcome: Attempts, correlation_id: str) -> None:
    store, caller, tool, key = held.store, held.caller, held.tool, held.key
    category = outcome.failure.category if outcome.failure else None
    final = outcome.result
    if outcome.failure is not None and category in STORED:
        final = outcome.failure.result(correlation_id)
    if isinstance(final, InputRequiredResult):  # asked the client first: the next round claims again
        await _unfinished(held, "asked the client for input")
    elif final is not None:
        result = final.model_dump(mode="json", by_alias=True, exclude_none=True)
        await _write(functools.partial(store.complete, tool, key, result, caller=caller))
    elif category in FREED:
        await _write(functools.partial(store.release, tool, key, caller=caller))
    else:
        await _unfinished(held, f"{category} during the call")


async def _unfinished(held: HeldKey, why: str) -> None:
    """A call that ended without an outcome: free if its body never started, else in doubt."""
    store, caller, tool, key, body = held.store, held.caller, held.tool, held.key, held.body
    if not body.started:
        await _write(functools.partial(store.release, tool, key, caller=caller))
    else:
        still = body.still_running
        mark = functools.partial(store.mark_in_doubt, tool, key, note=why, caller=caller, still_running=still)
        await _write(mark)


async def write_retried(
    operation: Callable[[], Awaitable[object]], *, retry_s: float = RECORD_RETRY_S
) -> bool:
    """Write an outcome, retried for `retry_s` while the store does not answer; never cut short.
    False (and an error logged) when it could not be written.

    Each write is safe to repeat (it changes only a row this server still owns, in the state
    it left it), so a write whose commit went unconfirmed is simply sent again.
    """
    give_up = time.monotonic() + retry_s
    with anyio.CancelScope(shield=True):
        for pause in itertools.chain(_RECORD_BACKOFF_S, itertools.repeat(_RECORD_BACKOFF_S[-1])):
            try:
                await operation()
                return True
            except TableLostError:
                break  # the table will not come back while this server runs
            except StoreUnavailableError:
                if time.monotonic() + pause > give_up:
                    break
                await anyio.sleep(pause)
    log.error("store_write_failed", retried_s=retry_s)
    return False


async def _write(operation: Callable[[], Awaitable[None]]) -> None:
    """Record a key's outcome; not recorded, the claim stays pending, then becomes in doubt
    (never re-run by itself)."""
    await write_retried(operation)


def _marked(result: CallToolResult, key: str, *, replayed: bool) -> CallToolResult:
    meta: dict[str, Any] = dict(result.meta or {})
    meta["idempotency"] = {"key": key, "replayed": replayed}
    return result.model_copy(update={"meta": meta})


def _refused(
    category: Category, message: str, *, retryable: bool | None = None, retry_after_s: float | None = None
) -> Attempts:
    failure = Failure.refusal(category, message, retryable=retryable, retry_after_s=retry_after_s)
    return Attempts(failure=failure)
