"""Resources, prompts and completions pass through the same core as tools, in both eras.

A failure is a JSON-RPC error (there is no `isError` for them): its message says what to do
and holds no secret, its `data` carries the category and the correlation id the server's log
has the details under. Unknown names and bad arguments are -32602, the rest -32603.

They are bounded as tool calls are, on real servers over stdio and HTTP: the caller's
`RATE_LIMIT` bucket and `MAX_CONCURRENT_CALLS` are shared with its tool calls (a refusal is
`rate_limited`, -32023, or HTTP 429 where the 2026-07-28 headers name the method), and
`TOOL_TIMEOUT_S` stops them (`timeout`); health_check counts them with the tool calls.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    PromptReference,
    ResourceTemplateReference,
    ResourceUpdatedNotification,
    TextContent,
    TextResourceContents,
)

from http_support import client_with_token, json_rpc_answer, modern_call, modern_request
from primitive_tools.library import LEAKED
from resilient_mcp.authoring.outcomes import RATE_LIMITED_CODE
from sample_server.project import STRICT_ARGUMENTS
from support import ANSWER_TIMEOUT_S, HERE, error_of, http_server, server_argv, server_env

pytestmark = [pytest.mark.anyio]

PRIMITIVE_TOOLS = HERE / "primitive_tools"
Mode = Literal["legacy", "auto"]
eras = pytest.mark.parametrize("mode", ["legacy", "auto"])
# Resources, completions and their limits use neither answer (the store, strict arguments): one of
# the CI's two runs is enough. The prompts' argument check is strict or lenient, so it runs in both.
no_store_no_validation = pytest.mark.answers_independent_postgres


def params(data_dir: Path, **settings: str) -> StdioServerParameters:
    command, *args = server_argv("serve", extra_tools=PRIMITIVE_TOOLS)
    return StdioServerParameters(
        command=command, args=args, env=server_env(data_dir=str(data_dir), **settings)
    )


def log_lines(log: TextIO) -> list[dict[str, Any]]:
    log.seek(0)
    return [json.loads(line) for line in log.read().splitlines() if line.startswith("{")]


async def refused(call: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await call
    return caught.value


@no_store_no_validation
@eras
async def test_resources_are_listed_and_read_and_their_failures_are_categorised(
    data_dir: Path, mode: Mode
) -> None:
    with tempfile.TemporaryFile("w+") as log:
        async with Client(stdio_client(params(data_dir), errlog=log), mode=mode) as client:
            listed = sorted(str(item.uri) for item in (await client.list_resources()).resources)
            templates = [
                item.uri_template for item in (await client.list_resource_templates()).resource_templates
            ]
            text = (await client.read_resource("books://2/title")).contents[0]
            crashed = await refused(client.read_resource("books://broken"))
            busy = await refused(client.read_resource("books://busy"))
            unknown = await refused(client.read_resource("books://catalog"))
            mistyped = await refused(client.read_resource("books://two/title"))
        lines = log_lines(log)

    assert listed == [
        "books://broken",
        "books://busy",
        "books://catalogue",
        "books://doomed",
        "books://watched",
        "skill://note-taking/SKILL.md",  # the stand-in project's skill, served beside them
    ]
    assert templates == ["books://{book_id}/title", "books://slow/{seconds}", "books://held/{name}"]
    assert isinstance(text, TextResourceContents)
    assert text.text == "Solaris"

    assert crashed.error.code == INTERNAL_ERROR
    data = crashed.error.data
    assert data["category"] == "internal"
    assert data["retryable"] is False
    assert data["uri"] == "books://broken"
    assert crashed.error.message.startswith("internal: ")
    assert data["correlation_id"] in crashed.error.message
    assert "hunter2" not in json.dumps(crashed.error.model_dump()), "the driver's text stays in the log"
    failed = [line for line in lines if line.get("correlation_id") == data["correlation_id"]]
    assert {line["event"] for line in failed} == {"request", "resources_read_failed"}
    assert "hunter2" not in json.dumps(failed), "the log holds the traceback, redacted"

    assert busy.error.code == INTERNAL_ERROR
    assert (busy.error.data["category"], busy.error.data["retryable"]) == ("transient", True)
    assert busy.error.data["retry_after_s"] == 3
    assert "the catalogue service is restarting" in busy.error.message

    assert unknown.error.code == INVALID_PARAMS
    assert unknown.error.data["uri"] == "books://catalog"
    assert "did you mean 'books://catalogue'?" in unknown.error.message

    assert mistyped.error.code == INVALID_PARAMS
    assert mistyped.error.data["category"] == "invalid_input"
    assert "book_id" in mistyped.error.message


@eras
async def test_prompts_check_their_arguments_strictly_and_hide_what_broke(data_dir: Path, mode: Mode) -> None:
    async with Client(stdio_client(params(data_dir)), mode=mode) as client:
        listed = {item.name: item for item in (await client.list_prompts()).prompts}
        rendered = await client.get_prompt("review", {"book": "Dune", "tone": "stern"})
        extra = {"book": "Dune", "tones": "stern"}
        if STRICT_ARGUMENTS:
            unknown_argument = await refused(client.get_prompt("review", extra))
        else:  # lenient: dropped, as a tool's unknown argument is
            dropped = await client.get_prompt("review", extra)
        missing = await refused(client.get_prompt("review", {"tone": "stern"}))
        unknown_prompt = await refused(client.get_prompt("reviews", {}))
        bad_value = await refused(client.get_prompt("review", {"book": "bad"}))
        crashed = await refused(client.get_prompt("broken_prompt", {}))

    assert sorted(listed) == ["broken_prompt", "review", "slow_prompt"]
    assert [(a.name, a.required) for a in listed["review"].arguments or []] == [
        ("book", True),
        ("tone", False),
    ]
    assert listed["broken_prompt"].title == "Broken prompt"
    message = rendered.messages[0].content
    assert isinstance(message, TextContent)
    assert message.text == "Write a stern review of Dune."

    if STRICT_ARGUMENTS:
        assert unknown_argument.error.code == INVALID_PARAMS
        assert "unknown argument 'tones' (did you mean 'tone'?)" in unknown_argument.error.message
    else:
        kind = dropped.messages[0].content
        assert isinstance(kind, TextContent)
        assert kind.text == "Write a kind review of Dune."
    assert missing.error.code == INVALID_PARAMS
    assert "'book' is required but missing" in missing.error.message
    assert unknown_prompt.error.code == INVALID_PARAMS
    assert "did you mean 'review'?" in unknown_prompt.error.message

    assert bad_value.error.code == INVALID_PARAMS
    assert bad_value.error.data["category"] == "invalid_input"
    assert "no such book" in bad_value.error.message
    assert "/srv/app" not in bad_value.error.message, "a path of the server's machine stays there"
    assert crashed.error.code == INTERNAL_ERROR
    assert crashed.error.data["category"] == "internal"
    assert LEAKED not in crashed.error.message
    assert "hunter2" not in crashed.error.message


@no_store_no_validation
@eras
async def test_completions_send_at_most_100_values_and_say_there_are_more(data_dir: Path, mode: Mode) -> None:
    async with Client(stdio_client(params(data_dir)), mode=mode) as client:
        reference = PromptReference(type="ref/prompt", name="review")
        everything = await client.complete(reference, {"name": "book", "value": "name-"})
        few = await client.complete(reference, {"name": "book", "value": "name-00"})

    assert len(everything.completion.values) == 100
    assert (everything.completion.total, everything.completion.has_more) == (150, True)
    assert few.completion.values == [f"name-00{digit}" for digit in range(10)]
    assert few.completion.has_more is False


@no_store_no_validation
async def test_a_2025_client_that_subscribes_hears_of_an_update_and_can_set_its_log_level(
    data_dir: Path,
) -> None:
    updates: list[str] = []
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            heard.set()

    async with (
        stdio_client(params(data_dir)) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        initialized = await session.initialize()
        await session.set_logging_level("warning")
        await session.subscribe_resource("books://watched")
        await session.call_tool("touch_watched", {})
        with anyio.fail_after(ANSWER_TIMEOUT_S):
            await heard.wait()
        await session.unsubscribe_resource("books://watched")
        await session.call_tool("touch_watched", {})
        await session.send_ping()  # the second announcement, had it been sent, arrived before this

    capabilities = initialized.capabilities
    assert capabilities.logging is not None
    assert capabilities.resources is not None
    assert capabilities.resources.subscribe is True
    assert updates == ["books://watched"]


# -- bounded like tool calls

REVIEW = PromptReference(type="ref/prompt", name="review")
SLOW = ResourceTemplateReference(type="ref/resource", uri="books://slow/{seconds}")


async def health(client: Client) -> dict[str, Any]:
    report: dict[str, Any] | None = (await client.call_tool("health_check", {})).structured_content
    assert report is not None
    return report


def assert_rate_limited(error: MCPError, over: str) -> None:
    """A refusal by a limit: -32023, `rate_limited` and when to retry, in the message and the data."""
    assert error.error.code == RATE_LIMITED_CODE, error.error
    data = error.error.data
    assert (data["category"], data["retryable"]) == ("rate_limited", True)
    assert 0 < data["retry_after_s"] <= 60
    assert data["correlation_id"]
    assert error.error.message.startswith("rate_limited: ")
    assert over in error.error.message
    assert "nothing was run, try again in " in error.error.message


@no_store_no_validation
@eras
async def test_reads_prompt_gets_and_completions_share_the_callers_rate_limit_with_its_tool_calls(
    data_dir: Path, mode: Mode
) -> None:
    """RATE_LIMIT=5: two tool calls and three other requests spend the bucket; then each is refused."""
    async with Client(stdio_client(params(data_dir, rate_limit="5")), mode=mode) as client:
        for _ in range(2):
            assert not (await client.call_tool("count_books", {})).is_error
        await client.read_resource("books://catalogue")
        await client.get_prompt("review", {"book": "Dune"})
        await client.complete(REVIEW, {"name": "book", "value": "name-00"})
        read = await refused(client.read_resource("books://catalogue"))
        got = await refused(client.get_prompt("review", {"book": "Dune"}))
        completed = await refused(client.complete(REVIEW, {"name": "book", "value": "name-00"}))
        text, tool_error = error_of(await client.call_tool("count_books", {}))
        report = await health(client)  # exempt: an operator can look at a server over its limits

    for error in (read, got, completed):
        assert_rate_limited(error, "this caller is over the limit of 5 calls per minute (RATE_LIMIT)")
        assert error.error.data["retry_after_s"] <= 12  # one call's worth at 5 per minute, less what refilled
    assert read.error.data["uri"] == "books://catalogue"
    assert tool_error["category"] == "rate_limited"
    assert "(RATE_LIMIT)" in text
    assert report["calls"] == 9
    assert report["errors"] == {"rate_limited": 4}


async def wait_until_started(*markers: Path) -> None:
    """The handshake with the held reads: each wrote its marker, so each is running now."""
    for _ in range(int(ANSWER_TIMEOUT_S / 0.02)):
        if all(marker.exists() for marker in markers):
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"the held reads never started within {ANSWER_TIMEOUT_S:g} s")


@no_store_no_validation
@eras
async def test_max_concurrent_calls_counts_reads_with_tool_calls_and_refuses_the_rest_at_once(
    data_dir: Path, mode: Mode
) -> None:
    """MAX_CONCURRENT_CALLS=2: two reads held open, eight more reads, a prompt and a tool call refused."""
    markers = data_dir / "markers"
    answers: dict[str, Any] = {}
    async with Client(stdio_client(params(data_dir, max_concurrent_calls="2")), mode=mode) as client:

        async def read(name: str) -> None:
            answers[name] = await client.read_resource(f"books://held/{name}")

        async with anyio.create_task_group() as group:
            for name in ("a", "b"):
                group.start_soon(read, name)
            await wait_until_started(markers / "a.started", markers / "b.started")
            more = [await refused(client.read_resource(f"books://held/{name}")) for name in "cdefghij"]
            prompt_error = await refused(client.get_prompt("review", {"book": "Dune"}))
            text, tool_error = error_of(await client.call_tool("count_books", {}))
            report = await health(client)
            (markers / "release").touch()

    for error in [*more, prompt_error]:
        assert_rate_limited(error, "the server is already running its limit of 2 calls at once")
        assert "(MAX_CONCURRENT_CALLS)" in error.error.message
        assert error.error.data["retry_after_s"] == 1.0
    assert not [name for name in "cdefghij" if (markers / f"{name}.started").exists()], "nothing ran"
    assert tool_error["category"] == "rate_limited"
    assert "(MAX_CONCURRENT_CALLS)" in text
    assert report["in_flight"] == 2  # the held reads, counted with the tool calls
    assert report["errors"] == {"rate_limited": 10}
    for name in ("a", "b"):
        content = answers[name].contents[0]
        assert isinstance(content, TextResourceContents)
        assert content.text == "released"


@no_store_no_validation
@eras
async def test_a_read_prompt_or_completion_past_tool_timeout_s_is_stopped_and_answered_timeout(
    data_dir: Path, mode: Mode
) -> None:
    """TOOL_TIMEOUT_S=2: each takes 6 s, is stopped at 2 s and answered `timeout`."""
    async with Client(stdio_client(params(data_dir, tool_timeout_s="2")), mode=mode) as client:
        read = await refused(client.read_resource("books://slow/6"))
        got = await refused(client.get_prompt("slow_prompt", {"seconds": "6"}))
        completed = await refused(client.complete(SLOW, {"name": "seconds", "value": "6"}))
        report = await health(client)
        quick = await client.read_resource("books://slow/0")  # the server is not stuck

    for error, what in [(read, "the resource read"), (got, "the prompt"), (completed, "the completion")]:
        assert error.error.code == INTERNAL_ERROR
        assert (error.error.data["category"], error.error.data["retryable"]) == ("timeout", True)
        assert f"timeout: {what} did not finish within 2 s (TOOL_TIMEOUT_S)" in error.error.message
        assert "retry later" in error.error.message
    assert read.error.data["uri"] == "books://slow/6"
    assert report["errors"] == {"timeout": 3}
    assert report["calls"] == 3
    assert quick.contents


SLOW_PROMPT = PromptReference(type="ref/prompt", name="slow_prompt")


@no_store_no_validation
async def test_a_sync_completer_holds_up_no_other_request_and_is_stopped_at_tool_timeout_s(
    data_dir: Path,
) -> None:
    """TOOL_TIMEOUT_S=2: a sync completer that blocks 6 s runs off the event loop, so a read sent
    after it is answered first, and the completion is answered `timeout`."""
    answered: list[str] = []
    async with Client(stdio_client(params(data_dir, tool_timeout_s="2"))) as client:
        completion: list[MCPError] = []

        async def complete() -> None:
            completion.append(await refused(client.complete(SLOW_PROMPT, {"name": "seconds", "value": "6"})))
            answered.append("completion")

        async with anyio.create_task_group() as group:
            group.start_soon(complete)
            await anyio.sleep(0.5)  # the completion is sent first (and if not, the order holds all the same)
            assert (await client.read_resource("books://slow/0")).contents
            answered.append("read")

    assert answered == ["read", "completion"]
    data = completion[0].error.data
    assert (data["category"], data["retryable"]) == ("timeout", True)
    assert "timeout: the completion did not finish within 2 s (TOOL_TIMEOUT_S)" in completion[0].error.message


@no_store_no_validation
@pytest.mark.network
async def test_http_read_past_the_callers_rate_gets_429_in_2026_and_rate_limited_in_2025(
    data_dir: Path, tmp_path: Path
) -> None:
    """RATE_LIMIT=2 with two bearer subjects: alice spends hers on tool calls, then her 2026-07-28
    read, prompt get and completion get 429 with Retry-After; bob's 2025-11-25 read past his rate
    reaches the core, which answers `rate_limited` (the era names no method in headers)."""
    alice, bob = "a" * 40, "b" * 40
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {alice}\nbob {bob}\n")
    env = server_env(data_dir=str(data_dir), auth="bearer", bearer_tokens_file=str(tokens), rate_limit="2")
    requests: list[tuple[str, dict[str, Any]]] = [
        ("resources/read", {"uri": "books://catalogue"}),
        ("prompts/get", {"name": "review", "arguments": {"book": "Dune"}}),
        ("completion/complete", {"ref": REVIEW.model_dump(), "argument": {"name": "book", "value": "n"}}),
    ]
    with http_server(env, extra_tools=PRIMITIVE_TOOLS) as (url, _):
        for request_id in (1, 2):
            status, _, body = modern_call(url, alice, "count_books", request_id)
            assert status == 200, body
            assert not json_rpc_answer(body)["result"]["isError"]
        refusals = [
            modern_request(url, alice, method, params, 10 + n) for n, (method, params) in enumerate(requests)
        ]
        status, _, body = modern_request(url, bob, *requests[0], 20)  # another subject, its own bucket
        assert status == 200, body
        assert json_rpc_answer(body)["result"]["contents"][0]["text"] == "Dune\nSolaris"
        async with client_with_token(url, bob, mode="legacy") as client:
            await client.read_resource("books://catalogue")
            over = await refused(client.read_resource("books://catalogue"))

    for status, headers, body in refusals:
        assert status == 429, body
        error = json.loads(body)["error"]
        assert error["code"] == RATE_LIMITED_CODE
        assert "limit of 2 calls per minute (RATE_LIMIT)" in error["message"]
        assert (error["data"]["category"], error["data"]["retryable"]) == ("rate_limited", True)
        wait_s = error["data"]["retry_after_s"]
        assert 0 < wait_s <= 30  # one call's worth at 2 per minute, less what refilled meanwhile
        assert 0 <= int(headers["retry-after"]) - wait_s < 1.001  # whole seconds, rounded up
    assert_rate_limited(over, "limit of 2 calls per minute (RATE_LIMIT)")
    assert over.error.data["retry_after_s"] <= 30
