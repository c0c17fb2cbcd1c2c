"""The stdio pipes as a host drives them: bursts, lines cut anywhere, stalls, EOF, files.

The server reads and writes its pipes from the event loop; whatever the shape of the
bytes on stdin, every request is answered once and intact, stdout holds nothing but
JSON-RPC, and the end of stdin ends the process with exit 0.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, RawStdioSession, open_session, with_envelope
from sample_server.project import ENV_PREFIX
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, free_port, server_argv

ERAS = [MODERN, LEGACY]
MEGABYTE = 1_000_000
TIMEOUT_S = ANSWER_TIMEOUT_S
BURST_SETTLE_S = 5.0
# Above the largest answer these tests ask for (the echo of a megabyte line), so that none is cut.
RESULT_LIMIT = str(8 * MEGABYTE)


def uncut(env: dict[str, str]) -> dict[str, str]:
    return {**env, f"{ENV_PREFIX}MAX_RESULT_BYTES": RESULT_LIMIT}


def start(env: dict[str, str], era: Era) -> StdioSession:
    session = StdioSession(server_argv(extra_tools=SAMPLE_TOOLS), env=uncut(env))
    assert "result" in open_session(session, era, timeout=TIMEOUT_S)
    return session


def opening_messages(era: Era) -> list[dict[str, Any]]:
    """What opens the protocol in an era, for a client that writes without waiting for answers."""
    if era == MODERN:
        return []  # every 2026-07-28 request carries its envelope: no handshake
    initialize = {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    }
    return [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]


def echo_request(era: Era, request_id: int, text: str) -> dict[str, Any]:
    params = with_envelope(era, {"name": "echo", "arguments": {"text": text}})
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def echoed(answer: dict[str, Any]) -> str:
    assert answer["result"]["isError"] is False, answer
    text: str = answer["result"]["content"][0]["text"]
    return text


def finish(session: RawStdioSession) -> None:
    """Closing stdin ends the process with exit 0, and stdout held only JSON-RPC."""
    assert session.close(timeout=TIMEOUT_S) == 0, session.stderr_tail()
    assert session.noise == [], [line[:200] for line in session.noise]


@pytest.mark.parametrize("era", ERAS)
def test_a_burst_of_pipelined_requests_in_one_write_is_answered_once_each(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    with start(subprocess_env, era) as session:
        ids = range(1000, 1200)
        burst = b"".join(json.dumps(echo_request(era, n, f"call {n}")).encode() + b"\n" for n in ids)
        session.send_line(burst.rstrip(b"\n"))
        session.wait_for(ids[-1], timeout=TIMEOUT_S)
        # The tool runs in worker threads: the last id may not be the last answer. The SDK's
        # session now and then holds one answer of such a burst until stdin closes (a bare
        # MCPServer does the same, in both eras), so wait briefly, then close and count.
        deadline = time.monotonic() + BURST_SETTLE_S
        while (
            len({m.get("id") for m in session.messages} & set(ids)) < len(ids) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        finish(session)

    answers = {m["id"]: m for m in session.messages if m.get("id") in ids}
    assert sorted(answers) == list(ids)
    assert len([m for m in session.messages if m.get("id") in ids]) == len(ids)  # each exactly once
    assert all(echoed(answers[n]) == f"call {n}" for n in ids)


@pytest.mark.parametrize("era", ERAS)
def test_a_megabyte_line_written_in_small_pieces_arrives_whole(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    # Multi-byte characters, so that some pieces end in the middle of one.
    text = ("\u00e9\u4e2d\U0001f600" * (MEGABYTE // 9 + 1))[: MEGABYTE // 3]
    line = json.dumps(echo_request(era, 77, text), ensure_ascii=False).encode()
    assert len(line) > MEGABYTE
    with start(subprocess_env, era) as session:
        assert session.process.stdin is not None
        for offset in range(0, len(line), 4093):  # a prime: never on a character's boundary
            session.process.stdin.write(line[offset : offset + 4093])
            session.process.stdin.flush()
        session.process.stdin.write(b"\n")
        session.process.stdin.flush()
        assert echoed(session.wait_for(77, timeout=TIMEOUT_S)) == text
        finish(session)


def test_a_line_cut_off_by_the_end_of_stdin_is_answered_and_the_exit_is_clean(
    subprocess_env: dict[str, str],
) -> None:
    with start(subprocess_env, LEGACY) as session:
        assert session.process.stdin is not None
        session.process.stdin.write(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/li')
        session.process.stdin.flush()
        finish(session)

    assert session.messages[-1]["error"]["code"] == -32700  # the fragment is not JSON
    assert session.messages[-1]["id"] is None


@pytest.mark.parametrize("era", ERAS)
def test_every_request_written_before_stdin_ends_is_answered(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    """A client that writes its requests and closes stdin at once (`printf ... | server`) still
    gets every answer, not only the tool calls': the session would cancel the rest at the end."""
    requests = [
        echo_request(era, 41, "first"),
        {"jsonrpc": "2.0", "id": 42, "method": "tools/list", "params": with_envelope(era) or None},
        {"jsonrpc": "2.0", "id": 43, "method": "resources/list", "params": with_envelope(era) or None},
        echo_request(era, 44, "last"),
    ]
    with start(subprocess_env, era) as session:
        session.send_line(b"\n".join(json.dumps(request).encode() for request in requests))
        finish(session)

    answers = {m["id"]: m for m in session.messages if m.get("id") in (41, 42, 43, 44)}
    assert sorted(answers) == [41, 42, 43, 44], session.stderr_tail()
    assert echoed(answers[41]) == "first"
    assert echoed(answers[44]) == "last"
    assert "tools" in answers[42]["result"]
    assert "resources" in answers[43]["result"]


