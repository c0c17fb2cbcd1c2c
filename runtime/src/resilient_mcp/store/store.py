"""The idempotency table's interface and the values both backends share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from resilient_mcp.authoring.outcomes import failure
from resilient_mcp.records import record

if TYPE_CHECKING:
    from resilient_mcp.authoring.checks import HealthStatus
    from resilient_mcp.store.event_table import EventTable
    from resilient_mcp.store.task_table import TaskTable

ClaimKind = Literal["new", "replay", "conflict_arguments", "in_progress", "in_doubt", "legacy"]
KeyState = Literal["pending", "completed", "in_doubt"]
Outcome = Literal["done", "failed"]

DEFAULT_TTL_S = 86400.0
HEARTBEAT_S = 5.0  # how often a store proves its process is alive
STALE_AFTER_BEATS = 3  # heartbeats missed before an owner counts as gone
MAX_RETRY_AFTER_S = 10.0  # an in-progress answer never asks the model to wait longer
DB_FILENAME = "idempotency.sqlite3"

# Whose keys a row holds (the `caller` column). Authenticated callers are `sub:<subject>` or
# `client:<client_id>` (calls/callers.py): a prefix keeps every subject apart from these two.
LOCAL_CALLER = "local"  # the one principal of stdio, and of HTTP without auth
LEGACY_CALLER = "legacy"  # stored before keys belonged to their caller (schema 2 and older)

# How far a claimed call got, as the `body` column records it.
BODY_NOT_STARTED = 0  # claimed; the tool body has not begun (safe to run again if the owner died)
BODY_RUNNING = 1  # the body began: its effect may have happened
BODY_ENDED = 2  # the body returned or raised: nothing of it runs any more


@record
class Claim:
    """What `claim` found. `new`: the caller owns the key and must run, then complete,
    release or mark it in doubt. `replay`: `result` is the stored CallToolResult wire
    dict. `in_progress`: retry after `retry_after_s`. `legacy`: an authenticated caller's
    key was stored before keys belonged to their caller; whose it was is unknown. The
    others: do not run.
    `reconcilable` (in_doubt): no body of this key can still be running anywhere, so
    the tool's reconcile function may look and settle it."""

    kind: ClaimKind
    result: dict[str, Any] | None = None
    retry_after_s: float | None = None
    reconcilable: bool = False


@record
class KeyRecord:
    """One row of the table, as `<slug> keys list` shows it. Times are seconds since the epoch."""

    tool: str
    key: str
    state: KeyState
    fingerprint: str
    created_at: float
    updated_at: float
    age_s: float
    note: str
    caller: str  # LOCAL_CALLER, LEGACY_CALLER, or an authenticated caller (`sub:...`, `client:...`)


class IdempotencyStore(ABC):
    """The table of idempotency keys. Scope is (caller, tool, key); see DESIGN.md "Idempotency table".

    `caller` is whose key it is (LOCAL_CALLER by default, the one principal of stdio): another
    caller's key is a new key. The one principal also owns the LEGACY_CALLER rows.
    Every method may raise `StoreUnavailableError` when the database fails while serving.
    """

    ttl_s: float
    tasks: TaskTable  # durable tasks, in the same database (task_table.py)
    stream_events: EventTable  # answer streams a client may resume elsewhere (event_table.py)
    # Whether a claim records the body's start itself when nothing comes between them. Worth
    # it where a start mark costs what a claim does (a durable commit each, on PostgreSQL); not
    # where the mark is far cheaper than the claim's fsync (SQLite): a server killed during that
    # fsync then leaves a key that is free again, not one in doubt whose body never ran.
    start_in_claim: ClassVar[bool] = True

    @abstractmethod
    async def open(self) -> None:
        """Create or upgrade the schema and register this instance; FatalError if unusable."""

    @abstractmethod
    async def close(self) -> None:
        """Stop the heartbeat and unregister: this instance's pending claims become in doubt."""

    @abstractmethod
    async def claim(
        self,
        tool: str,
        key: str,
        fingerprint: str,
        lease_s: float,
        *,
        caller: str = LOCAL_CALLER,
        started: bool = False,
    ) -> Claim:
        """Claim (caller, tool, key) for a call expected to end within `lease_s` seconds.

        A `new` claim is committed durably before this returns, so the side effect that
        follows is never repeated, even if the process dies right after it. A pending
        claim whose owner died before its body started is taken over as `new`.

        `started`: the body follows the claim with nothing to wait for in between, so the
        claim records its start too and no `mark_started` follows (a claim whose owner dies
        is then in doubt, never taken over).
        """

    @abstractmethod
    async def mark_started(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> None:
        """The tool body is about to run. Written before the body, so a claim without it
        provably never reached the body; it must survive the process (not the machine).

        Raises `ClaimLostError` when the claim is no longer ours: the body must not run."""

    @abstractmethod
    async def complete(
        self, tool: str, key: str, result: dict[str, Any], *, caller: str = LOCAL_CALLER
    ) -> None:
        """Store how the call ended (success or terminal error), replayed on every retry."""

    @abstractmethod
    async def release(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> None:
        """The call failed before any side effect: forget the claim, the key is new again."""

    @abstractmethod
    async def mark_in_doubt(
        self, tool: str, key: str, note: str = "", *, caller: str = LOCAL_CALLER, still_running: bool = False
    ) -> None:
        """The outcome is unknown (timeout, crash mid-way): retries answer in_doubt.

        `still_running`: the body goes on in an abandoned thread, so nobody may settle the
        key from the outside system's state yet (its effect may still happen)."""

    @abstractmethod
    async def get(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> KeyRecord | None:
        """The row of (caller, tool, key), or None."""

    @abstractmethod
    async def find(self, tool: str, key: str) -> list[KeyRecord]:
        """The rows of (tool, key) of every caller."""

    @abstractmethod
    async def still_running(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> str | None:
        """Why a body of (caller, tool, key) may still be running (its server lives), or None."""

    @abstractmethod
    async def in_doubt_count(self) -> int:
        """How many keys wait for an operator to settle them."""

    @abstractmethod
    async def list_keys(self, *, in_doubt_only: bool = False, limit: int = 50) -> list[KeyRecord]:
        """The newest keys first (only those in doubt with `in_doubt_only`)."""

    @abstractmethod
    async def settle(
        self,
        tool: str,
        key: str,
        outcome: Outcome,
        note: str = "",
        *,
        caller: str = LOCAL_CALLER,
        force: bool = False,
    ) -> bool:
        """An operator's verdict on a key in doubt; False when (caller, tool, key) is not in
        doubt, or a body of it may still be running (see `still_running`) and not `force`.

        `done`: later retries replay a result saying so, with the note. `failed`: the key
        is released, so the next retry runs the call again.
        """

    @abstractmethod
    async def purge_expired(self, ttl_s: float) -> int:
        """Delete keys created more than `ttl_s` seconds ago; returns how many."""

    @abstractmethod
    async def check(self) -> tuple[HealthStatus, str]:
        """For health_check: failing when the table is unreachable, degraded when keys are in doubt."""


def settled_result(note: str) -> dict[str, Any]:
    """The result replayed for a key an operator settled as done.

    Flagged as an error, not a success: the original answer is lost, and a success
    without it would break every client that checks the tool's output schema.
    """
    text = "the earlier call with this idempotency key was interrupted, and it was confirmed that it"
    text += f" completed ({note})" if note else " completed"
    text += "; its original answer is lost. It was not run again: do not repeat it."
    result = failure("terminal", text, correlation_id="settled-by-operator")
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)
