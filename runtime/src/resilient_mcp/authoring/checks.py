"""What a health check finds: `Check`, returned by `@dependency` functions and reported by
health_check, /readyz and `<slug> check`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, get_args

from resilient_mcp.records import record

HealthStatus = Literal["ok", "degraded", "failing"]
SEVERITY: dict[HealthStatus, int] = {"ok": 0, "degraded": 1, "failing": 2}


@record
class Check:
    """What a health check found: what a `@dependency` function returns, `Check("ok", "reachable")`,
    and what health_check, /readyz and `<slug> check` report for every check."""

    status: HealthStatus
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in get_args(HealthStatus):
            allowed = ", ".join(map(repr, get_args(HealthStatus)))
            raise ValueError(f"Check status {self.status!r} is not one of {allowed}")


HealthCheck = Callable[[], Awaitable[Check]]
