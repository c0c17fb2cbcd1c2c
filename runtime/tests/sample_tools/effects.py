"""Side-effecting tools whose effect is a line in `<data dir>/effects.log`, so tests can count it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from resilient_mcp import Reconciled, TerminalError, TransientError, tool
from resilient_mcp.server.startup import load_settings
from sample_server.settings import Settings

Account = Annotated[str, Field(description="Account to charge")]
Cents = Annotated[int, Field(description="Amount in cents", ge=1)]
Seconds = Annotated[float, Field(description="How long to stay busy after the effect")]


def effects_log() -> Path:
    return load_settings(Settings).data_dir / "effects.log"


def effects_count() -> int:
    """How many effects happened so far, in this test's data directory (servers it starts too)."""
    path = effects_log()
    return len(path.read_text().splitlines()) if path.exists() else 0


def effect(account: str, cents: int) -> int:
    """Do the side effect once; returns how many effects the log holds now."""
    path = effects_log()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as log:
        log.write(f"{account} {cents}\n")
    return len(path.read_text().splitlines())


@tool(side_effect=True)
def charge(account: Account, cents: Cents) -> str:
    """Charge an account."""
    return f"charged {cents} to {account} (effect #{effect(account, cents)})"


@tool(side_effect=True, timeout_s=2)  # room for a busy machine; tests that want a time-out sleep longer
def charge_slowly(account: Account, cents: Cents, seconds: Seconds) -> str:
    """Charge, then stay busy: past the time limit the outcome is in doubt."""
    number = effect(account, cents)
    time.sleep(seconds)
    return f"charged (effect #{number})"


@tool(side_effect=True)
def charge_refused(account: Account, cents: Cents) -> str:
    """A business rule refuses every charge: the refusal is final and replayed."""
    raise TerminalError(f"account {account} is frozen; nothing was charged")


ATTEMPTS: dict[str, int] = {}


@tool(side_effect=True)
def charge_after_hiccups(account: Account, cents: Cents, idempotency_key: str) -> str:
    """The payment gateway fails twice before any effect, then works."""
    ATTEMPTS[idempotency_key] = ATTEMPTS.get(idempotency_key, 0) + 1
    if ATTEMPTS[idempotency_key] <= 2:
        raise TransientError("gateway busy; nothing was charged")
    return f"charged on attempt {ATTEMPTS[idempotency_key]} (effect #{effect(account, cents)})"


@tool(side_effect=True, timeout_s=120)
def charge_and_hang(account: Account, cents: Cents) -> str:
    """Charge, then hang: a process killed now leaves the charge done but unrecorded."""
    effect(account, cents)
    time.sleep(120)
    return "never answered in the tests"


# What a payment API client may raise while reading the answer to a charge it already made.
AFTER_THE_EFFECT: dict[str, type[Exception]] = {
    "connection": ConnectionError,
    "timeout": TimeoutError,
    "bug": RuntimeError,
    "value": ValueError,
}


@tool(side_effect=True)
def charge_then_fail(
    account: Account,
    cents: Cents,
    failure: Annotated[
        Literal["connection", "timeout", "bug", "value"], Field(description="What goes wrong")
    ],
) -> str:
    """Charge, then fail while reading the payment API's answer: the charge is made."""
    effect(account, cents)
    raise AFTER_THE_EFFECT[failure]("the payment API's answer could not be read")


@tool(side_effect=True)
def charge_when_the_gateway_is_up(account: Account, cents: Cents, idempotency_key: str) -> str:
    """The gateway refuses the first four attempts of a key (one call's retries), before any effect."""
    ATTEMPTS[idempotency_key] = ATTEMPTS.get(idempotency_key, 0) + 1
    if ATTEMPTS[idempotency_key] <= 4:
        raise TransientError("gateway down; nothing was charged")
    return f"charged on attempt {ATTEMPTS[idempotency_key]} (effect #{effect(account, cents)})"


def charged(idempotency_key: str) -> Reconciled:
    """The payment API's own lookup: the ledger line of a reconciled charge starts with its key."""
    path = effects_log()
    lines = path.read_text().splitlines() if path.exists() else []
    return "done" if any(line.split(" ")[0] == idempotency_key for line in lines) else "not_done"


@tool(side_effect=True, reconcile=charged)
def charge_reconciled(
    cents: Cents,
    idempotency_key: str,
    lose_answer: Annotated[bool, Field(description="Lose the answer after the charge, else before it")],
) -> str:
    """Charge under the key; the first attempt of each key loses its connection."""
    ATTEMPTS[idempotency_key] = ATTEMPTS.get(idempotency_key, 0) + 1
    first = ATTEMPTS[idempotency_key] == 1
    if first and not lose_answer:
        raise ConnectionError("connection reset before the charge was sent")
    number = effect(idempotency_key, cents)
    if first:
        raise ConnectionError("connection reset while reading the answer")
    return f"charged (effect #{number})"


RELEASE_LATE_CHARGE = threading.Event()
RECONCILE_ASKED: list[str] = []


def charged_late(idempotency_key: str) -> Reconciled:
    RECONCILE_ASKED.append(idempotency_key)
    return charged(idempotency_key)


@tool(side_effect=True, timeout_s=0.5, reconcile=charged_late)
def charge_late(cents: Cents, idempotency_key: str) -> str:
    """Past its time limit, the charge still goes through in the abandoned thread once released."""
    RELEASE_LATE_CHARGE.wait(30)
    return f"charged (effect #{effect(idempotency_key, cents)})"


@tool(side_effect=True)
async def charge_async(account: Account, cents: Cents) -> str:
    """Charge an account from an async tool: its claim itself records that the body started."""
    return f"charged {cents} to {account} (effect #{effect(account, cents)})"
