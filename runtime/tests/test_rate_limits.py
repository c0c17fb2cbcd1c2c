"""Rate and concurrency limits: a call over one is `rate_limited` with a `retry_after`, at once.

The buckets run on an injected clock (no sleeping); the limits are checked on real servers:
stdio (one bucket for the client), and HTTP with two bearer subjects, where a 2026-07-28
call over its caller's rate gets 429 with `Retry-After` while the other subject is served.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from http_support import client_with_token, json_rpc_answer, modern_call
from resilient_mcp import tool
from resilient_mcp.authoring.outcomes import RATE_LIMITED_CODE
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.rate_limits import MAX_BUCKETS, CallLimits, TokenBuckets
from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from sample_server.project import PACKAGE
from support import ANSWER_TIMEOUT_S, StdioSession, error_of, http_server, server_argv, server_env

LIMITED_TOOLS = """
import time
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import Field

from {package}.core import tool
from resilient_mcp.server.startup import load_settings
from {package}.settings import Settings

Name = Annotated[str, Field(description="Marker name")]


def marker(name: str) -> Path:
    path = load_settings(Settings).data_dir / "markers" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@tool(read_only=True)
async def ping() -> str:
    \"\"\"Answer at once.\"\"\"
    return "pong"


@tool(read_only=True, rate_limit=1)
async def once_a_minute() -> str:
    \"\"\"Answer at once, once a minute per caller.\"\"\"
    return "done"


@tool(read_only=True, max_concurrency=1, timeout_s=120)
async def hold(name: Name) -> str:
    \"\"\"Write `<name>.started`, then wait for `<name>.release`.\"\"\"
    marker(name + ".started").touch()
    deadline = time.monotonic() + 90
    while not marker(name + ".release").exists() and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    return "released"


@tool(side_effect=True)
async def send(text: Annotated[str, Field(description="What to send")]) -> str:
    \"\"\"Send once per idempotency key.\"\"\"
    return "sent " + text
"""


class SteppedClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limited_tools(tmp_path: Path) -> Path:
    tools = tmp_path / "limited_tools"
    tools.mkdir()
    (tools / "limited.py").write_text(LIMITED_TOOLS.format(package=PACKAGE))
    return tools


def wait_for_file(path: Path) -> None:
    """The handshake with a running tool: it wrote this file, so it is running now."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def tool_result(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def rate_limited(answer: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The text and `_meta.error` of a `rate_limited` result."""
    result = tool_result(answer)
    assert result["isError"], result
    error: dict[str, Any] = result["_meta"]["error"]
    text: str = result["content"][0]["text"]
    assert error["category"] == "rate_limited", result
    assert error["retryable"] is True
    assert text.startswith("rate_limited: ")
    return text, error


def call_lines(session: StdioSession) -> list[tuple[str, str, str | None]]:
    lines = [json.loads(line) for line in session.stderr_text().splitlines() if '"tool_call"' in line]
    return [(line["tool"], line["outcome"], line["category"]) for line in lines]


# -- the buckets, on a clock the test steps


def test_a_bucket_holds_a_minute_of_calls_refills_continuously_and_says_when_one_is_back() -> None:
    clock = SteppedClock()
    buckets = TokenBuckets(clock=clock)
    assert buckets.wait_s("a", 2) == 0
    buckets.take("a", 2)
    buckets.take("a", 2)
    assert buckets.wait_s("a", 2) == 30.0  # one call's worth at 2 per minute
    clock.now += 12
    assert buckets.wait_s("a", 2) == pytest.approx(18.0)
    assert buckets.wait_s("b", 2) == 0  # another caller has its own bucket
    clock.now += 18
    assert buckets.wait_s("a", 2) == 0
    buckets.take("a", 2)
    assert buckets.wait_s("a", 2) == pytest.approx(30.0)
    clock.now += 3600  # a long pause refills to the brim, not beyond
    for _ in range(2):
        buckets.take("a", 2)
    assert buckets.wait_s("a", 2) == pytest.approx(30.0)


def test_a_rate_under_one_per_minute_still_lets_one_call_through() -> None:
    buckets = TokenBuckets(clock=SteppedClock())
    assert buckets.wait_s("a", 0.5) == 0
    buckets.take("a", 0.5)
    assert buckets.wait_s("a", 0.5) == 120.0


