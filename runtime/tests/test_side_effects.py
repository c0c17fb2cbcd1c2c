"""A side-effecting call happens at most once, whatever the tool does, over real stdio in both eras.

The tools write their effect (a charge) to a ledger file before failing in the ways a
payment API client fails; the client then retries with the same idempotency key, as a
model told to retry would.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from sample_tools.effects import effects_count
from support import SAMPLE_TOOLS, error_of, server_argv

Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]


def params(env: dict[str, str]) -> StdioServerParameters:
    command, *args = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    return StdioServerParameters(command=command, args=args, env=env)


async def call_three_times(
    env: dict[str, str], mode: Mode, tool: str, arguments: dict[str, Any]
) -> list[CallToolResult]:
    """One call and two retries with the same key and arguments, over one stdio session."""
    async with Client(params(env), mode=mode) as client:
        return [await client.call_tool(tool, arguments) for _ in range(3)]


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_failure_after_the_charge_is_in_doubt_and_never_charges_again(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    failures = ["connection", "timeout", "bug", "value"]
    async with Client(params(subprocess_env), mode=mode) as client:
        for number, failure in enumerate(failures, start=1):
            arguments = {
                "account": "acme",
                "cents": 500,
                "failure": failure,
                "idempotency_key": f"order-{failure}",
            }
            answers = [await client.call_tool("charge_then_fail", arguments) for _ in range(3)]
            assert effects_count() == number, f"{failure}: the card was charged once, and only once"
            for answer in answers:
                _, error = error_of(answer)
                assert (error["category"], error["retryable"]) == ("in_doubt", False), failure
            assert "may or may not have taken effect" in text(answers[0])
            assert "keys settle" in text(answers[1])


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_charge_past_its_time_limit_is_in_doubt_from_the_first_answer(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    arguments = {"account": "acme", "cents": 1, "seconds": 3, "idempotency_key": "order-2:charge"}
    answers = await call_three_times(subprocess_env, mode, "charge_slowly", arguments)
    assert [error_of(a)[1]["category"] for a in answers] == ["in_doubt"] * 3
    assert not any(error_of(a)[1]["retryable"] for a in answers)
    assert "time limit of 2 s" in text(answers[0])
    assert effects_count() == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_transient_error_before_the_effect_frees_the_key_for_the_retry(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    arguments = {"account": "acme", "cents": 5, "idempotency_key": "order-3:charge"}
    async with Client(params(subprocess_env), mode=mode) as client:
        first = await client.call_tool("charge_when_the_gateway_is_up", arguments)
        retry = await client.call_tool("charge_when_the_gateway_is_up", arguments)
    _, error = error_of(first)
    assert (error["category"], error["retryable"]) == ("transient", True)
    assert not retry.is_error
    assert "attempt 5" in text(retry), "four attempts in the first call, the fifth in the retry"
    assert effects_count() == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_reconcile_settles_a_retry_of_a_key_in_doubt(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    went_through = {"cents": 5, "lose_answer": True, "idempotency_key": "order-4:charge"}
    never_sent = {"cents": 5, "lose_answer": False, "idempotency_key": "order-5:charge"}
    async with Client(params(subprocess_env), mode=mode) as client:
        charged = [await client.call_tool("charge_reconciled", went_through) for _ in range(3)]
        assert effects_count() == 1
        not_charged = [await client.call_tool("charge_reconciled", never_sent) for _ in range(3)]
        assert effects_count() == 2

    first, retry, again = charged
    assert error_of(first)[1]["category"] == "in_doubt"
    # The payment API says the charge exists: the retry learns it happened, and nothing runs.
    _, error = error_of(retry)
    assert (error["category"], error["retryable"]) == ("terminal", False)
    assert "confirmed that it completed" in text(retry)
    assert retry.meta is not None
    assert retry.meta["idempotency"]["replayed"] is True
    assert text(again) == text(retry)

    first, retry, again = not_charged
    # The charge was never sent: the retry runs it, once.
    assert error_of(first)[1]["category"] == "in_doubt"
    assert not retry.is_error
    assert "effect #2" in text(retry)
    assert again.meta is not None
    assert again.meta["idempotency"]["replayed"] is True
