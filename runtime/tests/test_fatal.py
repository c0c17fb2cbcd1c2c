"""A FatalError while serving: the call is answered, then the process exits 70."""

from __future__ import annotations

import pytest

from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from support import ANSWER_TIMEOUT_S, HERE, SAMPLE_TOOLS, StdioSession, server_argv


@pytest.mark.parametrize("era", [MODERN, LEGACY])
# FatalError, SystemExit and KeyboardInterrupt alike.
@pytest.mark.parametrize("tool", ["fatal", "exits", "interrupted"])
def test_fatal_error_answers_then_exits_70_with_stdin_open(
    era: Era, tool: str, subprocess_env: dict[str, str]
) -> None:
    with StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=subprocess_env) as session:
        open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        answer = session.request("tools/call", with_envelope(era, {"name": tool, "arguments": {}}))
        # stdin stays open: the client has not gone away, the server leaves on its own.
        exit_code = session.process.wait(timeout=ANSWER_TIMEOUT_S)
    result = answer["result"]
    assert result["isError"] is True
    assert result["_meta"]["error"]["category"] == "fatal"
    assert exit_code == 70  # EX_SOFTWARE, written out: a changed constant fails here
    assert session.noise == []
    assert any("tool_failed" in line for line in session.stderr_tail(max_lines=50))


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_fatal_error_reading_a_resource_answers_then_exits_70(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    argv = server_argv("serve", extra_tools=HERE / "primitive_tools")
    with StdioSession(argv, env=subprocess_env) as session:
        open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        answer = session.request("resources/read", with_envelope(era, {"uri": "books://doomed"}))
        exit_code = session.process.wait(timeout=ANSWER_TIMEOUT_S)
    error = answer["error"]
    assert error["message"].startswith("fatal: the server hit an unrecoverable error and is stopping")
    assert error["data"]["category"] == "fatal"
    assert exit_code == 70  # EX_SOFTWARE, written out: a changed constant fails here
    assert session.noise == []
