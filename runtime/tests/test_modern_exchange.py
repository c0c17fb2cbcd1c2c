"""The core's HTTP answers (http/modern_exchange.py for 2026-07-28, http/answer_stream.py for a
2025-11-25 POST's SSE answer) against the SDK's own.

Two servers with the sample tools, one each way (`HTTP_EXCHANGE=core`, the default, and `sdk`),
get the same raw requests: calls answered in JSON, calls whose answer turns into SSE, and each
kind of request that the SDK's checks refuse; in the 2025-11-25 era, the same calls in a session
of each server's own. Every answer must be the same from both: status, content type, and body
(correlation ids aside).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

import pytest

from http_support import INITIALIZE, post, shared_server_env
from resilient_mcp.commands.diagnose import LEGACY, MODERN, with_envelope
from support import SAMPLE_TOOLS, http_server

ENTRIES = ("core", "sdk")
MCP_PROTOCOL_VERSION = "MCP-Protocol-Version"
SESSION_ID = "Mcp-Session-Id"
VARYING_HEADERS = {"date", "content-length", "mcp-session-id"}
PING_TIME = re.compile(r"^: ping - .*$")  # sse-starlette's ping says when it was sent
CORRELATION_ID = re.compile(r"\b[0-9a-f]{16}\b")  # in messages too ("... under correlation id ...")
PRIMING = "id: *-0\r\ndata: \r\nretry: 1000"  # the first event of a 2025-11-25 answer, its stream key masked
Answer = tuple[int, str, Any, tuple[str, ...]]  # status, content type, body as compared, header names
Headers = list[tuple[str, str]]


@pytest.fixture(scope="module")
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Both servers for the module (start-up costs seconds): the /mcp URL of each entry."""
    with ExitStack() as stack:
        urls = {}
        for entry in ENTRIES:
            env = shared_server_env(
                request, tmp_path_factory.mktemp(f"exchange-{entry}"), http_exchange=entry
            )
            url, _ = stack.enter_context(
                http_server(env, extra_tools=SAMPLE_TOOLS, stderr=subprocess.DEVNULL)
            )
            urls[entry] = url
        yield urls


