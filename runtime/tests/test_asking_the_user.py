"""A tool that asks the user before it runs: the confirmation round trip, in a real server, in both eras.

2025-11-25 asks with an `elicitation/create` request during the call; 2026-07-28 answers the
call with an `InputRequiredResult` and the client calls again with the user's answer. The
SDK's Client does either through its elicitation callback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.types import MISSING_REQUIRED_CLIENT_CAPABILITY, ElicitRequestParams, ElicitResult, TextContent

from sample_tools.effects import effects_count
from support import SAMPLE_TOOLS, error_of, http_server, server_argv

Mode = Literal["legacy", "auto"]

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("mode", ["legacy", "auto"])]


def params(env: dict[str, str]) -> StdioServerParameters:
    command, *args = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    return StdioServerParameters(command=command, args=args, env=env)


def user_who_answers(answer: bool, asked: list[str]) -> ElicitationFnT:
    async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": answer})

    return elicit


async def test_a_destructive_tool_runs_once_the_user_confirms(
    subprocess_env: dict[str, str], data_dir: Path, mode: Mode
) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "old.txt").write_text("old")
    asked: list[str] = []
    user = user_who_answers(True, asked)
    async with Client(params(subprocess_env), mode=mode, elicitation_callback=user) as client:
        result = await client.call_tool("delete_file", {"name": "old.txt"})

    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, TextContent)
    assert first.text == "deleted old.txt"
    assert asked == ["Delete old.txt for good? This cannot be undone."]
    assert not (data_dir / "old.txt").exists()


async def test_a_user_who_says_no_keeps_the_file(
    subprocess_env: dict[str, str], data_dir: Path, mode: Mode
) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "keep.txt").write_text("keep")
    asked: list[str] = []
    user = user_who_answers(False, asked)
    async with Client(params(subprocess_env), mode=mode, elicitation_callback=user) as client:
        result = await client.call_tool("delete_file", {"name": "keep.txt"})

    message, error = error_of(result)
    assert (error["category"], error["retryable"]) == ("terminal", False)
    assert "the user did not confirm" in message
    assert len(asked) == 1
    assert (data_dir / "keep.txt").read_text() == "keep"


async def test_a_confirmed_side_effect_happens_once_and_its_retry_asks_nothing(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    asked: list[str] = []
    arguments = {"account": "acme", "cents": 300, "idempotency_key": "order-11"}
    user = user_who_answers(True, asked)
    async with Client(params(subprocess_env), mode=mode, elicitation_callback=user) as client:
        first, retry = [await client.call_tool("charge_after_confirming", arguments) for _ in range(2)]

    assert not first.is_error, first
    assert asked == ["Charge 300 cents to acme?"], "asked once: the retry is a replay"
    assert first.content == retry.content
    assert retry.meta is not None
    assert retry.meta["idempotency"] == {"key": "order-11", "replayed": True}
    assert effects_count() == 1


@pytest.mark.network
async def test_a_client_that_cannot_ask_the_user_gets_the_protocol_error_and_nothing_runs(
    subprocess_env: dict[str, str], data_dir: Path, tmp_path: Path, mode: Mode
) -> None:
    """-32021 (missing client capability) is the SDK's answer to a client that cannot be asked:
    it reaches the client as that JSON-RPC error in both eras (SEP-2575), not as a tool result."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "keep.txt").write_text("keep")
    charge = {"account": "acme", "cents": 300, "idempotency_key": "order-12"}
    asked: list[str] = []
    # One server for both clients: the refused call must leave the key free in the same process.
    log_file = tmp_path / "server.log"
    with (
        log_file.open("wb") as log,
        http_server(subprocess_env, extra_tools=SAMPLE_TOOLS, stderr=log) as (url, _),
    ):
        async with Client(url, mode=mode) as client:  # no elicitation callback
            with pytest.raises(MCPError) as refused_delete:
                await client.call_tool("delete_file", {"name": "keep.txt"})
            with pytest.raises(MCPError) as refused_charge:
                await client.call_tool("charge_after_confirming", charge)
        async with Client(url, mode=mode, elicitation_callback=user_who_answers(True, asked)) as client:
            charged = await client.call_tool("charge_after_confirming", charge)

    assert refused_delete.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert "elicitation" in refused_delete.value.error.message
    assert refused_charge.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert (data_dir / "keep.txt").read_text() == "keep"
    assert not charged.is_error, "the refused call left its key free: the same key runs once asked"
    assert asked == ["Charge 300 cents to acme?"]
    assert effects_count() == 1
    lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    refusals = [line for line in lines if line.get("event") == "tool_protocol_error"]
    assert [line["tool"] for line in refusals] == ["delete_file", "charge_after_confirming"]
    assert {line["code"] for line in refusals} == {MISSING_REQUIRED_CLIENT_CAPABILITY}
    calls = {line["correlation_id"] for line in lines if line.get("outcome") == "protocol_error"}
    assert calls == {line["correlation_id"] for line in refusals}, "each refusal's call line has its id"
