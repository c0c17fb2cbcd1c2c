"""One client's oversized request costs that client, not the others.

A call with a huge argument name, or with hundreds of thousands of them, is refused
briefly while another client's /livez keeps answering (how fast: benchmarks/
bench_request_bounds.py, not a test: wall-clock bounds fail on a loaded machine); a stdio
line far past the line limit is refused without being kept, and the session goes on.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.types import TextContent

from http_support import get, json_rpc_answer, post
from resilient_mcp.commands.diagnose import LEGACY, open_session, with_envelope
from resilient_mcp.http.json_bounds import MAX_OBJECT_MEMBERS, object_members
from resilient_mcp.http.probes import LIVEZ_PATH
from sample_server.project import PACKAGE, STRICT_ARGUMENTS
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, http_server, server_argv, server_env

LONG_KEY = "k" * 200_000  # one argument name of 200 KB, a single word run
MANY_KEYS = 300_000  # unknown argument names in one call (about 5 MB)
COUNTED_KEYS = MAX_OBJECT_MEMBERS - 10  # as many as an HTTP body may hold: parsed and checked
HUGE_LINE = 20 * 1024 * 1024  # bytes on one stdio line, without a newline
RSS_GROWTH_BOUND_KB = 30 * 1024  # well under the line, above what a bounded buffer costs


SCORE_TOOL = """
from typing import Annotated

from pydantic import Field

from {package}.core import tool


@tool(read_only=True)
def score(points: Annotated[dict[str, int], Field(description="Points per player")]) -> int:
    \"\"\"Add up the points.\"\"\"
    return sum(points.values())
"""


@pytest.fixture
def score_tools(tmp_path: Path) -> Path:
    """A tools directory with `score`, whose argument is an object keyed by names the client picks."""
    tools = tmp_path / "score_tools"
    tools.mkdir()
    (tools / "score.py").write_text(SCORE_TOOL.format(package=PACKAGE))
    return tools


class LivezPoller:
    """Asks /livez over and over from its own thread; `statuses` are its answers since `reset()`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.stop.is_set():
            try:
                status, _ = get(self.url, LIVEZ_PATH)
            except (OSError, ValueError):  # no answer, or not JSON: as much a failure as a wrong one
                status = 0
            self.statuses.append(status)
            time.sleep(0.005)

    def reset(self) -> None:
        self.statuses = []

    async def answered(self, more: int) -> None:
        """Until `more` probes answer from now on: a loaded machine may run the poller late."""
        wanted = len(self.statuses) + more
        while len(self.statuses) < wanted:  # noqa: ASYNC110  # the poller is a thread: no anyio.Event
            await anyio.sleep(0.01)

    def answers(self) -> list[int]:
        assert self.statuses, "/livez was never asked"
        return self.statuses


def text_of(result: Any) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    text: str = first.text
    return text


def assert_small_refusal(result: Any) -> str:
    assert result.is_error
    text = text_of(result)
    assert text.startswith("invalid_input: ")
    assert len(json.dumps(result.model_dump(mode="json"))) < 4096
    return text


@pytest.mark.anyio
@pytest.mark.skipif(not STRICT_ARGUMENTS, reason="lax mode drops unknown arguments")
async def test_huge_or_countless_argument_names_are_refused_briefly_and_block_no_one(
    subprocess_env: dict[str, str], score_tools: Path
) -> None:
    env = {**subprocess_env, **server_env(max_request_bytes=str(16 * 1024 * 1024))}  # room for MANY_KEYS
    # Built before the poller starts: encoding it holds this process's GIL, and the poller's clock.
    over_body = call_body({f"k{i}": i for i in range(MANY_KEYS)})
    with http_server(env, extra_tools=score_tools) as (url, _):
        assert get(url, LIVEZ_PATH)[0] == 200
        poller = LivezPoller(url)
        async with Client(url, mode="legacy") as client:
            await client.list_tools()
            poller.thread.start()
            try:
                with anyio.fail_after(ANSWER_TIMEOUT_S):
                    await poller.answered(1)
                    poller.reset()
                    unknown = await client.call_tool("health_check", {LONG_KEY: 1})
                    wrong = await client.call_tool("score", {"points": {LONG_KEY: "many"}})
                    await poller.answered(3)  # a few polls after the answers too
                    long_names_probes = poller.answers()
                    poller.reset()
                    many = await client.call_tool("health_check", {f"k{i}": i for i in range(COUNTED_KEYS)})
                    over = await anyio.to_thread.run_sync(lambda: post(url, over_body))
                    await poller.answered(3)
                    many_names_probes = poller.answers()
                    after = await client.call_tool("health_check", {})
            finally:
                poller.stop.set()
                poller.thread.join(ANSWER_TIMEOUT_S)
    for result in (unknown, wrong):
        assert LONG_KEY[:100] not in assert_small_refusal(result)
    assert f"and {COUNTED_KEYS - 3} more" in assert_small_refusal(many)
    status, _, text = over
    assert status == 400, text
    error = json_rpc_answer(text)["error"]
    assert error["code"] == -32600
    assert f"{MANY_KEYS + 6} object members" in error["message"], error["message"]  # the envelope: 6
    assert f"limit of {MAX_OBJECT_MEMBERS}" in error["message"]
    assert not after.is_error  # the session goes on
    # Every probe is answered, and alive, while those calls are refused.
    assert set(long_names_probes) == {200}, long_names_probes
    assert set(many_names_probes) == {200}, many_names_probes


