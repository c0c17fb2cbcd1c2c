"""A tool that raises something that is not an `Exception`: this call fails, nothing else does.

A `BaseException` subclass, or a `CancelledError` the tool let through from elsewhere,
used to end a stdio session (no answer, exit 1, a raw traceback with secrets in it) and
to break the HTTP session manager for every later request of every client.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from mcp import Client

from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from sample_tools.failing import PLANTED_SECRET
from support import (
    ANSWER_TIMEOUT_S,
    SAMPLE_TOOLS,
    StdioSession,
    error_of,
    http_server,
    server_argv,
    server_env,
)

ESCAPING = ["raises_base_exception", "awaits_a_cancelled_task", "raises_cancelled_sync"]
# Tools without side effects called with valid arguments: the answers (the store, strict arguments)
# change nothing, so one of the CI's two runs is enough; the side-effecting one runs in both.
no_side_effect = pytest.mark.answers_independent_postgres


def call(session: StdioSession, era: Era, name: str, arguments: dict[str, object]) -> dict[str, object]:
    answer = session.request("tools/call", with_envelope(era, {"name": name, "arguments": arguments}))
    assert "result" in answer, answer
    result: dict[str, object] = answer["result"]
    return result


@no_side_effect
@pytest.mark.parametrize("era", [MODERN, LEGACY])
@pytest.mark.parametrize("tool", ESCAPING)
def test_over_stdio_the_call_is_answered_and_the_session_goes_on(
    era: Era, tool: str, subprocess_env: dict[str, str]
) -> None:
    with StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=subprocess_env) as session:
        open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        failed = call(session, era, tool, {})
        after = call(session, era, "echo", {"text": "still here"})
        exit_code = session.close()
    assert failed["isError"] is True
    meta = failed["_meta"]
    assert isinstance(meta, dict)
    assert meta["error"]["category"] == "internal"
    assert after.get("isError") is not True
    assert after["content"] == [{"type": "text", "text": "still here"}]
    assert exit_code == 0
    stderr = session.stderr_text()
    assert "tool_failed" in stderr
    assert PLANTED_SECRET not in stderr
    assert all(line.startswith("{") for line in stderr.splitlines()), "a traceback outside the JSON log"


def test_a_side_effecting_call_that_raises_one_is_in_doubt(subprocess_env: dict[str, str]) -> None:
    with StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=subprocess_env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        arguments = {"cents": 5, "idempotency_key": "escape-1"}
        first = call(session, MODERN, "charge_then_raise_base_exception", arguments)
        retry = call(session, MODERN, "charge_then_raise_base_exception", arguments)
    for result in (first, retry):
        meta = result["_meta"]
        assert isinstance(meta, dict)
        assert meta["error"]["category"] == "in_doubt"


@pytest.mark.anyio
@no_side_effect
@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_over_http_later_requests_of_every_client_still_work(
    data_dir: Path, stateless: bool, mode: Literal["legacy", "auto"]
) -> None:
    shared = {"request_state_keys": "escaping-exceptions-request-state-key-0123"} if stateless else {}
    env = server_env(data_dir=str(data_dir), http_stateless=str(stateless).lower(), **shared)
    with http_server(env, extra_tools=SAMPLE_TOOLS) as (url, process):
        async with Client(url, mode=mode) as client:
            results = [await client.call_tool(tool, {}) for tool in ESCAPING]
            same_session = await client.call_tool("echo", {"text": "same session"})
        for other_mode in ("legacy", "auto"):
            async with Client(url, mode=other_mode) as other:
                later = await other.call_tool("echo", {"text": "new client"})
                assert not later.is_error
        assert process.poll() is None
    for result in results:
        _, error = error_of(result)
        assert error["category"] == "internal"
    assert not same_session.is_error


def test_an_uncaught_exception_at_the_top_is_one_redacted_json_line(subprocess_env: dict[str, str]) -> None:
    """Python's last-resort hook: what the process itself fails with is logged, never printed raw."""
    script = (
        "from resilient_mcp.telemetry.logs import configure_logging\n"
        "configure_logging('info')\n"
        f"raise RuntimeError('password {PLANTED_SECRET} rejected')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=subprocess_env, capture_output=True, timeout=ANSWER_TIMEOUT_S
    )
    stderr = done.stderr.decode()
    assert done.returncode == 1
    assert "uncaught_exception" in stderr
    assert PLANTED_SECRET not in stderr
    assert all(line.startswith("{") for line in stderr.splitlines() if line.strip())
