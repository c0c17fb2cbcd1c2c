"""In stdio mode nothing but JSON-RPC ever reaches stdout, whatever the tools print."""

from __future__ import annotations

import pytest

from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from support import ANSWER_TIMEOUT_S, NOISY_TOOLS, StdioSession, server_argv

EXPECTED_NOISE = [
    "NOISE import-time print, unflushed",
    "NOISE import-time print, flushed",
    "NOISE import-time sys.stdout.write",
    "NOISE print in a tool, unflushed",
    "NOISE os.write to fd 1",
    "NOISE child process",
    "NOISE a log line",
    "NOISE print at exit",
]


@pytest.mark.smoke
@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_only_jsonrpc_reaches_stdout_even_when_tools_print(era: Era, subprocess_env: dict[str, str]) -> None:
    session = StdioSession(server_argv(extra_tools=NOISY_TOOLS), env=subprocess_env)
    with session:
        assert "result" in open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        listing = session.request("tools/list", with_envelope(era))
        assert "chatty" in [t["name"] for t in listing["result"]["tools"]]
        answer = session.request("tools/call", with_envelope(era, {"name": "chatty", "arguments": {}}))
        assert answer["result"]["content"][0]["text"] == "quiet answer"
        exit_code = session.close()

    assert exit_code == 0
    assert session.noise == [], f"non-JSON-RPC lines on stdout: {session.noise}"
    assert [m.get("id") for m in session.messages] == [1, 2, 3], "one answer to each request, nothing else"
    # The output was not lost either: it went to stderr, where operators look.
    stderr = "\n".join(session.stderr_tail(max_lines=500))
    for marker in EXPECTED_NOISE:
        assert marker in stderr
