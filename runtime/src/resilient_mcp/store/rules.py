"""The idempotency table's answers to an existing key: one function both backends call."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from resilient_mcp.project import this_project
from resilient_mcp.records import record
from resilient_mcp.store.instances import HeartbeatThread, Instance, OwnerRow, owner_gone_reason
from resilient_mcp.store.store import BODY_NOT_STARTED, BODY_RUNNING, MAX_RETRY_AFTER_S, Claim, KeyState

if TYPE_CHECKING:
    from resilient_mcp.authoring.checks import HealthStatus

LEASE_EXPIRED = "the call ran past its lease without finishing"
SETTLED_DONE = "settled as done by an operator"
MIN_RETRY_AFTER_S = 0.1


@record
class ExistingKey:
    """A row found for (tool, key), with its owner's instance row if there is one."""

    fingerprint: str
    state: KeyState
    result_json: str | None
    lease_until: float
    owner: OwnerRow | None
    body: int  # BODY_NOT_STARTED, BODY_RUNNING or BODY_ENDED
    # The store vouches that a recorded body start would be visible now (the storage has not
    # lost unflushed writes since the claim): only then does "not started" prove anything.
    start_record_intact: bool
    # Stored before keys belonged to their caller, and claimed by an authenticated caller: it
    # may have been anyone's, so this caller gets neither its result nor its state.
    unowned: bool = False


@record
class Verdict:
    claim: Claim
    now_in_doubt: str | None = None  # set: the pending row must become in doubt, with this note
    take_over: bool = False  # set: the row is ours now, as a new claim (its owner died before the body)


def judge(existing: ExistingKey, fingerprint: str, now: float, me: Instance) -> Verdict:
    """The answer to a claim of a key that exists (and is within its TTL)."""
    if existing.unowned:
        return Verdict(Claim("legacy"))
    if existing.fingerprint != fingerprint:
        return Verdict(Claim("conflict_arguments"))
    if existing.state == "completed":
        result = json.loads(existing.result_json) if existing.result_json else None
        return Verdict(Claim("replay", result=result))
    gone = owner_gone_reason(existing.owner, me, now)
    if existing.state == "in_doubt":
        # A body still running in an abandoned thread may yet have its effect: nobody settles it.
        return Verdict(Claim("in_doubt", reconcilable=existing.body != BODY_RUNNING or gone is not None))
    if gone is not None and never_started(existing):
        return Verdict(Claim("new"), take_over=True)
    if now >= existing.lease_until:
        # The lease ran out; while the owner lives, its body may yet run.
        return Verdict(Claim("in_doubt", reconcilable=gone is not None), LEASE_EXPIRED)
    if gone is not None:
        return Verdict(Claim("in_doubt", reconcilable=True), gone)
    wait = min(max(existing.lease_until - now, MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S)
    return Verdict(Claim("in_progress", retry_after_s=round(wait, 3)))


def never_started(existing: ExistingKey) -> bool:
    """Whether a pending claim provably never reached its tool body."""
    return existing.body == BODY_NOT_STARTED and existing.start_record_intact


def running_reason(existing: ExistingKey, now: float, me: Instance) -> str | None:
    """Why a body of this key may still be running, or None when none can be.

    A pending claim runs while its owner lives, even past its lease; a key in doubt whose
    body was given up on while it ran (an abandoned thread, `still_running`, or a lease
    that ran out) may run until its server ends. Settled from the outside, either could
    have its effect after the verdict: a released key's retry would repeat it.
    """
    if existing.state == "completed" or owner_gone_reason(existing.owner, me, now) is not None:
        return None
    assert existing.owner is not None  # an owner that is not gone has its instance row
    where = f"the server on {existing.owner.hostname} (pid {existing.owner.pid})"
    if existing.state == "pending":
        return f"its call is still running in {where}"
    if existing.body == BODY_RUNNING:
        return f"its tool body may still be running in {where}"
    return None


_RESULT_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))  # made once, as for fingerprints


def encode_result(result: object) -> str:
    """Stored as ASCII JSON text: any string a tool returns survives both backends."""
    return _RESULT_JSON.encode(result)


def health_verdict(in_doubt: int, heartbeat: HeartbeatThread | None, where: str) -> tuple[HealthStatus, str]:
    """Degraded while the heartbeat fails or keys wait for an operator; ok otherwise."""
    if heartbeat is not None and heartbeat.last_error is not None:
        return "degraded", f"{where}: the heartbeat failed ({heartbeat.last_error})"
    if in_doubt:
        return "degraded", f"{where}: {in_doubt} keys in doubt; settle them with `{this_project().slug} keys`"
    return "ok", where
