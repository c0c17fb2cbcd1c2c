"""A deployment chooses which tools it declares: READ_ONLY, TOOLS_ALLOW, TOOLS_DENY."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from support import SAMPLE_TOOLS, error_of, server_argv, server_env
from test_startup import assert_one_fatal_line, run


async def declared(data_dir: Path, **settings: str) -> tuple[dict[str, bool], str]:
    """The declared tools (name: readOnlyHint), and the first text of a call to the hidden `charge`."""
    command, *args = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    env = server_env(data_dir=str(data_dir), **settings)
    async with Client(StdioServerParameters(command=command, args=args, env=env)) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("charge", {"account": "a", "cents": 1, "idempotency_key": "k"})
    hints = {t.name: bool(t.annotations and t.annotations.read_only_hint) for t in tools}
    return hints, (error_of(result)[0] if result.is_error else "")


@pytest.mark.anyio
async def test_read_only_declares_only_read_only_tools_and_health_check(data_dir: Path) -> None:
    tools, charge = await declared(data_dir, read_only="true")
    assert "health_check" in tools
    assert "echo" in tools
    assert all(tools.values()), f"a tool that is not read_only is declared: {tools}"
    assert charge.startswith("unknown_tool: ")


@pytest.mark.anyio
async def test_allow_declares_only_the_matching_tools(data_dir: Path) -> None:
    tools, charge = await declared(data_dir, tools_allow="echo, charge_re*")
    assert set(tools) == {"health_check", "echo", "charge_refused", "charge_reconciled"}
    assert charge.startswith("unknown_tool: ")


@pytest.mark.anyio
async def test_deny_hides_the_matching_tools(data_dir: Path) -> None:
    tools, charge = await declared(data_dir, tools_deny="charge*,health_check")
    assert "echo" in tools
    assert "health_check" in tools, "health_check is always declared"
    assert not [name for name in tools if name.startswith("charge")]
    assert charge.startswith("unknown_tool: ")


@pytest.mark.parametrize("setting", ["tools_allow", "tools_deny"])
def test_a_pattern_that_matches_no_tool_stops_the_server(setting: str, data_dir: Path) -> None:
    result = run("check", extra_tools=SAMPLE_TOOLS, data_dir=str(data_dir), **{setting: "echo,chrage*"})
    assert_one_fatal_line(result, setting.upper(), "'chrage*' matches no tool", "health_check", "echo")
