"""Stopping on SIGTERM, SIGINT, SIGHUP or the end of stdin: every call in flight gets an answer, and
the process exits 0 within the grace plus a small bound, even with a thread that never returns.

Four calls are in flight when the stop comes: one that ends within the grace, one async
call and one sync call (stuck in a thread nothing can stop) that outlive it, and a
side-effecting call that outlives it after its body began.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from resilient_mcp.calls.shutdown import EXIT_BOUND_S
from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from support import ANSWER_TIMEOUT_S, HTTP_TOOLS, StdioSession, error_of, http_server, server_argv, server_env

GRACE_S = 2
# What the process may take past the grace and its own bound on a loaded machine (it never
# measures speed: without the bound, a stuck thread kept the process alive for good).
EXIT_SLACK_S = 20
# Long enough for all four to be seen in flight together on a loaded machine, and half the grace.
FINISHES_S = 1
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "finishes": ("wait", {"seconds": FINISHES_S}),
    "outlives_async": ("wait", {"seconds": 60}),
    "outlives_sync": ("hang", {"seconds": 60}),
    "side_effect": ("send_slowly", {"seconds": 60, "idempotency_key": "shutdown-1"}),
}


def other_signal(*values: str) -> Any:
    """The signal changes how the drain begins, not what the store records of the calls it cuts:
    SIGTERM (what hosts and orchestrators send) runs in both CI runs, SIGINT and SIGHUP in one."""
    return pytest.param(*values, marks=pytest.mark.answers_independent_postgres)


def check_answers(answers: dict[str, tuple[bool, dict[str, Any] | None, str]]) -> None:
    """(is_error, _meta.error, text) per call: who finished, who was cut, and how."""
    assert answers["finishes"] == (False, None, f"waited {FINISHES_S} s")
    for cut in ("outlives_async", "outlives_sync"):
        is_error, error, text = answers[cut]
        assert is_error, answers[cut]
        assert error is not None
        assert error["category"] == "transient", text
        assert error["retryable"] is True
        assert "stopping" in text
    is_error, error, text = answers["side_effect"]
    assert is_error
    assert error is not None
    assert error["category"] == "in_doubt", text


def exit_within_bound(wait: Any) -> int:
    code: int = wait(timeout=GRACE_S + EXIT_BOUND_S + EXIT_SLACK_S)
    return code


def of_result(result: CallToolResult) -> tuple[bool, dict[str, Any] | None, str]:
    if result.is_error:
        text, error = error_of(result)
        return True, error, text
    first = result.content[0]
    return False, None, getattr(first, "text", "")


def of_raw(answer: dict[str, Any]) -> tuple[bool, dict[str, Any] | None, str]:
    assert "result" in answer, answer
    result = answer["result"]
    meta = result.get("_meta") or {}
    return bool(result.get("isError")), meta.get("error"), result["content"][0]["text"]


async def wait_until_in_flight(url: str, calls: int) -> None:
    async with Client(url) as client:
        with anyio.fail_after(ANSWER_TIMEOUT_S):
            while True:
                health = await client.call_tool("health_check", {})
                assert isinstance(health.structured_content, dict)
                if health.structured_content["in_flight"] >= calls:
                    return
                await anyio.sleep(0.05)


def drain_reasons(stderr: str) -> list[str]:
    """The reason of each `draining` line: every stop is logged, whatever signal asked for it."""
    logged = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line["reason"] for line in logged if line["event"] == "draining"]


@pytest.mark.network
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "stop"),
    [
        ("legacy", "SIGTERM"),
        ("auto", "SIGTERM"),
        other_signal("auto", "SIGINT"),
        other_signal("legacy", "SIGHUP"),
    ],
)
async def test_a_signal_over_http_answers_every_call_and_exits_0_within_the_bound(
    data_dir: Path, mode: Literal["legacy", "auto"], stop: str
) -> None:
    """Sent twice: the second is logged and cuts nothing sooner (uvicorn's second SIGINT forces an exit)."""
    env = server_env(data_dir=str(data_dir), shutdown_grace_s=str(GRACE_S))
    answers: dict[str, tuple[bool, dict[str, Any] | None, str]] = {}
    with http_server(env, extra_tools=HTTP_TOOLS) as (url, process):

        async def call(label: str) -> None:
            name, arguments = CALLS[label]
            async with Client(url, mode=mode) as client:
                await client.list_tools()  # not on a new connection once the server drains
                answers[label] = of_result(await client.call_tool(name, arguments))

        async with anyio.create_task_group() as group:
            for label in CALLS:
                group.start_soon(call, label)
            await wait_until_in_flight(url, len(CALLS))
            process.send_signal(signal.Signals[stop])
            await anyio.sleep(0.2)
            process.send_signal(signal.Signals[stop])  # logged; it cuts nothing sooner
            code = await anyio.to_thread.run_sync(exit_within_bound, process.wait)
        stderr = process.stderr.read().decode() if process.stderr else ""
    assert code == 0
    check_answers(answers)
    assert drain_reasons(stderr) == [stop]
    assert "stop_requested_again" in stderr
    # Its own way out, not the watchdog's: after uvicorn's force-exit on a second SIGINT, the
    # signal it re-raised would have ended the process before the watchdog made it exit 0.
    assert "exit_bound_exceeded" not in stderr
    with http_server(env, extra_tools=HTTP_TOOLS) as (url, _):
        async with Client(url) as client:
            retry = await client.call_tool(*CALLS["side_effect"])
    assert error_of(retry)[1]["category"] == "in_doubt"


def start_calls(session: StdioSession, era: Era) -> dict[str, int]:
    ids: dict[str, int] = {}
    for number, (label, (name, arguments)) in enumerate(CALLS.items(), start=100):
        params = with_envelope(era, {"name": name, "arguments": arguments})
        session.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
        ids[label] = number
    health_check = with_envelope(era, {"name": "health_check", "arguments": {}})
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while time.monotonic() < deadline:
        health = session.request("tools/call", health_check)
        if health["result"]["structuredContent"]["in_flight"] >= len(CALLS):
            return ids
        time.sleep(0.05)
    raise AssertionError("the calls never were in flight together")


def answers_to(
    session: StdioSession, ids: dict[str, int]
) -> dict[str, tuple[bool, dict[str, Any] | None, str]]:
    """The answer to each request, in whatever order they came (every message read is kept)."""
    answers = {}
    for label, number in ids.items():
        seen = [m for m in session.messages if m.get("id") == number and "method" not in m]
        answers[label] = of_raw(seen[0] if seen else session.wait_for(number))
    return answers


@pytest.mark.parametrize("era", [MODERN, LEGACY])
@pytest.mark.parametrize("stop", ["SIGTERM", other_signal("SIGINT"), other_signal("SIGHUP")])
def test_a_signal_over_stdio_answers_every_call_and_exits_0_within_the_bound(
    data_dir: Path, era: Era, stop: str
) -> None:
    env = server_env(data_dir=str(data_dir), shutdown_grace_s=str(GRACE_S))
    with StdioSession(server_argv("serve", extra_tools=HTTP_TOOLS), env=env) as session:
        open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        ids = start_calls(session, era)
        session.process.send_signal(signal.Signals[stop])
        time.sleep(0.2)
        late = with_envelope(era, {"name": "wait", "arguments": {"seconds": 0}})
        refused = session.request("tools/call", late)
        answers = answers_to(session, ids)
        code = exit_within_bound(session.process.wait)  # stdin is still open: the signal ends it
    assert code == 0
    check_answers(answers)
    is_error, error, text = of_raw(refused)
    assert is_error
    assert error is not None
    assert error["category"] == "transient", text
    assert "no new calls" in text
    assert drain_reasons(session.stderr_text()) == [stop]


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_the_end_of_stdin_answers_the_calls_in_flight_and_exits_0_within_the_bound(
    data_dir: Path, era: Era
) -> None:
    env = server_env(data_dir=str(data_dir), shutdown_grace_s=str(GRACE_S))
    with StdioSession(server_argv("serve", extra_tools=HTTP_TOOLS), env=env) as session:
        open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        ids = start_calls(session, era)
        assert session.process.stdin is not None
        session.process.stdin.close()  # the client is done sending, and still reads
        answers = answers_to(session, ids)
        code = exit_within_bound(session.process.wait)
    assert code == 0
    check_answers(answers)
