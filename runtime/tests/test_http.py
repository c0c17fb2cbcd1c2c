"""`serve --transport http`: Streamable HTTP on /mcp, in both protocol eras."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Literal

import pytest
from mcp import Client

from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, http_server

Mode = Literal["legacy", "auto"]


@pytest.fixture
def served(subprocess_env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The server with the sample tools on Streamable HTTP: its /mcp URL and its process."""
    with http_server(subprocess_env, extra_tools=SAMPLE_TOOLS) as running:
        yield running


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_http_serves_tools_and_health(served: tuple[str, subprocess.Popen[bytes]], mode: Mode) -> None:
    url, _ = served
    async with Client(url, mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        health = await client.call_tool("health_check", {})
        refused = await client.call_tool("refused", {})
    assert "health_check" in names
    assert isinstance(health.structured_content, dict)
    assert health.structured_content["status"] == "ok"
    assert refused.is_error
    assert refused.meta is not None
    assert refused.meta["error"]["category"] == "terminal"


@pytest.mark.anyio
async def test_fatal_error_over_http_answers_then_exits_70(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, process = served
    async with Client(url) as client:
        result = await client.call_tool("fatal", {})
    assert result.meta is not None
    assert result.meta["error"]["category"] == "fatal"
    assert process.wait(timeout=ANSWER_TIMEOUT_S) == 70  # EX_SOFTWARE
