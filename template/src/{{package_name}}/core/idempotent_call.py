# Template-owned: `copier update` replaces this file; put your code in tools/.
"""A side-effecting call behind the idempotency table: claimed before it runs, answered once.

How the call ended decides what the table keeps: a success or a business refusal is
stored and replayed to every retry; a failure that happened before any effect (bad
input, a transient error the tool reported) frees the key; anything that may have
stopped half-way (a time limit, a crash) leaves the key in doubt, never re-run on its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.types import CallToolResult

from .idempotency import IdempotencyStore, StoreUnavailableError
from .logs import get_logger
from .outcomes import Category
from .project import SLUG
from .resilience import Attempts, Failure, classify

log = get_logger(__name__)

STORED = {"terminal", "partial"}  # the tool said how it ended: replay that
FREED = {"invalid_input", "transient"}  # nothing happened: the key is new again


async def run_once(
    store: IdempotencyStore,
    *,
    tool: str,
    key: str,
    fingerprint: str,
    lease_s: float,
    correlation_id: str,
    run: Callable[[Attempts], Awaitable[Attempts]],
) -> Attempts:
    """Claim (tool, key), run at most once, and record the outcome for every retry."""
    try:
        claim = await store.claim(tool, key, fingerprint, lease_s)
    except StoreUnavailableError as exc:
        return Attempts(failure=classify(exc, tool, correlation_id))
    if claim.kind == "replay":
        assert claim.result is not None
        return Attempts(result=_marked(CallToolResult.model_validate(claim.result), key, replayed=True))
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
    if claim.kind == "in_doubt":
        return _refused(
            "in_doubt",
            f"an earlier call to {tool} with idempotency key {key!r} was interrupted and may or may not "
            "have taken effect; it will not be run again automatically. Check the outside system "
            f"before anything else; an operator can settle the key with `{SLUG} keys settle`",
        )

    outcome = await run(Attempts())
    await _record(store, tool, key, outcome, correlation_id)
    if outcome.result is not None:
        outcome.result = _marked(outcome.result, key, replayed=False)
    return outcome


async def _record(
    store: IdempotencyStore, tool: str, key: str, outcome: Attempts, correlation_id: str
) -> None:
    category = outcome.failure.category if outcome.failure else None
    final = outcome.result
    if outcome.failure is not None and category in STORED:
        final = outcome.failure.result(correlation_id)
    try:
        if final is not None:
            await store.complete(tool, key, final.model_dump(mode="json", by_alias=True, exclude_none=True))
        elif category in FREED:
            await store.release(tool, key)
        else:
            await store.mark_in_doubt(tool, key, note=f"{category} during the call")
    except StoreUnavailableError:
        # The effect happened but is not recorded: the claim stays pending, then in doubt.
        log.error("idempotency_record_failed", tool=tool, key=key, category=category)


def _marked(result: CallToolResult, key: str, *, replayed: bool) -> CallToolResult:
    meta: dict[str, Any] = dict(result.meta or {})
    meta["idempotency"] = {"key": key, "replayed": replayed}
    return result.model_copy(update={"meta": meta})


def _refused(
    category: Category, message: str, *, retryable: bool | None = None, retry_after_s: float | None = None
) -> Attempts:
    failure = Failure.refusal(category, message, retryable=retryable, retry_after_s=retry_after_s)
    return Attempts(failure=failure)


class StoreHandle:
    """The store, opened once on first use in the serving event loop (or at start-up)."""

    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store
        self._opened = False
        self._lock: anyio.Lock | None = None

    async def get(self) -> IdempotencyStore:
        """The open store; FatalError when it cannot be opened."""
        if not self._opened:
            self._lock = self._lock or anyio.Lock()
            async with self._lock:
                if not self._opened:
                    await self.store.open()
                    await self.store.purge_expired(self.store.ttl_s)
                    self._opened = True
        return self.store

    async def close(self) -> None:
        if self._opened:
            self._opened = False
            await self.store.close()
