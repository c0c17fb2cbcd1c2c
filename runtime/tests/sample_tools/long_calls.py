"""Tools for long calls and large results: heartbeats, cancellation, results over the size limit.

The tools and their tests talk through marker files in the data directory, so a test
waits for what a tool saw (a heartbeat, a cancellation) instead of guessing how long it takes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from resilient_mcp import cancelled, tool
from resilient_mcp.server.startup import load_settings
from sample_server.settings import Settings

from .effects import Account, Cents, effect

Marker = Annotated[str, Field(description="Name of the marker files this call writes and reads")]
Size = Annotated[int, Field(description="How many bytes or rows to return", ge=0, le=100_000)]
WAIT_S = 60.0  # a tool waits this long at most for what its test does
OWN_PROGRESS = (3.0, 10.0)  # what `wait_for_heartbeats` reports itself before it waits


def marker(name: str) -> Path:
    """A marker file in this test's data directory (servers the test starts share it)."""
    path = load_settings(Settings).data_dir / "markers" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


async def _wait_for(path: Path) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.05)
    return True


@tool(read_only=True, timeout_s=WAIT_S + 30)
async def wait_for_heartbeats(name: Marker, ctx: Context) -> str:
    """Report progress, wait until the test saw heartbeats (marker `<name>.seen`), repeat it, finish.

    After its total it still runs a few heartbeat intervals, in which nothing may be sent.
    """
    await ctx.report_progress(*OWN_PROGRESS, message="own progress")
    seen = await _wait_for(marker(f"{name}.seen"))
    await ctx.report_progress(*OWN_PROGRESS, message="own progress again")  # not an increase
    total = OWN_PROGRESS[1]
    await ctx.report_progress(total, total, message="done")
    await anyio.sleep(5 * load_settings(Settings).progress_interval_s)
    return "the test saw the heartbeats" if seen else "no heartbeats within 60 s"


@tool(read_only=True, timeout_s=WAIT_S + 30)
async def wait_for_cancel(name: Marker) -> str:
    """Wait to be cancelled; writes `<name>.started`, then `<name>.cancelled` when cancelled."""
    marker(f"{name}.started").touch()
    try:
        await anyio.sleep(WAIT_S)
    except anyio.get_cancelled_exc_class():
        marker(f"{name}.cancelled").touch()
        raise
    return "never cancelled"


@tool(read_only=True, timeout_s=WAIT_S + 30)
def wait_for_cancel_sync(name: Marker) -> str:
    """Work in small steps until `cancelled()` turns true, then write `<name>.cancelled`."""
    marker(f"{name}.started").touch()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if cancelled():
            marker(f"{name}.cancelled").touch()
            return "stopped: cancelled"
        time.sleep(0.02)
    return "never cancelled"


@tool(side_effect=True, timeout_s=WAIT_S + 30)
def charge_until_cancelled(account: Account, name: Marker) -> str:
    """Charge, then stay busy until cancelled: the charge happened, so the key is in doubt."""
    effect(account, 1)
    marker(f"{name}.started").touch()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not cancelled():
        time.sleep(0.02)
    marker(f"{name}.cancelled").touch()
    return "charged"


@tool(read_only=True)
async def report_twice(ctx: Context) -> str:
    """Report progress twice, then answer: over 2026-07-28 HTTP the answer turns into SSE."""
    await ctx.report_progress(1.0, 2.0, message="half way")
    await ctx.report_progress(2.0, 2.0, message="done")
    return "reported twice"


@tool(read_only=True, timeout_s=WAIT_S + 30)
async def quiet_for(
    seconds: Annotated[float, Field(description="How long to say nothing", le=WAIT_S)],
) -> str:
    """Send nothing for `seconds`, then answer: long enough, and the answer keeps its stream alive."""
    await anyio.sleep(seconds)
    return f"quiet for {seconds:g} s"


@tool(read_only=True)
def big_text(size: Size) -> str:
    """Return `size` bytes of text made of two-byte characters (so a cut may split one)."""
    return ("é" * (size // 2 + 1)).encode()[:size].decode(errors="ignore")


@tool(read_only=True, max_result_bytes=2000)
def small_text(size: Size) -> str:
    """Like big_text, with a 2000-byte limit of its own."""
    return "x" * size


@tool(read_only=True)
def big_table(size: Size) -> dict[str, Any]:
    """Return `size` rows of structured content."""
    return {"rows": [{"id": number, "name": f"row {number}"} for number in range(size)]}


@tool(read_only=True)
def brief_with_data(size: Size) -> CallToolResult:
    """A one-line summary as content, with `size` characters of structured data behind it."""
    return CallToolResult(
        content=[TextContent(type="text", text="one record")], structured_content={"data": "x" * size}
    )


@tool(side_effect=True)
def charge_with_receipt(account: Account, size: Size) -> dict[str, Any]:
    """Charge, then return a structured receipt of `size` lines."""
    number = effect(account, 1)
    return {"effect": number, "lines": [f"line {line}" for line in range(size)]}


@tool(side_effect=True)
def charge_when_let_through(cents: Cents, idempotency_key: str) -> str:
    """Charge under the key as the body begins, then wait until the test lets it through
    (marker `gate`): more such calls than worker threads leave some waiting for a thread."""
    effect(idempotency_key, cents)
    gate = marker("gate")
    deadline = time.monotonic() + WAIT_S
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return f"charged {cents} under {idempotency_key}"