def send(url: str, body: bytes, headers: Headers) -> tuple[int, str, str, tuple[str, ...]]:
    """POST body with exactly these headers (a name may repeat): status, content type, text, and
    the names of the headers answered (but those that differ from answer to answer).

    In the 2026-07-28 era an answer never opens a session."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        own_host = any(name.lower() == "host" for name, _ in headers)
        connection.putrequest("POST", parts.path, skip_host=own_host, skip_accept_encoding=True)
        for name, value in [*headers, ("Content-Length", str(len(body)))]:
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        if (MCP_PROTOCOL_VERSION, MODERN) in headers:
            assert response.getheader("mcp-session-id") is None
        names = tuple(sorted({name.lower() for name, _ in response.getheaders()} - VARYING_HEADERS))
        return response.status, response.getheader("content-type") or "", response.read().decode(), names
    finally:
        connection.close()


def comparable(content_type: str, text: str) -> Any:
    """The body with what differs from call to call (correlation ids) masked; SSE as its events."""
    if not text:
        return text
    if content_type.startswith("text/event-stream"):
        events = [chunk for chunk in text.split("\r\n\r\n") if chunk]
        return [_masked(_message_or_event(e)) for e in events]
    if content_type.startswith("application/json"):
        return _masked(json.loads(text))
    return text


def _message_or_event(event: str) -> Any:
    """An SSE event's JSON-RPC message; the event itself when it carries none (a ping, or the
    priming event that opens a 2025-11-25 answer: its id, empty data and `retry`)."""
    data = [line.removeprefix("data: ") for line in event.split("\r\n") if line.startswith("data: ")]
    return json.loads(data[0]) if data and data[0] else event


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return CORRELATION_ID.sub("*", PING_TIME.sub(": ping", value))
    if isinstance(value, dict):
        return {k: "*" if k == "correlation_id" else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def both(
    servers: dict[str, str], body: bytes, headers: Headers, sessions: dict[str, str] | None = None
) -> dict[str, Answer]:
    """The same request to both servers at once (each in its own session, given one): their answers."""

    def headers_of(entry: str) -> Headers:
        return headers if sessions is None else [*headers, (SESSION_ID, sessions[entry])]

    with ThreadPoolExecutor(len(servers)) as pool:
        sent = {entry: pool.submit(send, url, body, headers_of(entry)) for entry, url in servers.items()}
        answers = {entry: future.result() for entry, future in sent.items()}
    return {
        entry: (status, kind, comparable(kind, text), names)
        for entry, (status, kind, text, names) in answers.items()
    }


def call(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    request_id: Any = 7,
    meta: dict[str, Any] | None = None,
    method: str = "tools/call",
) -> dict[str, Any]:
    params = with_envelope(MODERN, {"name": name, "arguments": arguments or {}})
    params["_meta"].update(meta or {})
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def routed(method: str = "tools/call", name: str | None = None, **extra: str) -> Headers:
    """The headers a 2026-07-28 client sends with a request."""
    headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        (MCP_PROTOCOL_VERSION, MODERN),
        ("Mcp-Method", method),
    ]
    if name is not None:
        headers.append(("Mcp-Name", name))
    return headers + list(extra.items())


def encoded(message: Any) -> bytes:
    return json.dumps(message).encode()


CASES: dict[str, tuple[bytes, Headers]] = {
    "a call answered": (encoded(call("echo", {"text": "hi"})), routed(name="echo")),
    "a refused call": (encoded(call("refused")), routed(name="refused")),
    "an unknown tool": (encoded(call("no_such_tool")), routed(name="no_such_tool")),
    "arguments the schema refuses": (encoded(call("echo", {"text": 3})), routed(name="echo")),
    "an argument nobody declared": (encoded(call("echo", {"text": "a", "txt": "b"})), routed(name="echo")),
    "a crash in the tool": (encoded(call("crash")), routed(name="crash")),
    "a string id": (encoded(call("echo", {"text": "hi"}, request_id="call-1")), routed(name="echo")),
    "progress: the answer turns into SSE": (
        encoded(call("report_twice", meta={"progressToken": "t-1"})),
        routed(name="report_twice"),
    ),
    "progress reported with no token asked": (encoded(call("report_twice")), routed(name="report_twice")),
    "tools/list": (
        encoded({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": with_envelope(MODERN)}),
        routed("tools/list"),
    ),
    "ping": (
        encoded({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": with_envelope(MODERN)}),
        routed("ping"),
    ),
    "a method nobody serves": (
        encoded({"jsonrpc": "2.0", "id": 3, "method": "no/such", "params": with_envelope(MODERN)}),
        routed("no/such"),
    ),
    "no envelope in _meta": (
        encoded({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "echo"}}),
        routed(name="echo"),
    ),
    "a body that is not JSON": (b'{"jsonrpc": "2.0", "id": ', routed(name="echo")),
    "a batch": (encoded([call("echo", {"text": "a"})]), routed(name="echo")),
    "a notification": (
        encoded({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
        routed("notifications/cancelled"),
    ),
    "a response posted": (encoded({"jsonrpc": "2.0", "id": 5, "result": {}}), routed(name="echo")),
    "Mcp-Method says another method": (encoded(call("echo", {"text": "a"})), routed("tools/list")),
    "Mcp-Name says another tool": (encoded(call("echo", {"text": "a"})), routed(name="refused")),
    "no Mcp-Name": (encoded(call("echo", {"text": "a"})), routed()),
    "Mcp-Method twice": (
        encoded(call("echo", {"text": "a"})),
        [*routed(name="echo"), ("Mcp-Method", "tools/call")],
    ),
    "a version nobody serves": (
        encoded(call("echo", {"text": "a"})),
        [(k, "2099-01-01" if k == MCP_PROTOCOL_VERSION else v) for k, v in routed(name="echo")],
    ),
    "JSON not accepted": (
        encoded(call("echo", {"text": "a"})),
        [(k, "text/event-stream" if k == "Accept" else v) for k, v in routed(name="echo")],
    ),
    "SSE not accepted": (
        encoded(call("echo", {"text": "a"})),
        [(k, "application/json" if k == "Accept" else v) for k, v in routed(name="echo")],
    ),
    "a Host from elsewhere": (
        encoded(call("echo", {"text": "a"})),
        [*routed(name="echo"), ("Host", "evil.test")],
    ),
    "an Origin from elsewhere": (
        encoded(call("echo", {"text": "a"})),
        [*routed(name="echo"), ("Origin", "http://evil.test")],
    ),
    "a body over MAX_REQUEST_BYTES": (
        encoded(call("echo", {"text": "x" * (4 * 1024 * 1024)})),
        routed(name="echo"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_core_answers_a_2026_request_as_the_sdk_does(servers: dict[str, str], case: str) -> None:
    body, headers = CASES[case]
    answers = both(servers, body, headers)
    assert answers["core"] == answers["sdk"]


def test_a_call_with_progress_is_answered_in_sse_on_both(servers: dict[str, str]) -> None:
    # Not vacuous: the SSE case above really is SSE, with the progress before the answer.
    body, headers = CASES["progress: the answer turns into SSE"]
    status, kind, events, _ = both(servers, body, headers)["core"]
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")
    methods = [event.get("method") for event in events]
    assert methods == ["notifications/progress", "notifications/progress", None]
    assert events[-1]["result"]["content"][0]["text"] == "reported twice"


# A valid call of a tool without side effects, 16 s of waiting: one of the CI's runs is enough.
@pytest.mark.answers_independent
def test_a_call_quiet_past_the_ping_interval_keeps_its_stream_alive_as_the_sdks_does(
    servers: dict[str, str],
) -> None:
    # The SDK's entry commits to SSE after 15 s without an event and pings; so does the core's.
    answers = both(servers, encoded(call("quiet_for", {"seconds": 16})), routed(name="quiet_for"))
    assert answers["core"] == answers["sdk"]
    status, kind, events, _ = answers["core"]
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")
    assert events[0] == ": ping"  # a 2026-07-28 answer: no priming event (that is 2025-11-25 resumption)
    assert events[-1]["result"]["content"][0]["text"] == "quiet for 16 s"


# --- 2025-11-25: a session per server, the same calls in each -----------------------------

LEGACY_CALLS: dict[str, Any] = {
    "a call answered": {"name": "echo", "arguments": {"text": "hi"}},
    "a refused call": {"name": "refused", "arguments": {}},
    "a crash in the tool": {"name": "crash", "arguments": {}},
    "arguments the schema refuses": {"name": "echo", "arguments": {"text": 3}},
    "progress before the answer": {"name": "report_twice", "arguments": {}, "_meta": {"progressToken": 9}},
}


def legacy_headers() -> Headers:
    return [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        (MCP_PROTOCOL_VERSION, LEGACY),
    ]


def open_legacy_session(url: str) -> str:
    """initialize, then initialized: the session's id."""
    status, headers, _ = post(url, INITIALIZE, **{MCP_PROTOCOL_VERSION: LEGACY})
    session_id = headers.get("mcp-session-id")
    assert status == 200
    assert session_id, "no session"
    initialized = encoded({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert send(url, initialized, [*legacy_headers(), (SESSION_ID, session_id)])[0] == 202
    return session_id


@pytest.fixture(scope="module")
def sessions(servers: dict[str, str]) -> dict[str, str]:
    return {entry: open_legacy_session(url) for entry, url in servers.items()}


@pytest.mark.parametrize("case", list(LEGACY_CALLS))
def test_the_core_answers_a_2025_call_as_the_sdk_does(
    servers: dict[str, str], sessions: dict[str, str], case: str
) -> None:
    body = encoded({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": LEGACY_CALLS[case]})
    answers = both(servers, body, legacy_headers(), sessions)
    assert answers["core"] == answers["sdk"]
    status, kind, events, _ = answers["core"]
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")  # an SSE answer, as the SDK sends
    assert events[-1]["id"] == 11


def test_a_2025_call_with_progress_has_its_notifications_before_its_answer(
    servers: dict[str, str], sessions: dict[str, str]
) -> None:
    body = encoded(
        {
            "jsonrpc": "2.0",
            "id": 12,
            "method": "tools/call",
            "params": LEGACY_CALLS["progress before the answer"],
        }
    )
    _, _, events, _ = both(servers, body, legacy_headers(), sessions)["core"]
    assert events[0] == PRIMING  # resumable: the client learns its first event id at once
    assert [event.get("method") for event in events[1:]] == [
        "notifications/progress",
        "notifications/progress",
        None,
    ]
    assert events[-1]["result"]["content"][0]["text"] == "reported twice"


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("tools/list", {"jsonrpc": "2.0", "id": 13, "method": "tools/list", "params": {}}),
        ("a method nobody serves", {"jsonrpc": "2.0", "id": 14, "method": "no/such", "params": {}}),
        (
            "a notification",
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        ),
    ],
)
def test_the_core_answers_other_2025_requests_as_the_sdk_does(
    servers: dict[str, str], sessions: dict[str, str], case: str, body: Any
) -> None:
    answers = both(servers, encoded(body), legacy_headers(), sessions)
    assert answers["core"] == answers["sdk"], case


# A valid call of a tool without side effects, 16 s of waiting: one of the CI's runs is enough.
@pytest.mark.answers_independent
def test_a_2025_answer_quiet_past_the_ping_interval_is_kept_alive_as_the_sdks_is(
    servers: dict[str, str], sessions: dict[str, str]
) -> None:
    # sse-starlette pings every 15 s; the core starts its pings after 1 s, so 17 s sees one from each.
    call = {"name": "quiet_for", "arguments": {"seconds": 17}}
    body = encoded({"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": call})
    answers = both(servers, body, legacy_headers(), sessions)
    assert answers["core"] == answers["sdk"]
    _, _, events, _ = answers["core"]
    assert events[:2] == [PRIMING, ": ping"]  # resumable: its first event id, then the pings
    assert events[-1]["result"]["content"][0]["text"] == "quiet for 17 s"
