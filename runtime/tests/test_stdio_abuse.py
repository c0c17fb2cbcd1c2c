"""The real server over stdio, fed garbage: it answers what it can and keeps serving.

Malformed protocol gets a JSON-RPC error, a tool failure an isError result; afterwards
health_check still works, stdout held nothing but JSON-RPC, and closing stdin ends the
process with exit 0.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from sample_server.project import STRICT_ARGUMENTS
from sample_tools.failing import PLANTED_SECRET
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, server_argv, server_env

ERAS = [MODERN, LEGACY]
BIG = 5_000_000  # characters: a multi-megabyte line
DEEP = 100_000  # nesting levels, far past any JSON parser's recursion limit
# NUL, zero-width characters, right-to-left text, a joined emoji, a combining accent, the last code point.
ODD_TEXT = "a\x00b \u200b\u200d\u202e\u05e9\u05dc\u05d5\u05dd \U0001f469\u200d\U0001f467 e\u0301 \U0010ffff"

# Lines with no request id a server could read: not JSON, not an object, a batch (MCP has none).
UNREADABLE = [
    b"this is not json",
    b'{"jsonrpc": "2.0", "id": ',
    b"[]",
    b"42",
    b'"a string"',
    b"\xff\xfe{\x00",
    b'[{"jsonrpc": "2.0", "id": 900, "method": "tools/list"}]',
    b"[" * DEEP + b"]" * DEEP,
    b"x" * BIG,
]
# Invalid requests whose id is readable: a client waits for an answer to that id.
INVALID_WITH_ID: list[dict[str, Any]] = [
    {"jsonrpc": "1.0", "id": 901, "method": "tools/list"},
    {"id": 902, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 903, "method": "tools/list", "params": [1, 2]},
    {"jsonrpc": "2.0", "id": "904", "method": "tools/list", "params": "text"},
    {"jsonrpc": "2.0", "id": 905, "method": 7},
    {
        "jsonrpc": "2.0",
        "id": 906,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "\ud800"}},
    },
]
# Requests with an id that is not a string or an integer: the answer carries id null.
INVALID_ID: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": [1], "method": "tools/list"},
    {"jsonrpc": "2.0", "id": True, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
]
# Messages that need no answer: an unknown notification, a tool call sent as a notification,
# a response to a request the server never made, blank lines.
UNANSWERED: list[bytes] = [
    b'{"jsonrpc": "2.0", "method": "notifications/bogus", "params": {"x": 1}}',
    b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "crash", "arguments": {}}}',
    b'{"jsonrpc": "2.0", "id": 907, "result": {}}',
    b'{"jsonrpc": "2.0", "id": 908, "error": {"code": -1, "message": "no"}}',
    b"",
    b"   \t",
]


def start(env: dict[str, str], era: Era) -> StdioSession:
    """The real command with the sample tools, its protocol opened in one era."""
    session = StdioSession(server_argv(extra_tools=SAMPLE_TOOLS), env=env)
    assert "result" in open_session(session, era, timeout=ANSWER_TIMEOUT_S)
    return session


def call(session: StdioSession, era: Era, name: str, arguments: Any, **params: Any) -> dict[str, Any]:
    return session.request("tools/call", with_envelope(era, {"name": name, "arguments": arguments, **params}))


def error_code(response: dict[str, Any]) -> int | None:
    error = response.get("error")
    return error.get("code") if isinstance(error, dict) else None


def first_text(response: dict[str, Any]) -> str:
    text: str = response["result"]["content"][0]["text"]
    return text


def assert_still_serving(session: StdioSession, era: Era) -> None:
    """health_check answers ok; then closing stdin ends the process cleanly, with nothing but JSON-RPC."""
    health = call(session, era, "health_check", {})
    assert health["result"]["isError"] is False, health
    assert health["result"]["structuredContent"]["status"] == "ok"
    exit_code = session.close()
    assert exit_code == 0, session.stderr_tail()
    assert session.noise == [], f"non-JSON-RPC lines on stdout: {[line[:200] for line in session.noise]}"


def params_key(era: Era) -> dict[str, Any]:
    """`params` for a request with no parameters of its own: the envelope, in the 2026-07-28 era."""
    params = with_envelope(era)
    return {"params": params} if params else {}


@pytest.mark.parametrize("era", ERAS)
def test_malformed_requests_get_jsonrpc_errors_and_the_server_keeps_serving(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    with start(subprocess_env, era) as session:
        assert error_code(session.request("no/such/method", with_envelope(era))) == -32601
        # tools/call without a name, with arguments that are not an object, with a name that is not text.
        assert error_code(session.request("tools/call", with_envelope(era, {"arguments": {}}))) == -32602
        assert error_code(call(session, era, "echo", ["a"])) == -32602
        assert error_code(call(session, era, "echo", "text=a")) == -32602
        assert error_code(session.request("tools/call", with_envelope(era, {"name": 42}))) == -32602
        if era == MODERN:  # a 2026-07-28 request must carry its envelope
            bare = session.request("tools/call", {"name": "echo", "arguments": {"text": "a"}})
            assert error_code(bare) == -32602
        # Lines the server cannot use at all, and messages that need no answer: none may stop it.
        for line in [*UNREADABLE, *UNANSWERED]:
            session.send_line(line)
        for message in [*INVALID_WITH_ID, *INVALID_ID]:
            session.send(message)
        # A request ending in CRLF is still a request.
        crlf = {"jsonrpc": "2.0", "id": 909, "method": "tools/list", **params_key(era)}
        session.send_line(json.dumps(crlf).encode() + b"\r")
        assert "tools" in session.wait_for(909)["result"]
        assert_still_serving(session, era)


@pytest.mark.parametrize("era", ERAS)
def test_every_line_the_server_cannot_use_gets_a_jsonrpc_error(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    with start(subprocess_env, era) as session:
        for line in UNREADABLE:
            session.send_line(line)
        for message in [*INVALID_WITH_ID, *INVALID_ID]:
            session.send(message)
        assert_still_serving(session, era)  # the health_check answer comes after every earlier answer

    errors = [m for m in session.messages if "error" in m and "result" not in m]
    answered_ids = {json.dumps(m.get("id")) for m in errors}
    unanswered = [m["id"] for m in INVALID_WITH_ID if json.dumps(m["id"]) not in answered_ids]
    assert unanswered == [], f"requests never answered: {unanswered}"
    anonymous = [m for m in errors if m.get("id") is None]
    assert len(anonymous) == len(UNREADABLE) + len(INVALID_ID), errors
    assert {error_code(m) for m in anonymous} <= {-32700, -32600}


@pytest.mark.parametrize("era", ERAS)
def test_tool_failures_over_stdio_are_results_that_leak_nothing(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    # The echo below carries a multi-megabyte result: a limit above it keeps this a transport test.
    with start({**subprocess_env, **server_env(max_result_bytes=str(2 * BIG))}, era) as session:
        unknown = call(session, era, "no_such_tool", {})
        assert first_text(unknown).startswith("unknown_tool: ")
        wrong_type = call(session, era, "echo", {"text": 42})
        assert first_text(wrong_type).startswith("invalid_input: ")
        missing = call(session, era, "echo", {})
        assert first_text(missing).startswith("invalid_input: ")
        crash = call(session, era, "crash", {})
        assert first_text(crash).startswith("internal: ")
        failures = [unknown, wrong_type, missing, crash]
        if STRICT_ARGUMENTS:
            extra = call(session, era, "echo", {"text": "a", "txet": "b"})
            assert first_text(extra).startswith("invalid_input: ")
            failures.append(extra)
        for failure in failures:
            assert failure["result"]["isError"] is True
            assert failure["result"]["_meta"]["error"]["correlation_id"]
        # A multi-megabyte argument, and text a naive transport would mangle, come back intact.
        big = call(session, era, "echo", {"text": "y" * BIG})
        assert first_text(big) == "y" * BIG
        odd = call(session, era, "echo", {"text": ODD_TEXT})
        assert first_text(odd) == ODD_TEXT
        assert_still_serving(session, era)

    wire = json.dumps(session.messages)
    for marker in (PLANTED_SECRET, "Traceback", "/srv/app", 'File "'):
        assert marker not in wire
    # The details went to the log instead, under the correlation id the client was given.
    assert crash["result"]["_meta"]["error"]["correlation_id"] in session.stderr_text()