@pytest.mark.parametrize("era", ERAS)
def test_a_client_that_stops_reading_for_a_while_loses_no_answer(
    era: Era, subprocess_env: dict[str, str]
) -> None:
    """Answers far larger than the pipe wait for the client instead of being dropped or torn."""
    argv = server_argv(extra_tools=SAMPLE_TOOLS)
    process = subprocess.Popen(
        argv,
        env=uncut(subprocess_env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    requests = [echo_request(era, n, f"{n:04d}" * 65_536) for n in range(1, 21)]  # 256 KB answers each

    def send_all() -> None:
        assert process.stdin is not None
        for message in [*opening_messages(era), *requests]:
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    time.sleep(2)  # nobody reads stdout: the pipe fills and the server must hold its answers
    assert process.poll() is None, "the server gave up on a client that stopped reading"
    answers = {}
    for raw in process.stdout:
        message = json.loads(raw)  # a torn line would fail here
        if message.get("id") in range(1, 21):
            answers[message["id"]] = message
        if len(answers) == len(requests):
            break
    sender.join(timeout=TIMEOUT_S)
    process.stdin.close()
    assert process.wait(timeout=TIMEOUT_S) == 0
    assert [echoed(answers[n]) for n in range(1, 21)] == [f"{n:04d}" * 65_536 for n in range(1, 21)]


def test_a_server_whose_stdout_is_a_file_is_served_by_the_fallback_transport(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """stdout redirected to a file (which the event loop cannot drive) still gets every answer."""
    answers_file = tmp_path / "answers.jsonl"
    with answers_file.open("wb") as stdout:
        process = subprocess.Popen(
            server_argv(extra_tools=SAMPLE_TOOLS),
            env=subprocess_env,
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
    assert process.stdin is not None
    assert process.stderr is not None
    for message in [*opening_messages(LEGACY), echo_request(LEGACY, 1, "to a file")]:
        process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()
    deadline = time.monotonic() + TIMEOUT_S
    while b'"id":1,' not in answers_file.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.stdin.close()
    assert process.wait(timeout=TIMEOUT_S) == 0, process.stderr.read().decode()[-2000:]
    process.stderr.close()
    answers = [json.loads(line) for line in answers_file.read_bytes().splitlines()]
    assert [m["id"] for m in answers] == [0, 1]
    assert echoed(answers[1]) == "to a file"


def test_a_client_that_closes_stdout_ends_the_server_cleanly(subprocess_env: dict[str, str]) -> None:
    """Nobody can read the answers any more: the server stops serving and exits 0, without a traceback."""
    process = subprocess.Popen(
        server_argv(extra_tools=SAMPLE_TOOLS),
        env=subprocess_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdout.close()
    for message in [
        *opening_messages(LEGACY),
        *(echo_request(LEGACY, n, "x" * 100_000) for n in range(1, 4)),
    ]:
        try:
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()
        except BrokenPipeError:  # the server is already gone
            break
    exit_code = process.wait(timeout=TIMEOUT_S)  # on its own: stdin is still open
    # A write the server no longer read stays in the pipe's buffer: closing flushes it into the void.
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()
    assert process.stderr is not None
    stderr = process.stderr.read()
    process.stderr.close()
    assert exit_code == 0, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr


def test_a_host_that_never_reads_stderr_does_not_stall_the_server(subprocess_env: dict[str, str]) -> None:
    """10,000 calls, each with its log line, into a stderr pipe nobody reads: every call is answered,
    the lines that found no room are dropped and counted (health_check, /metrics), and the server
    still exits 0 at the end."""
    calls = 10_000
    metrics_port = free_port()
    env = {
        **subprocess_env,
        f"{ENV_PREFIX}METRICS": "true",
        f"{ENV_PREFIX}METRICS_ADDRESS": f"127.0.0.1:{metrics_port}",
    }
    process = subprocess.Popen(
        server_argv(extra_tools=SAMPLE_TOOLS),
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # never read until the server has exited
    )
    assert process.stdin is not None
    assert process.stdout is not None

    def send_all() -> None:
        assert process.stdin is not None
        health = with_envelope(MODERN, {"name": "health_check", "arguments": {}})
        last = {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": health}
        for message in [*(echo_request(MODERN, n, "x") for n in range(1, calls + 1)), last]:
            process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    answered: set[int] = set()
    report: dict[str, Any] = {}
    deadline = time.monotonic() + 4 * TIMEOUT_S
    reader = threading.Timer(4 * TIMEOUT_S, process.kill)  # a stalled server must fail the test, not hang it
    reader.start()
    try:
        # Requests are served concurrently: the health check's answer may overtake the last echoes.
        for raw in process.stdout:
            message = json.loads(raw)
            if message.get("id") == 0:
                report = message["result"]["structuredContent"]
            else:
                answered.add(message["id"])
            if report and len(answered) == calls:
                break
    finally:
        reader.cancel()
    assert time.monotonic() < deadline, f"stalled after {len(answered)} answers"
    assert answered == set(range(1, calls + 1))
    log_stream = report["checks"]["log_stream"]
    assert log_stream["status"] == "degraded", log_stream
    dropped_by_health = int(log_stream["detail"].split(" log lines dropped")[0])
    assert dropped_by_health > 0, log_stream
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=TIMEOUT_S) as answer:
        metrics = answer.read().decode()
    (dropped_by_metrics,) = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("mcp_server_log_dropped_lines_total")
    ]
    assert dropped_by_metrics >= dropped_by_health  # counted on: the last echoes' lines came after
    sender.join(timeout=TIMEOUT_S)
    process.stdin.close()
    assert process.wait(timeout=TIMEOUT_S) == 0
    assert process.stderr is not None
    process.stderr.close()
