"""One JSON line per call on stderr; argument values stay out of the log, secrets are redacted."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from mcp import Client

from resilient_mcp.commands.diagnose import LEGACY, open_session, with_envelope
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.telemetry.call_context import Call, enter_call, leave_call
from resilient_mcp.telemetry.logs import REDACTED, call_line, configure_logging, correlate_traces
from resilient_mcp.telemetry.redaction import is_secret_name, redact_text
from resilient_mcp.telemetry.stderr_writer import STALL_S, NonBlockingStderr
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.anyio
async def test_one_line_per_call_without_argument_values(
    make_server: Callable[..., ResilientServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server()
    async with Client(server) as client:
        began = time.perf_counter()
        await client.call_tool("echo", {"text": "my-private-value"})
        await client.call_tool("refused", {})
        took_ms = (time.perf_counter() - began) * 1000
    err = capsys.readouterr().err
    assert "my-private-value" not in err
    calls = [line for line in json_lines(err) if line.get("event") == "tool_call"]
    assert [(c["tool"], c["outcome"], c["category"], c["attempts"]) for c in calls] == [
        ("echo", "ok", None, 1),
        ("refused", "error", "terminal", 1),
    ]
    for call in calls:
        assert len(call["correlation_id"]) == 16
        assert 0 < call["duration_ms"] <= took_ms, f"both calls took {took_ms:.2f} ms together"
        assert call["level"] == "info"


@pytest.mark.anyio
async def test_the_call_line_is_plain_json_and_hides_a_secret_sent_as_a_tool_name(
    make_server: Callable[..., ResilientServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server()
    async with Client(server) as client:
        await client.call_tool("sk-live-0123456789abcdef", {})
    err = capsys.readouterr().err
    assert "0123456789abcdef" not in err
    (call,) = [line for line in json_lines(err) if line.get("event") == "tool_call"]
    assert call["tool"] == REDACTED
    assert (call["outcome"], call["category"], call["attempts"]) == ("error", "unknown_tool", 0)
    assert call["timestamp"].endswith("Z")
    assert datetime.fromisoformat(call["timestamp"]).tzinfo is not None


@pytest.mark.anyio
async def test_no_call_line_when_the_level_is_above_info(
    make_server: Callable[..., ResilientServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server()
    configure_logging("warning")
    async with Client(server) as client:
        await client.call_tool("echo", {"text": "hi"})
    assert "tool_call" not in capsys.readouterr().err


def test_a_line_logged_during_a_call_carries_its_correlation_id(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    token = enter_call(Call("0123456789abcdef", "echo"))
    try:
        structlog.get_logger("owner").info("fetching")
    finally:
        leave_call(token)
    structlog.get_logger("owner").info("idle")
    inside, outside = json_lines(capsys.readouterr().err)
    assert (inside["correlation_id"], inside["tool"]) == ("0123456789abcdef", "echo")
    assert "correlation_id" not in outside


@pytest.mark.anyio
async def test_a_replayed_call_is_logged_as_replayed(
    make_server: Callable[..., ResilientServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server()
    arguments = {"account": "acme", "cents": 5, "idempotency_key": "order-1:charge"}
    async with Client(server) as client:
        await client.call_tool("charge", arguments)
        await client.call_tool("charge", arguments)
    calls = [line for line in json_lines(capsys.readouterr().err) if line.get("event") == "tool_call"]
    assert [(c["tool"], c["outcome"]) for c in calls] == [("charge", "ok"), ("charge", "replayed")]


def test_secrets_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    structlog.get_logger("test").info(
        "connecting",
        api_key="sk-123",
        password="hunter2",
        dsn="postgresql://app:s3cret@db:5432/app",
        url="https://user:pa55@example.com/x",
        city="Lisbon",
    )
    (line,) = json_lines(capsys.readouterr().err)
    assert line["api_key"] == REDACTED
    assert line["password"] == REDACTED
    assert line["dsn"] == REDACTED
    assert line["url"] == f"https://user:{REDACTED}@example.com/x"
    assert line["city"] == "Lisbon"


def test_debug_lines_appear_only_at_debug_level(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    structlog.get_logger("test").debug("hidden")
    configure_logging("debug")
    structlog.get_logger("test").debug("shown")
    events = [line["event"] for line in json_lines(capsys.readouterr().err)]
    assert events == ["shown"]


# (tool, outcome, category, duration_ms, attempts, subject): non-ASCII, secrets in the subject,
# a client's secret-shaped tool name as call_tool redacts it, durations on a rounding tie.
CALL_FIELDS = [
    ("add", "ok", None, 0.4567, 1, None),
    ("lookup_caf\u00e9", "error", "invalid_input", 12.005, 3, "j\u00fcrgen password=hunter2"),
    ("\u540d\u524d", "replayed", None, 0.125, 1, "\U0001f600 token: eyJhbGciOiJIUzI1NiJ9.eyJzdWIi.c2ln"),
    (redact_text("sk-live-0123456789abcdef"), "error", "unknown_tool", 0.0, 0, None),
    ("echo", "error", "transient", 99999.995, 2, "Bearer abcdefghijklmnopqrstuvwxyz"),
    ("echo", "protocol_error", None, 1.0, 1, 'quote " and \\ backslash\n'),
]


@pytest.mark.parametrize(("tool", "outcome", "category", "duration_ms", "attempts", "subject"), CALL_FIELDS)
def test_the_call_line_is_what_the_processor_chain_makes_of_the_same_fields(
    capsys: pytest.CaptureFixture[str],
    tool: str,
    outcome: str,
    category: str | None,
    duration_ms: float,
    attempts: int,
    subject: str | None,
) -> None:
    """The fast path skips structlog's processors: its line must hold what they would write."""
    configure_logging("info")
    correlation_id = "0123456789abcdef"
    line = call_line(tool, correlation_id, outcome, category, duration_ms, attempts, subject, time.time_ns())
    fields: dict[str, Any] = {"tool": tool, "correlation_id": correlation_id, "outcome": outcome}
    fields |= {"category": category, "duration_ms": float(f"{duration_ms:.2f}"), "attempts": attempts}
    if subject is not None:
        fields["subject"] = subject
    structlog.get_logger("chain").info("tool_call", **fields)
    (chained,) = json_lines(capsys.readouterr().err)
    fast = json.loads(line)
    assert line.isascii()
    assert line.endswith(b"}\n")
    assert line.count(b"\n") == 1
    assert not any(is_secret_name(key) for key in fast)  # so the chain blanks no value by its key
    assert {k: v for k, v in fast.items() if k != "timestamp"} == {
        k: v for k, v in chained.items() if k not in ("timestamp", "logger")
    }
    if subject is not None:
        assert fast["subject"] == redact_text(subject)


