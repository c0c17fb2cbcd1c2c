"""A tool whose answer the test holds back: it reports progress, then answers once a file exists."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
from pydantic import Field

from resilient_mcp import Context, tool

HELD_AT_MOST_S = 60.0


@tool(read_only=True, timeout_s=120)
async def held_answer(
    release: Annotated[str, Field(description="the file whose creation lets the answer go")], ctx: Context
) -> str:
    """Report progress, then answer once `release` exists."""
    await ctx.report_progress(progress=1, total=2, message="started")
    with anyio.fail_after(HELD_AT_MOST_S):
        while not Path(release).exists():  # noqa: ASYNC110 - another process creates it
            await anyio.sleep(0.05)
    return f"released by {Path(release).name}"
