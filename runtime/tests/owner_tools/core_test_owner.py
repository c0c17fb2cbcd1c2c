"""What an owner adds beside their tools: a lifespan, a dependency check, a tool using `shared`.

The environment decides how they behave (`CORE_TEST_LIFESPAN`, `CORE_TEST_DEPENDENCY`,
`CORE_TEST_REPORTS_DB_UNTIL`), and the lifespan writes `open` / `close` to
`<data dir>/lifespan.log`, so tests see what happened.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from resilient_mcp import Check, FatalError, dependency, lifespan, shared, tool
from resilient_mcp.server.startup import load_settings
from sample_server.settings import Settings

PLANTED_SECRET = "sk-live-0123456789abcdef"  # a key that must never reach the client


def lifespan_log() -> Path:
    return load_settings(Settings).data_dir / "lifespan.log"


def record(event: str) -> None:
    path = lifespan_log()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as log:
        log.write(f"{event}\n")


@lifespan
async def counter() -> AsyncIterator[dict[str, int]]:
    """Stands in for a shared HTTP client: one object for every call."""
    if os.environ.get("CORE_TEST_LIFESPAN") == "fatal":
        raise FatalError("the billing API key is missing", "set BILLING_API_KEY")
    if os.environ.get("CORE_TEST_LIFESPAN") == "raise":
        raise ConnectionError(f"billing API refused key {PLANTED_SECRET}")
    record("open")
    try:
        yield {"calls": 0}
    finally:
        record("close")


@tool(read_only=True)
async def count_calls() -> int:
    """Counts calls on the object the lifespan yielded."""
    state = shared(counter)
    state["calls"] += 1
    return state["calls"]


@dependency("billing_api", timeout_s=1)
async def billing_api() -> Check:
    mode = os.environ.get("CORE_TEST_DEPENDENCY", "ok")
    if mode == "failing":
        return Check("failing", "503 from the billing API")
    if mode == "hang":
        await anyio.sleep(60)
    if mode == "raise":
        raise ConnectionError(f"refused with api_key={PLANTED_SECRET} in /srv/billing/client.py")
    if mode == "fatal":
        raise FatalError("the billing API rejects this server's key", "renew BILLING_API_KEY")
    return Check("ok", f"reachable ({shared(counter)['calls']} calls so far)")


_reports_db_checks = itertools.count()


@dependency("reports_db", timeout_s=60)
async def reports_db() -> Check:
    """A database that answers at start-up, then stops: with CORE_TEST_REPORTS_DB_UNTIL set,
    every later check hangs until that file exists."""
    until = os.environ.get("CORE_TEST_REPORTS_DB_UNTIL")
    if next(_reports_db_checks) and until:
        while not Path(until).exists():  # noqa: ASYNC110 (another process makes the file)
            await anyio.sleep(0.05)
    return Check("ok", "answers")


@dependency("ledger")
def ledger() -> Check:
    """A sync check runs in a worker thread."""
    return Check("degraded", "read-only replica")


@tool(read_only=True)
def refund_lookup(reference: str) -> str:
    """Fails with the owner's own kinds of secret in its message."""
    raise ValueError(f"lookup failed: billing_ref={reference} for card ACME-4242-9999")
