"""Tools the HTTP tests call: one that needs an OAuth scope, and slow ones to drain on SIGTERM."""

from __future__ import annotations

import time
from typing import Annotated

import anyio
from pydantic import Field

from resilient_mcp import tool

Seconds = Annotated[float, Field(description="How long to take")]


@tool(read_only=True, scopes=["reports:read"])
async def report() -> str:
    """A report only callers with the reports:read scope may see."""
    return "the report"


@tool(read_only=True)
async def wait(seconds: Seconds) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return f"waited {seconds:g} s"


@tool(side_effect=True)
async def send_slowly(seconds: Seconds) -> str:
    """A side effect that takes a while to be confirmed."""
    await anyio.sleep(seconds)
    return "sent"


@tool(read_only=True, timeout_s=300)
def hang(seconds: Seconds) -> str:
    """A sync tool stuck in a call that ignores cancellation (its thread cannot be stopped)."""
    time.sleep(seconds)
    return f"hung {seconds:g} s"
