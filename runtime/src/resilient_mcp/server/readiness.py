"""Readiness: the verdict `/readyz` gives, kept fresh by the dependency checks running in the background.

An orchestrator asks `/readyz` every few seconds and gives up on an answer after a second or
so. Run inside the request, the checks made the answer as slow as the slowest of them (a
PostgreSQL that does not answer: 10-15 s to say 503), and only the next probe, seconds
later, could see a dependency come back. So they run here, on their own schedule, for as
long as the HTTP app serves (the loop lives in the app's ASGI lifespan):

- a run asks every check at once, each cut at `CHECK_LIMIT_S` (a check that has not
  answered by then is failing; the store's and an owner's `timeout_s` are shorter by default,
  so their own detail says why);
- after a run with a failing check the next one starts `RECHECK_FAILING_S` later, so the
  server turns ready soon after the dependency answers again; after a good run,
  `RECHECK_OK_S` later;
- `/readyz` answers at once from the latest run; before the first one has ended it waits for
  it at most `READYZ_WAIT_S`, then answers 503 `starting`.
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from resilient_mcp.authoring.checks import Check, HealthCheck
from resilient_mcp.server.health_tool import run_checks
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)

READYZ_WAIT_S = 2.0  # the longest /readyz waits: for the first verdict, if none exists yet
CHECK_LIMIT_S = 10.0
RECHECK_FAILING_S = 0.5
RECHECK_OK_S = 5.0


class Readiness:
    """The latest results of the dependency checks, and the loop that renews them."""

    def __init__(self, checks: Mapping[str, HealthCheck]) -> None:
        self.checks = checks
        self.latest: dict[str, Check] | None = None
        self._first = anyio.Event()

    async def verdict(self) -> dict[str, Check] | None:
        """The latest results; None when the first run has not ended within READYZ_WAIT_S."""
        if self.latest is None:
            with anyio.move_on_after(READYZ_WAIT_S):
                await self._first.wait()
        return self.latest

    async def keep_checking(self) -> None:
        """Run the checks until cancelled: soon again while one fails, at leisure while none does."""
        failing: list[str] = []
        while True:
            self.latest = await run_checks(self.checks, limit_s=CHECK_LIMIT_S)
            self._first.set()
            now = [name for name, result in self.latest.items() if result.status == "failing"]
            if now != failing:  # one line per change, not per run
                failing = now
                if failing:
                    log.warning("not_ready", failing={name: self.latest[name].detail for name in failing})
                else:
                    log.info("ready")
            await anyio.sleep(RECHECK_FAILING_S if failing else RECHECK_OK_S)

    def around(self, app: ASGIApp) -> ASGIApp:
        """`app`, with the checks running in the background for as long as its lifespan lasts."""

        async def checked(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "lifespan":
                await app(scope, receive, send)
                return
            async with anyio.create_task_group() as group:
                group.start_soon(self.keep_checking)
                await app(scope, receive, send)
                group.cancel_scope.cancel()

        return checked