def test_the_call_line_with_trace_ids_is_what_the_processor_chain_makes_of_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Inside a recording span (traces exported), both paths add the same trace_id and span_id."""
    configure_logging("info")
    ids = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    correlate_traces(lambda: ids)
    try:
        line = call_line("echo", "0123456789abcdef", "ok", None, 1.5, 1, "alice", time.time_ns(), ids)
        fields: dict[str, Any] = {"tool": "echo", "correlation_id": "0123456789abcdef", "outcome": "ok"}
        fields |= {"category": None}
        fields |= {"duration_ms": 1.5, "attempts": 1, "subject": "alice"}
        structlog.get_logger("chain").info("tool_call", **fields)
    finally:
        correlate_traces(None)
    (chained,) = json_lines(capsys.readouterr().err)
    fast = json.loads(line)
    assert (fast["trace_id"], fast["span_id"]) == ids
    shared_order = [key for key in chained if key not in ("event", "logger")]
    assert [key for key in fast if key != "event"] == shared_order
    assert {k: v for k, v in fast.items() if k != "timestamp"} == {
        k: v for k, v in chained.items() if k not in ("timestamp", "logger")
    }


def test_the_call_line_bytes_are_unchanged() -> None:
    """Byte for byte what the line was before it was encoded directly (rounding, escapes, order)."""
    now_ns = 1_764_772_200_123_456_789
    subject = "j\u00fcrgen password=x"
    assert call_line(
        "lookup_caf\u00e9", "0123456789abcdef", "error", "invalid_input", 12.005, 3, subject, now_ns
    ) == (
        b'{"event":"tool_call","tool":"lookup_caf\\u00e9","correlation_id":"0123456789abcdef",'
        b'"outcome":"error","category":"invalid_input","duration_ms":12.01,"attempts":3,'
        b'"subject":"j\\u00fcrgen password=[redacted]","level":"info",'
        b'"timestamp":"2025-12-03T14:30:00.123456Z"}\n'
    )
    assert call_line("add", "00000000000000ff", "ok", None, 0.125, 1, None, now_ns) == (
        b'{"event":"tool_call","tool":"add","correlation_id":"00000000000000ff","outcome":"ok",'
        b'"category":null,"duration_ms":0.12,"attempts":1,"level":"info",'
        b'"timestamp":"2025-12-03T14:30:00.123456Z"}\n'
    )


@pytest.mark.parametrize(
    "now_ns", [1_764_772_200_000_000_000, 1_764_772_200_000_001_999, 1_764_772_259_999_999_999]
)
def test_the_call_line_timestamp_is_written_as_the_chain_writes_it(now_ns: int) -> None:
    """`TimeStamper(fmt="iso", utc=True)`: isoformat() with "Z", which leaves out a zero fraction."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=now_ns // 1000)
    line = json.loads(call_line("add", "0123456789abcdef", "ok", None, 1.0, 1, None, now_ns))
    assert line["timestamp"] == moment.isoformat().replace("+00:00", "Z")