def test_the_table_of_buckets_stays_bounded_under_100k_callers_and_forgets_the_idlest() -> None:
    clock = SteppedClock()
    buckets = TokenBuckets(clock=clock)
    buckets.take("steady", 1)
    for number in range(100_000):
        buckets.take(f"subject-{number}", 1)
        if number % 1000 == 0:
            buckets.take("steady", 1)  # used all along: never the least recently used
            clock.now += 0.001
        assert len(buckets) <= MAX_BUCKETS
    assert len(buckets) == MAX_BUCKETS
    assert buckets.wait_s("steady", 1) > 0  # kept
    assert buckets.wait_s("subject-99999", 1) > 0  # kept
    assert buckets.wait_s("subject-0", 1) == 0  # forgotten: it starts full again, as a new caller


def test_a_refused_call_takes_nothing_and_health_check_passes_every_limit() -> None:
    clock = SteppedClock()
    limits = CallLimits(rate_limit=3, max_concurrent_calls=1, clock=clock)
    capped = ToolSpec(fn=lambda: None, name="capped", rate_limit=1)
    other = ToolSpec(fn=lambda: None, name="other")
    health = ToolSpec(fn=lambda: None, name="health_check")
    assert limits.enter(capped, "alice") is None
    limits.leave(capped)
    refused = limits.enter(capped, "alice")
    assert refused is not None
    assert "capped's limit of 1 call per minute (its rate_limit)" in refused.message
    assert refused.retry_after_s == 60.0
    # The refusal spent none of alice's 3 per minute: two more calls pass.
    for _ in range(2):
        assert limits.enter(other, "alice") is None
        limits.leave(other)
    refused = limits.enter(other, "alice")
    assert refused is not None
    assert "(RATE_LIMIT)" in refused.message
    assert limits.enter(other, "bob") is None  # holds the one slot now
    refused = limits.enter(other, "carol")
    assert refused is not None
    assert "(MAX_CONCURRENT_CALLS)" in refused.message
    assert refused.retry_after_s == 1.0
    for _ in range(5):
        assert limits.enter(health, "alice") is None
    limits.leave(other)
    assert limits.running == 0


@pytest.mark.parametrize(
    "limits",
    [
        {"rate_limit": 0},
        {"rate_limit": -1},
        {"rate_limit": float("nan")},
        {"rate_limit": float("inf")},
        {"rate_limit": True},
        {"rate_limit": "5"},
        {"max_concurrency": 0},
        {"max_concurrency": 1.5},
        {"max_concurrency": True},
    ],
)
def test_limits_of_a_tool_must_be_positive(limits: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="must be a positive"):
        tool(**limits)


# -- real servers


@pytest.mark.parametrize("era", [LEGACY, MODERN])
def test_stdio_rate_limit_refuses_the_call_past_it_with_retry_after_and_logs_it(
    limited_tools: Path, data_dir: Path, era: Era
) -> None:
    env = server_env(data_dir=str(data_dir), rate_limit="2")
    ping = with_envelope(era, {"name": "ping"})
    with StdioSession(server_argv(extra_tools=limited_tools), env=env) as session:
        assert "result" in open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        for _ in range(2):
            assert not tool_result(session.request("tools/call", ping))["isError"]
        text, error = rate_limited(session.request("tools/call", ping))
        assert 29 < error["retry_after_s"] <= 30
        assert "limit of 2 calls per minute (RATE_LIMIT)" in text
        assert "try again in 30 s" in text
        # health_check is exempt: an operator can still look at a server over its limits.
        health = with_envelope(era, {"name": "health_check"})
        assert not tool_result(session.request("tools/call", health))["isError"]
        assert session.close() == 0, session.stderr_tail()
        assert call_lines(session)[2] == ("ping", "error", "rate_limited")


