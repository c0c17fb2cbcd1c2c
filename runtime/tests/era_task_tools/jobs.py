"""Tools that run as durable tasks, for the 2025-11-25 task methods' tests."""

from __future__ import annotations

import asyncio
from typing import Annotated

from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from pydantic import Field

from resilient_mcp import Context, tool
from sample_tools.effects import Account, Cents, effect

CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


@tool(side_effect=True, task_support="optional", timeout_s=600)
async def charge_after(
    account: Account, cents: Cents, seconds: Annotated[float, Field(ge=0, le=600)] = 0
) -> str:
    """Wait `seconds`, then charge the account: a task when the client asks for one"""
    await asyncio.sleep(seconds)
    return f"charged {cents} to {account} (effect #{effect(account, cents)})"


@tool(read_only=True, task_support="required")
async def report() -> str:
    """Builds a report; runs only as a task"""
    return "the report"


@tool(idempotent=True, task_support="optional")
async def confirm_wipe(name: str, ctx: Context) -> str | InputRequiredResult:
    """Asks the user to confirm, then 'wipes' the disk"""
    answer = (ctx.input_responses or {}).get("confirm")
    if not isinstance(answer, ElicitResult) or answer.action != "accept":
        form = ElicitRequestFormParams(message=f"Wipe {name}?", requested_schema=CONFIRM)
        return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=form)})
    return f"wiped {name}" if (answer.content or {}).get("confirm") else f"kept {name}"
