"""The always-present `health_check` tool and the call counters it reports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, get_args

import anyio
from pydantic import BaseModel, Field

from resilient_mcp.authoring.checks import SEVERITY, Check, HealthCheck, HealthStatus
from resilient_mcp.authoring.tool import ToolSpec, spec_of, tool
from resilient_mcp.calls.stats import CallStats
from resilient_mcp.store.task_table import TaskStatus


class HealthReport(BaseModel):
    status: HealthStatus = Field(description="ok, degraded or failing: the worst of the checks")
    version: str
    uptime_s: float
    checks: dict[str, Check] = Field(description="one entry per dependency")
    calls: int = Field(description="tool calls, resource reads, prompt gets and completions answered")
    errors: dict[str, int] = Field(description="failed calls by category")
    in_flight: int = Field(description="calls running now (of every primitive), besides this one")
    keys_in_doubt: int | None = Field(description="idempotency keys whose outcome is unknown (null: unknown)")
    tasks_working: int | None = Field(description="durable tasks running now, on any replica (null: unknown)")
    tasks_input_required: int | None = Field(
        description="durable tasks waiting for the client's answers (null: unknown)"
    )


# What tools/list advertises for HealthReport: every field, typed and required, in a third of
# the bytes of pydantic's schema (no descriptions: the names say it, and every request pays them).
HEALTH_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"enum": list(get_args(HealthStatus))},
        "version": {"type": "string"},
        "uptime_s": {"type": "number"},
        "checks": {"type": "object"},
        "calls": {"type": "integer"},
        "errors": {"type": "object"},
        "in_flight": {"type": "integer"},
        "keys_in_doubt": {"type": ["integer", "null"]},
        "tasks_working": {"type": ["integer", "null"]},
        "tasks_input_required": {"type": ["integer", "null"]},
    },
    "required": list(HealthReport.model_fields),
}


def make_health_tool(
    stats: CallStats,
    version: str,
    checks: Mapping[str, HealthCheck],
    keys_in_doubt: Callable[[], Awaitable[int]],
    task_counts: Callable[[], Awaitable[Mapping[TaskStatus, int]]],
) -> ToolSpec:
    """Build the health_check tool over this server's counters and dependency checks.

    `keys_in_doubt` and `task_counts` read the store; when it cannot answer, their fields are
    null and the store's own check says why.
    """

    @tool(read_only=True, open_world=False)
    async def health_check() -> HealthReport:
        """Whether this server and its dependencies work; call it when other tools fail."""
        results = await run_checks(checks)
        worst = max((r.status for r in results.values()), key=SEVERITY.__getitem__, default="ok")
        try:
            in_doubt: int | None = await keys_in_doubt()
        except Exception:  # the store's own check above says why
            in_doubt = None
        try:
            tasks: Mapping[TaskStatus, int] = await task_counts()
        except Exception:  # an unreadable tasks table must not take health_check down with it
            tasks = {}
        return HealthReport(
            status=worst,
            version=version,
            uptime_s=stats.uptime_s(),
            checks=results,
            calls=stats.calls,
            errors=dict(stats.errors),
            in_flight=max(0, stats.in_flight - 1),  # the core counts this call too: not news to a caller
            keys_in_doubt=in_doubt,
            tasks_working=tasks.get("working"),
            tasks_input_required=tasks.get("input_required"),
        )

    spec = spec_of(health_check)
    assert spec is not None
    return replace(spec, output_schema=HEALTH_OUTPUT_SCHEMA)


async def run_checks(checks: Mapping[str, HealthCheck], *, limit_s: float | None = None) -> dict[str, Check]:
    """Every check at once (each owner check has its own time limit), reported in their order.

    With `limit_s`, a check that has not answered by then is cut and reported failing.
    """
    done: dict[str, Check] = {}

    async def run(name: str, check: HealthCheck) -> None:
        done[name] = await _run_check(check, limit_s)

    async with anyio.create_task_group() as group:
        for name, check in checks.items():
            group.start_soon(run, name, check)
    return {name: done[name] for name in checks}


async def _run_check(check: HealthCheck, limit_s: float | None) -> Check:
    try:
        with anyio.move_on_after(limit_s):
            return await check()
        return Check(status="failing", detail=f"no answer within {limit_s:g} s")
    except Exception as exc:  # a check that crashes is itself the finding
        return Check(status="failing", detail=type(exc).__name__)