def test_a_tools_own_rate_limit_refuses_that_tool_only(
    limited_tools: Path, subprocess_env: dict[str, str]
) -> None:
    with StdioSession(server_argv(extra_tools=limited_tools), env=subprocess_env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        assert not tool_result(session.request("tools/call", {"name": "once_a_minute"}))["isError"]
        text, error = rate_limited(session.request("tools/call", {"name": "once_a_minute"}))
        assert "once_a_minute's limit of 1 call per minute (its rate_limit)" in text
        assert 59 < error["retry_after_s"] <= 60
        assert not tool_result(session.request("tools/call", {"name": "ping"}))["isError"]


def test_max_concurrent_calls_refuses_at_once_and_a_refused_side_effect_can_be_retried(
    limited_tools: Path, data_dir: Path
) -> None:
    env = server_env(data_dir=str(data_dir), max_concurrent_calls="1")
    markers = data_dir / "markers"
    send = {"name": "send", "arguments": {"text": "hi", "idempotency_key": "key-1"}}
    with StdioSession(server_argv(extra_tools=limited_tools), env=env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        session.send(
            {
                "jsonrpc": "2.0",
                "id": "held",
                "method": "tools/call",
                "params": {"name": "hold", "arguments": {"name": "a"}},
            }
        )
        wait_for_file(markers / "a.started")
        text, error = rate_limited(session.request("tools/call", {"name": "ping"}))
        assert "limit of 1 call at once (MAX_CONCURRENT_CALLS)" in text
        assert "try again in 1 s" in text
        assert error["retry_after_s"] == 1.0
        rate_limited(session.request("tools/call", send))  # refused before the idempotency table
        assert not tool_result(session.request("tools/call", {"name": "health_check"}))["isError"]
        (markers / "a.release").touch()
        assert not tool_result(session.wait_for("held"))["isError"]
        sent = tool_result(session.request("tools/call", send))
        assert not sent["isError"], sent
        assert sent["content"][0]["text"] == "sent hi"
        assert session.close() == 0, session.stderr_tail()
        lines = call_lines(session)
    assert ("send", "ok", None) in lines  # it ran: the refusal stored no claim to replay
    assert lines.count(("ping", "error", "rate_limited")) == 1


def test_a_tools_max_concurrency_refuses_that_tool_only(limited_tools: Path, data_dir: Path) -> None:
    env = server_env(data_dir=str(data_dir))
    markers = data_dir / "markers"
    with StdioSession(server_argv(extra_tools=limited_tools), env=env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        session.send(
            {
                "jsonrpc": "2.0",
                "id": "held",
                "method": "tools/call",
                "params": {"name": "hold", "arguments": {"name": "a"}},
            }
        )
        wait_for_file(markers / "a.started")
        text, _ = rate_limited(session.request("tools/call", {"name": "hold", "arguments": {"name": "b"}}))
        assert "hold is already running its limit of 1 call at once (its max_concurrency)" in text
        assert not tool_result(session.request("tools/call", {"name": "ping"}))["isError"]
        (markers / "a.release").touch()
        assert not tool_result(session.wait_for("held"))["isError"]
        (markers / "b.release").touch()
        assert not tool_result(session.request("tools/call", {"name": "hold", "arguments": {"name": "b"}}))[
            "isError"
        ]


def served(status: int, body: str) -> bool:
    """Whether an HTTP answer is 200 with a tool result that is not an error."""
    assert status == 200, body
    return not json_rpc_answer(body)["result"]["isError"]


@pytest.mark.network
@pytest.mark.anyio
async def test_http_caller_over_its_rate_gets_429_with_retry_after_while_another_is_served(
    limited_tools: Path, data_dir: Path, tmp_path: Path
) -> None:
    alice, bob = "a" * 40, "b" * 40
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {alice}\nbob {bob}\n")
    env = server_env(data_dir=str(data_dir), auth="bearer", bearer_tokens_file=str(tokens), rate_limit="2")
    with http_server(env, extra_tools=limited_tools) as (url, process):
        for request_id in (1, 2):
            status, _, body = modern_call(url, alice, "ping", request_id)
            assert served(status, body)
        status, headers, body = modern_call(url, alice, "ping", 3)
        assert status == 429, body
        error = json.loads(body)["error"]
        assert error["code"] == RATE_LIMITED_CODE
        assert "limit of 2 calls per minute (RATE_LIMIT)" in error["message"]
        # One call's worth at 2 per minute, less what refilled since alice's first call.
        assert 0 < error["data"]["retry_after_s"] <= 30
        assert 0 <= int(headers["retry-after"]) - error["data"]["retry_after_s"] < 1.001
        status, _, body = modern_call(url, alice, "health_check", 4)  # exempt
        assert served(status, body)

        status, _, body = modern_call(url, bob, "ping", 5)  # another subject, its own bucket
        assert served(status, body)
        # The 2025-11-25 era names no method in headers: bob's call past the rate reaches the
        # core, which answers `rate_limited` in the result.
        async with client_with_token(url, bob, mode="legacy") as client:
            assert not (await client.call_tool("ping", {})).is_error
            text, error = error_of(await client.call_tool("ping", {}))
        assert (error["category"], error["retryable"]) == ("rate_limited", True)
        assert "(RATE_LIMIT)" in text
        assert 0 < error["retry_after_s"] <= 30
        process.terminate()
        _, stderr = process.communicate(timeout=ANSWER_TIMEOUT_S)
    lines = [json.loads(line) for line in stderr.decode().splitlines() if '"tool_call"' in line]
    refused = [line for line in lines if line["category"] == "rate_limited"]
    # The 429 was refused before any call began: only bob's call in the core has a line.
    assert [(line["tool"], line["subject"]) for line in refused] == [("ping", "bob")]
