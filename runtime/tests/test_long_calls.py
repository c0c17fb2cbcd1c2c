"""Long calls and large results over real stdio, in both eras: what the client sees.

Heartbeat progress keeps a long call from looking dead; a cancelled call stops its tool;
a result over the size limit is cut (text) or refused (structured) instead of flooding
the model's context window.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, Literal

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from resilient_mcp.calls.progress import MAX_PROGRESS_TOKEN_BYTES
from sample_tools.effects import effects_count
from sample_tools.long_calls import OWN_PROGRESS, WAIT_S, marker
from support import SAMPLE_TOOLS, error_of, http_server, server_argv, server_env

Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]
LIMIT = 20_000  # MAX_RESULT_BYTES for these servers

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("mode", ERAS)]


def params(env: dict[str, str], **settings: str) -> StdioServerParameters:
    command, *args = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    return StdioServerParameters(command=command, args=args, env={**env, **server_env(**settings)})


def text(result: CallToolResult) -> str:
    assert len(result.content) == 1
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


async def test_text_over_the_limit_is_cut_on_a_character_with_a_note(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    async with Client(params(subprocess_env, max_result_bytes=str(LIMIT)), mode=mode) as client:
        whole = await client.call_tool("big_text", {"size": LIMIT - 10})
        cut = await client.call_tool("big_text", {"size": 3 * LIMIT})
        own_limit = await client.call_tool("small_text", {"size": 5000})

    assert not whole.is_error
    assert len(text(whole).encode()) == LIMIT - 10
    assert (whole.meta or {}).get("truncated") is None
    assert not cut.is_error
    shown = text(cut)
    assert len(shown.encode()) <= LIMIT
    body, _, note = shown.rpartition("\n\n[cut: ")
    assert set(body) == {"é"}, "the cut falls between characters"
    assert note.startswith(f"{3 * LIMIT - len(body.encode())} of {3 * LIMIT} bytes not shown")
    assert "Ask for less" in note
    assert cut.meta is not None
    assert cut.meta["truncated"] == {"bytes": 3 * LIMIT, "limit": LIMIT}
    assert cut.structured_content == {"result": shown}, "the structured echo says the same"
    assert own_limit.meta is not None
    assert own_limit.meta["truncated"] == {"bytes": 5000, "limit": 2000}
    assert len(text(own_limit).encode()) <= 2000


async def test_structured_content_over_the_limit_is_too_large_and_replayed_for_a_side_effect(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    async with Client(params(subprocess_env, max_result_bytes=str(LIMIT)), mode=mode) as client:
        table = await client.call_tool("big_table", {"size": 5000})
        small_table = await client.call_tool("big_table", {"size": 3})
        brief = await client.call_tool("brief_with_data", {"size": LIMIT})  # short text, large data
        receipt = {"account": "acme", "size": 5000, "idempotency_key": "order-7"}
        charged = [await client.call_tool("charge_with_receipt", receipt) for _ in range(2)]

    message, error = error_of(table)
    assert (error["category"], error["retryable"]) == ("too_large", False)
    assert f"over the limit of {LIMIT} bytes" in message
    assert "Ask for less" in message
    assert not small_table.is_error
    assert small_table.structured_content is not None
    assert error_of(brief)[1]["category"] == "too_large"
    for answer in charged:
        message, error = error_of(answer)
        assert error["category"] == "too_large"
        assert "do not repeat it" in message
    assert charged[1].meta is not None
    assert charged[1].meta["idempotency"]["replayed"] is True
    assert effects_count() == 1, "the retry replayed the answer the model saw; it charged once"


async def test_progress_strictly_increases_heartbeats_included_and_never_passes_the_total(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    heard: list[tuple[float, float | None, str | None]] = []

    def index_of(message: str) -> int | None:
        return next((i for i, (*_, said) in enumerate(heard) if said == message), None)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))
        own_at = index_of("own progress")  # on a busy machine heartbeats may come before it
        if own_at is not None and len(heard) - own_at > 2:
            marker("beats.seen").touch()

    async with Client(params(subprocess_env, progress_interval_s="0.05"), mode=mode) as client:
        with anyio.fail_after(WAIT_S + 30):
            result = await client.call_tool(
                "wait_for_heartbeats", {"name": "beats"}, progress_callback=on_progress
            )

    assert text(result) == "the test saw the heartbeats"
    values = [progress for progress, *_ in heard]
    assert all(earlier < later for earlier, later in pairwise(values)), values
    own, total = OWN_PROGRESS
    own_at, again_at = index_of("own progress"), index_of("own progress again")
    assert own_at is not None
    assert again_at is not None
    beats = [(progress, sent_total) for progress, sent_total, _ in heard[own_at + 1 : again_at]]
    assert len(beats) >= 2
    assert all(own < progress < total and sent_total == total for progress, sent_total in beats), beats
    (again,) = [progress for progress, _, said in heard if said == "own progress again"]
    assert own < again < own + 0.001, "a repeated report is lifted just above the last value"
    assert heard[-1] == (total, total, "done"), "nothing after the total, in 5 heartbeat intervals"
    others = [said for *_, said in heard if not (said or "").startswith(("own progress", "done"))]
    assert others
    assert all(said and said.startswith("still running after") for said in others)


async def test_a_progress_token_too_long_to_echo_is_refused_before_anything_runs(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    arguments = {"account": "acme", "cents": 500, "idempotency_key": "order-1:charge"}
    long_token = "t" * 1_000_000  # every heartbeat would send it back
    short_token = "t" * (MAX_PROGRESS_TOKEN_BYTES - 2)  # its JSON form (quotes included) is at the limit
    async with Client(params(subprocess_env), mode=mode) as client:
        refused = await client.call_tool("charge", arguments, meta={"progress_token": long_token})
        assert effects_count() == 0, "refused before the claim and the body"
        charged = await client.call_tool("charge", arguments, meta={"progress_token": short_token})

    said, error = error_of(refused)
    assert (error["category"], error["retryable"]) == ("invalid_input", False)
    assert f"1000002 bytes of JSON, over the limit of {MAX_PROGRESS_TOKEN_BYTES}" in said
    assert not charged.is_error, "the key was never claimed: the call with a short token runs"
    assert effects_count() == 1


async def cancel_once_started(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    """Call `tool`, and cancel the call once the tool wrote its `started` marker."""
    name = arguments["name"]
    async with anyio.create_task_group() as group:

        async def call() -> None:
            await client.call_tool(tool, arguments)
            pytest.fail(f"{tool} answered instead of being cancelled")

        group.start_soon(call)
        with anyio.fail_after(WAIT_S):
            while not marker(f"{name}.started").exists():  # noqa: ASYNC110 - the tool writes a file
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    with anyio.fail_after(WAIT_S):
        while not marker(f"{name}.cancelled").exists():  # noqa: ASYNC110 - the tool writes a file
            await anyio.sleep(0.05)


# A cancelled tool without side effects leaves nothing in the store: one of the CI's two runs is
# enough for these; a cancelled side effect (below) runs in both.
@pytest.mark.answers_independent_postgres
@pytest.mark.parametrize("tool", ["wait_for_cancel", "wait_for_cancel_sync"])
async def test_a_cancelled_call_stops_its_tool(subprocess_env: dict[str, str], mode: Mode, tool: str) -> None:
    async with Client(params(subprocess_env), mode=mode) as client:
        await cancel_once_started(client, tool, {"name": tool})
        after = await client.call_tool("health_check", {})
    assert not after.is_error, "the server goes on serving"


@pytest.mark.answers_independent_postgres
@pytest.mark.network
@pytest.mark.parametrize("tool", ["wait_for_cancel", "wait_for_cancel_sync"])
async def test_a_cancelled_call_over_http_stops_its_tool(
    subprocess_env: dict[str, str], mode: Mode, tool: str
) -> None:
    # 2025-11-25 sends notifications/cancelled; 2026-07-28 has none over HTTP and closes the response stream.
    with http_server(subprocess_env, extra_tools=SAMPLE_TOOLS) as (url, _):
        async with Client(url, mode=mode) as client:
            await cancel_once_started(client, tool, {"name": tool})
            after = await client.call_tool("health_check", {})
    assert not after.is_error, "the server goes on serving"


async def test_a_side_effect_cancelled_after_it_started_is_in_doubt(
    subprocess_env: dict[str, str], mode: Mode
) -> None:
    arguments = {"account": "acme", "name": "charge", "idempotency_key": "order-9"}
    async with Client(params(subprocess_env), mode=mode) as client:
        await cancel_once_started(client, "charge_until_cancelled", arguments)
        with anyio.fail_after(WAIT_S):
            while True:  # the cancellation is recorded just after the tool saw it: "still running" till then
                retry = await client.call_tool("charge_until_cancelled", arguments)
                if error_of(retry)[1]["category"] != "conflict":
                    break
                await anyio.sleep(0.1)
    message, error = error_of(retry)
    assert (error["category"], error["retryable"]) == ("in_doubt", False)
    assert "may or may not have taken effect" in message
    assert effects_count() == 1