def test_a_line_the_pipe_cannot_take_waits_in_the_queue_then_arrives_in_order() -> None:
    """The encoded line goes out in one write when the pipe has room; when it is full the line
    waits in the writer's bounded queue (nothing blocks), and every line arrives in order."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    writer = NonBlockingStderr(write_end)
    try:
        writer.write_bytes(b"first\n")
        assert os.read(read_end, 100) == b"first\n"  # written at once, not by the thread
        filler = b"." * select.PIPE_BUF
        while select.select([], [write_end], [], 0)[1]:
            os.write(write_end, filler)  # the host stops reading: the pipe fills up
        began = time.monotonic()
        lines = [b"line %d\n" % n for n in range(100)]
        for line in lines:
            writer.write_bytes(line)
        assert time.monotonic() - began < 1.0  # queued, not waited for
        assert writer.dropped == 0
        received = bytearray()

        def host_reads() -> None:
            deadline = time.monotonic() + 30
            while not received.endswith(lines[-1]) and time.monotonic() < deadline:
                try:
                    received.extend(os.read(read_end, 1 << 16))
                except BlockingIOError:
                    time.sleep(0.01)

        reader = threading.Thread(target=host_reads)
        reader.start()
        reader.join(timeout=40)
        assert bytes(received).lstrip(b".") == b"".join(lines)
    finally:
        writer.flush()
        os.close(read_end)


def test_flush_waits_for_a_writer_thread_slow_to_get_a_cpu_while_the_pipe_has_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a loaded machine the writer thread may wait long for a CPU: an exit's flush must still
    wait for the line it queued (a FatalError's traceback, say), since the pipe has room."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    write = os.write

    def descheduled_first(fd: int, data: Any) -> int:
        if threading.current_thread().name == "stderr-writer":
            time.sleep(STALL_S * 5)
        return write(fd, data)

    monkeypatch.setattr(os, "write", descheduled_first)
    writer = NonBlockingStderr(write_end)
    traceback_line = b"x" * select.PIPE_BUF + b"\n"  # longer than one atomic write: the thread writes it
    try:
        writer.write_bytes(traceback_line)
        writer.flush()
        assert os.read(read_end, 1 << 16) == traceback_line
    finally:
        os.close(read_end)


def test_flush_gives_up_on_a_pipe_nobody_reads() -> None:
    """A host that never reads stderr must not keep an exiting server waiting: flush returns."""
    read_end, write_end = os.pipe()
    writer = NonBlockingStderr(write_end)
    filler = b"." * select.PIPE_BUF
    while select.select([], [write_end], [], 0)[1]:
        os.write(write_end, filler)
    try:
        writer.write_bytes(b"queued behind a full pipe\n")
        flushing = threading.Thread(target=writer.flush, daemon=True)
        flushing.start()
        flushing.join(timeout=30)
        assert not flushing.is_alive(), "flush still waits on a pipe that nobody reads"
    finally:
        os.close(read_end)  # the writer thread's blocked write fails and it goes back to waiting


def test_structlog_loads_at_its_first_use_and_whoever_imports_it_finds_it_configured(
    subprocess_env: dict[str, str],
) -> None:
    """Configured before structlog loads (as serving does), an owner's `structlog.get_logger()`
    and the core's own logger still write redacted JSON lines at the configured level."""
    script = (
        "import sys\n"
        "from resilient_mcp.telemetry.logs import configure_logging, get_logger\n"
        "configure_logging('warning')\n"
        "core = get_logger('core')\n"
        "print('loaded' if 'structlog' in sys.modules else 'not loaded', flush=True)\n"
        "import structlog\n"
        "structlog.get_logger('owner').warning('owner_line', password='hunter2-planted')\n"
        "structlog.get_logger('owner').info('below_the_level')\n"
        "core.warning('core_line', token='planted-token-value')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=subprocess_env, capture_output=True, timeout=60, check=True
    )
    assert done.stdout.decode().strip() == "not loaded"
    lines = json_lines(done.stderr.decode())
    written = [(line["event"], line["level"]) for line in lines]
    assert written == [("owner_line", "warning"), ("core_line", "warning")]
    assert lines[0]["password"] == REDACTED
    assert lines[1]["token"] == REDACTED


