"""Task bodies that leave a trace: each notes in `<data dir>/task_events.log` that it ran, was
cancelled, or saw its cancel flag, one line `<label> <event>`, so a test can see what a body
did from outside its server process. Labels keep the tests that share a server apart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, Elicit, Resolve
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from pydantic import BaseModel, Field

from resilient_mcp import TerminalError, ToolInputError, cancelled, tool
from resilient_mcp.server.startup import load_settings
from sample_server.settings import Settings
from sample_tools.effects import Account, Cents, effect

Label = Annotated[str, Field(description="Names this test's runs in the events log", max_length=100)]
EVENTS = "task_events.log"
LONGEST_WAIT_S = 120.0  # a body left waiting ends by itself, long after any test looked at it
NAME_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}
CONFIRM_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}


def events(data_dir: Path, label: str) -> list[str]:
    """The events of the runs labelled `label`, in order."""
    path = data_dir / EVENTS
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split(" ", 1)[1] for line in lines if line.split(" ", 1)[0] == label]


def note(label: str, event: str) -> None:
    data_dir = load_settings(Settings).data_dir  # no store made it with PostgreSQL
    data_dir.mkdir(parents=True, exist_ok=True)
    with (data_dir / EVENTS).open("a") as log:
        log.write(f"{label} {event}\n")


@tool(read_only=True, task_support="optional")
async def wait_then_answer(
    label: Label, seconds: Annotated[float, Field(ge=0, le=LONGEST_WAIT_S)], ctx: Context
) -> str:
    """Reports its first step as progress, waits, answers; notes a cancel."""
    note(label, "started")
    try:
        await ctx.report_progress(1, 4, "first step done")
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note(label, "cancelled")
        raise
    note(label, "finished")
    return f"{label} done after {seconds:g} s"


@tool(read_only=True, task_support="required")
async def only_as_a_task(label: Label) -> str:
    """Answers at once, and only as a task."""
    return f"{label} done"


@tool(read_only=True, task_support="optional")
def wait_for_the_cancel_flag(label: Label) -> str:
    """A sync body: polls its cancel flag, notes when it turned true."""
    note(label, "started")
    deadline = time.monotonic() + LONGEST_WAIT_S
    while not cancelled() and time.monotonic() < deadline:
        time.sleep(0.02)
    note(label, "saw its cancel flag" if cancelled() else "was never cancelled")
    return f"{label} stopped"


@tool(read_only=True, task_support="optional")
async def fail_as(label: Label, how: Literal["input", "terminal", "protocol"]) -> str:
    """Fails the way `how` says: a bad input, a terminal failure, a protocol error."""
    if how == "input":
        raise ToolInputError(f"{label}: the report name is not one this server knows")
    if how == "terminal":
        raise TerminalError(f"{label}: the report was withdrawn")
    raise MCPError(code=INTERNAL_ERROR, message=f"{label}: a protocol-level failure")


@tool(side_effect=True, task_support="optional")
def charge_as_a_task(account: Account, cents: Cents) -> str:
    """Charge an account (an effect in the effects log), as a task when the client can."""
    return f"charged {cents} to {account} (effect #{effect(account, cents)})"


def _ask(message: str, schema: dict[str, object]) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _accepted(answer: object) -> Mapping[str, object] | None:
    return (answer.content or {}) if isinstance(answer, ElicitResult) and answer.action == "accept" else None


@tool(read_only=True, task_support="optional")
async def ask_two_questions(label: Label, ctx: Context) -> str | InputRequiredResult:
    """Asks a name and a confirmation at once; answers with both. Notes each run's answers."""
    answers = ctx.input_responses or {}
    note(label, f"ran with {','.join(sorted(answers)) or 'no answers'}")
    name, confirm = _accepted(answers.get("name")), _accepted(answers.get("confirm"))
    if name is None or confirm is None:
        return InputRequiredResult(
            input_requests={
                "name": _ask("What is your name?", NAME_SCHEMA),
                "confirm": _ask("Proceed?", CONFIRM_SCHEMA),
            }
        )
    return f"name={name.get('name')}, confirm={confirm.get('confirm')}"


class Name(BaseModel):
    name: str


def ask_the_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@tool(read_only=True, task_support="required")
async def greet_the_asked_name(name: Annotated[Name, Resolve(ask_the_name)]) -> str:
    """Asks a name before any work (Resolve), then greets it from a task."""
    return f"Hello, {name.name}!"


@tool(side_effect=True, task_support="optional")
def charge_an_open_account(account: Account, cents: Cents, label: Label) -> str:
    """Charges an account unless its last event says it is closed: then nothing is applied."""
    said = [
        event for event in events(load_settings(Settings).data_dir, label) if event in ("closed", "opened")
    ]
    if said and said[-1] == "closed":
        raise ToolInputError(f"account {account} is closed: open it, then retry with the same key")
    return f"charged {cents} to {account} (effect #{effect(account, cents)})"
