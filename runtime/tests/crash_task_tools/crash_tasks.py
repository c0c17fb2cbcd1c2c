"""Task bodies that a test stops, kills or cancels while they run, and that say how often they ran.

Each body, as it begins, appends the pid of the process running it to the marker `<name>.runs`
(a side-effecting one charges first), then waits until the test writes `<name>.release`. A
body cancelled while it waits writes `<name>.cancelled`. So a test reads how many times a body
ran, and where, instead of guessing how long anything takes.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import anyio
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from pydantic import Field

from resilient_mcp import Context, tool
from sample_tools.effects import Account, Cents, effect
from sample_tools.long_calls import WAIT_S, marker

Name = Annotated[str, Field(description="Name of the marker files this task writes and reads")]
LIMIT_S = WAIT_S + 30
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


def runs(name: str) -> list[int]:
    """The pids of the processes that began this body, in order."""
    path = marker(f"{name}.runs")
    return [int(line) for line in path.read_text().splitlines()] if path.exists() else []


async def _run_until_released(name: str) -> str:
    with marker(f"{name}.runs").open("a") as ran:
        ran.write(f"{os.getpid()}\n")
    number = len(runs(name))
    release = marker(f"{name}.release")
    deadline = time.monotonic() + WAIT_S
    try:
        while not release.exists():
            if time.monotonic() > deadline:
                return f"{name}: never released"
            await anyio.sleep(0.05)
    except anyio.get_cancelled_exc_class():
        marker(f"{name}.cancelled").touch()
        raise
    return f"{name}: run #{number} released"


@tool(read_only=True, task_support="optional", timeout_s=LIMIT_S)
async def read_until_released(name: Name) -> str:
    """Read-only: safe to run again after its process died."""
    return await _run_until_released(name)


@tool(task_support="optional", timeout_s=LIMIT_S)
async def write_until_released(name: Name) -> str:
    """Neither read_only nor idempotent nor side_effect: not re-run once its body began."""
    return await _run_until_released(name)


@tool(side_effect=True, task_support="optional", timeout_s=LIMIT_S)
async def charge_until_released(account: Account, cents: Cents, name: Name) -> str:
    """Charge, then wait: its idempotency key decides what happens after its process died."""
    number = effect(account, cents)
    return f"charged (effect #{number}); {await _run_until_released(name)}"


@tool(idempotent=True, task_support="optional", timeout_s=LIMIT_S)
async def confirm_then_run(name: Name, ctx: Context) -> str | InputRequiredResult:
    """Ask the user to confirm; once answered, run (wherever the answer arrived)."""
    answer = (ctx.input_responses or {}).get("confirm")
    if not isinstance(answer, ElicitResult) or answer.action != "accept":
        ask = ElicitRequestFormParams(message=f"Run {name}?", requested_schema=CONFIRM)
        return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=ask)})
    return await _run_until_released(name)