def test_a_server_that_starts_cleanly_loads_structlog_only_for_a_line_it_writes(
    subprocess_env: dict[str, str],
) -> None:
    """Serving at `info`, the debug lines on the way to the first answer are dropped without
    loading structlog: a call's line (written without it) comes before any structlog import, and
    only the drain's `info` line at the end of input loads it."""
    env = {**subprocess_env, "PYTHONPROFILEIMPORTTIME": "1"}  # each import, in order, on stderr
    with StdioSession(server_argv(), env=env) as session:
        open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        listed = session.request("tools/list", with_envelope(LEGACY) or None, timeout=ANSWER_TIMEOUT_S)
        assert "result" in listed, listed
        call = {"name": "word_count", "arguments": {"text": "one two"}}
        called = session.request("tools/call", with_envelope(LEGACY, call), timeout=ANSWER_TIMEOUT_S)
        assert called["result"]["isError"] is False, called
        assert session.close(timeout=ANSWER_TIMEOUT_S) == 0
    stderr = session.stderr_text().splitlines()
    call_line = next(n for n, line in enumerate(stderr) if line.startswith('{"event":"tool_call"'))
    structlog_loaded = [n for n, line in enumerate(stderr) if line.rstrip().endswith("| structlog")]
    assert structlog_loaded, "structlog never loaded: the drain's info line was not written"
    assert structlog_loaded[0] > call_line, stderr[structlog_loaded[0] - 3 : structlog_loaded[0] + 1]