def call_body(arguments: dict[str, Any]) -> bytes:
    params = {"name": "score", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).encode()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def strings_in(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(text for v in value.values() for text in strings_in(v))]
    if isinstance(value, list):
        return [text for v in value for text in strings_in(v)]
    return [value] if isinstance(value, str) else []


def members_in(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(members_in(v) for v in value.values())
    if isinstance(value, list):
        return sum(members_in(v) for v in value)
    return 0


LAYOUTS = st.sampled_from([None, 0, 2])
SEPARATORS = st.sampled_from([None, (",", ":")])


@given(value=JSON_VALUES, indent=LAYOUTS, separators=SEPARATORS)
@settings(max_examples=300, deadline=None)
def test_the_member_count_never_undercounts_and_is_exact_without_quotes_in_strings(
    value: Any, indent: int | None, separators: tuple[str, str] | None
) -> None:
    """The byte count beside the parse it stands in for: a bound always, exact in the usual case."""
    body = json.dumps(value, indent=indent, separators=separators).encode()
    counted, exact = object_members(body), members_in(json.loads(body))
    assert counted >= exact
    # Only a string holding a quote, or beginning with a colon, can add to the count.
    if not any('"' in text or ":" in text for text in strings_in(value)):
        assert counted == exact


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_stdio_line_past_the_limit_is_refused_unkept_and_the_session_goes_on(
    subprocess_env: dict[str, str],
) -> None:
    with StdioSession(server_argv(extra_tools=SAMPLE_TOOLS), env=subprocess_env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        assert "result" in session.request("tools/list", with_envelope(LEGACY))
        before = rss_kb(session.process.pid)
        assert session.process.stdin is not None
        chunk = b"x" * (1024 * 1024)
        for _ in range(HUGE_LINE // len(chunk)):  # no newline: the line is still going on
            session.process.stdin.write(chunk)
        session.process.stdin.flush()
        # The refusal comes before the line ends: the server did not wait to hold all of it.
        refusal = session.wait_for(None, timeout=20)
        assert refusal["error"]["code"] in (-32600, -32700), refusal
        grown = rss_kb(session.process.pid) - before
        session.send_line(b"")  # the long line ends here
        call = {"name": "echo", "arguments": {"text": "b"}}
        echo = session.request("tools/call", with_envelope(LEGACY, call))
        assert echo["result"]["content"][0]["text"] == "b"
        assert grown < RSS_GROWTH_BOUND_KB, f"RSS grew by {grown} KB"
        assert session.close() == 0, session.stderr_tail()


@pytest.mark.skipif(not STRICT_ARGUMENTS, reason="lax mode drops unknown arguments")
def test_the_logged_duration_covers_the_sdks_work_on_the_call_not_only_the_tool(
    subprocess_env: dict[str, str],
) -> None:
    # The SDK validates the request's 300,000 arguments before the core sees the call, and that
    # is the call's cost the operator must see. Only the JSON parse of the line comes before it.
    request = {
        "jsonrpc": "2.0",
        "id": "many",
        "method": "tools/call",
        "params": with_envelope(
            LEGACY, {"name": "health_check", "arguments": {f"k{i}": i for i in range(MANY_KEYS)}}
        ),
    }
    line = json.dumps(request).encode()
    with StdioSession(server_argv(), env=subprocess_env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        started = time.perf_counter()
        session.send_line(line)
        answer = session.wait_for("many")
        waited_ms = (time.perf_counter() - started) * 1000
        assert answer["result"]["isError"]
        assert session.close() == 0, session.stderr_tail()
        calls = [json.loads(text) for text in session.stderr_text().splitlines() if '"tool_call"' in text]
    logged_ms = calls[-1]["duration_ms"]
    # The core's own check is a small part of this call; the SDK's validation is most of what
    # the server does after parsing the line (the line was measured to carry about a tenth of it).
    assert logged_ms > 0.05 * waited_ms, (
        f"logged {logged_ms} ms of a call the client waited {waited_ms:.0f} ms for"
    )
