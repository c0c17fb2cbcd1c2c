"""HTTP in production: probes, the drain on SIGTERM, bounded bodies and slow clients, JSON logs."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from http_support import get, post
from resilient_mcp.http.probes import LIVEZ_PATH, READYZ_PATH
from resilient_mcp.server.readiness import CHECK_LIMIT_S, READYZ_WAIT_S
from support import ANSWER_TIMEOUT_S, HERE, HTTP_TOOLS, error_of, http_server, server_env

pytestmark = pytest.mark.network
# How the HTTP server takes connections, bodies and its own log lines: no tool call touches the
# store or sends a bad argument, so one of the CI's two runs is enough.
the_connection_only = pytest.mark.answers_independent_postgres


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


async def wait_until_in_flight(url: str, calls: int) -> None:
    """Until `calls` calls besides health_check itself are running (asked, never slept on)."""
    async with Client(url) as client:
        with anyio.fail_after(60):
            while True:
                health = await client.call_tool("health_check", {})
                assert isinstance(health.structured_content, dict)
                if health.structured_content["in_flight"] >= calls:
                    return
                await anyio.sleep(0.05)


def readyz(url: str) -> tuple[int, Any]:
    """GET /readyz, which must answer within its bound whatever the checks do (slack for a loaded machine)."""
    started = time.monotonic()
    answer = get(url, READYZ_PATH)
    took = time.monotonic() - started
    assert took < READYZ_WAIT_S + 3, f"/readyz took {took:.1f} s"
    return answer


def readyz_until(url: str, wanted: Callable[[int, Any], bool]) -> tuple[int, Any]:
    """Ask /readyz until its answer is the wanted one: the checks run in the background."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        status, ready = readyz(url)
        if wanted(status, ready):
            return status, ready
        assert time.monotonic() < deadline, f"/readyz still says {status} {ready}"
        time.sleep(0.2)


def test_livez_and_readyz_answer_and_readyz_names_a_failing_dependency(data_dir: Path) -> None:
    with http_server(server_env(data_dir=str(data_dir))) as (url, _):
        assert get(url, LIVEZ_PATH) == (200, {"status": "live"})
        status, ready = readyz(url)
        assert (status, ready["failing"]) == (200, {})
        # The data directory goes away and a file takes its place: no longer writable.
        shutil.move(data_dir, data_dir.with_name("moved"))
        data_dir.write_text("not a directory")
        status, ready = readyz_until(url, lambda status, _: status != 200)
        assert status == 503
        assert "data_dir" in ready["failing"]
        assert get(url, LIVEZ_PATH)[0] == 200  # liveness touches no dependency


def test_readyz_answers_in_time_while_a_check_hangs_and_turns_ready_once_it_answers(
    data_dir: Path, tmp_path: Path
) -> None:
    answers = tmp_path / "reports-db-answers"
    env = {**server_env(data_dir=str(data_dir)), "CORE_TEST_REPORTS_DB_UNTIL": str(answers)}
    with http_server(env, extra_tools=HERE / "owner_tools") as (url, _):
        # The first run of the checks hangs on reports_db: no verdict yet, or the cut one.
        status, ready = readyz(url)
        assert status == 503
        assert ready["status"] in {"starting", "failing"}
        status, ready = readyz_until(url, lambda _, ready: "reports_db" in ready["failing"])
        assert status == 503
        assert ready["failing"]["reports_db"]["detail"] == f"no answer within {CHECK_LIMIT_S:g} s"
        answers.touch()  # the database answers again
        status, ready = readyz_until(url, lambda status, _: status == 200)
        assert ready == {"status": "degraded", "failing": {}}  # the owner's ledger is degraded


def ask_again(connection: http.client.HTTPConnection) -> tuple[int, bytes]:
    connection.request("GET", READYZ_PATH)
    response = connection.getresponse()
    return response.status, response.read()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sigterm_lets_a_call_in_flight_finish_then_exits_0(data_dir: Path, mode: str) -> None:
    with http_server(server_env(data_dir=str(data_dir)), extra_tools=HTTP_TOOLS) as (url, process):
        kept_alive = http.client.HTTPConnection("127.0.0.1", port_of(url), timeout=60)
        kept_alive.request("GET", READYZ_PATH)  # this connection stays open across the signal
        ready = kept_alive.getresponse()
        assert (ready.status, ready.read() != b"") == (200, True)
        answers: list[Any] = []

        async def slow_call() -> None:
            async with Client(url, mode=mode) as client:
                # Listed first: the client would ask for the output schema after the call,
                # on a new connection, which a draining server no longer accepts.
                await client.list_tools()
                answers.append(await client.call_tool("wait", {"seconds": 3}))

        async with anyio.create_task_group() as group:
            group.start_soon(slow_call)
            await wait_until_in_flight(url, 1)
            process.send_signal(signal.SIGTERM)
            await anyio.sleep(0.3)
            status, body = await anyio.to_thread.run_sync(ask_again, kept_alive)
            assert status == 503
            assert json.loads(body)["status"] == "draining"
        assert process.wait(timeout=60) == 0
    assert not answers[0].is_error
    assert answers[0].content[0].text == "waited 3 s"


@pytest.mark.anyio
async def test_a_side_effecting_call_cut_at_the_grace_is_in_doubt(data_dir: Path) -> None:
    env = server_env(data_dir=str(data_dir), shutdown_grace_s="1")
    call = {"seconds": 30, "idempotency_key": "send-1"}
    with http_server(env, extra_tools=HTTP_TOOLS) as (url, process):

        async def outliving_call() -> None:
            # The call is cut: what its client then sees is not what this test is about.
            with contextlib.suppress(Exception):
                async with Client(url) as client:
                    await client.call_tool("send_slowly", call)

        async with anyio.create_task_group() as group:
            group.start_soon(outliving_call)
            await wait_until_in_flight(url, 1)
            process.send_signal(signal.SIGTERM)
            assert await anyio.to_thread.run_sync(lambda: process.wait(timeout=60)) == 0
            group.cancel_scope.cancel()  # the client may wait for an answer that will not come
    with http_server(env, extra_tools=HTTP_TOOLS) as (url, _):
        async with Client(url) as client:
            retry = await client.call_tool("send_slowly", call)
    _, error = error_of(retry)
    assert error["category"] == "in_doubt"


@the_connection_only
def test_a_body_over_the_limit_gets_413(data_dir: Path) -> None:
    with http_server(server_env(data_dir=str(data_dir), max_request_bytes="2000")) as (url, _):
        big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 4000}}
        assert post(url, big)[0] == 413
        assert post(url)[0] == 200


@the_connection_only
@pytest.mark.anyio
async def test_a_new_session_gets_503_only_while_every_open_one_is_busy(data_dir: Path) -> None:
    """A full table closes its least recently used idle session for a new one (test_http_lockout)."""
    env = server_env(data_dir=str(data_dir), max_sessions="1")
    with http_server(env, extra_tools=HTTP_TOOLS) as (url, _):
        status, headers, _ = post(url)
        assert status == 200
        busy = {"Mcp-Session-Id": headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"}
        wait = {"name": "wait", "arguments": {"seconds": 8}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": wait}
        answers: list[int] = []

        def call_and_wait() -> None:
            answers.append(post(url, call, **busy)[0])

        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, call_and_wait)
            await wait_until_in_flight(url, 1)  # asked in the 2026-07-28 era: no session of its own
            refused, refused_headers, _ = post(url)
        assert (refused, refused_headers.get("retry-after"), answers) == (503, "1", [200])
        assert post(url)[0] == 200  # now the busy one is idle, it makes room
        assert post(url, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, **busy)[0] == 404


@the_connection_only
def test_slow_headers_and_slow_bodies_are_cut_off(data_dir: Path) -> None:
    with http_server(server_env(data_dir=str(data_dir), http_read_timeout_s="1")) as (url, _):
        port = port_of(url)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as silent:
            assert silent.recv(1024) == b""  # a client that connects and sends nothing
        with socket.create_connection(("127.0.0.1", port), timeout=60) as slow_headers:
            slow_headers.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert slow_headers.recv(1024) == b""  # closed by the server, not by this timeout
        with socket.create_connection(("127.0.0.1", port), timeout=60) as slow_body:
            head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            accept = "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n"
            slow_body.sendall((head + accept).encode() + b'{"jsonrpc":')
            answer = b""
            while chunk := slow_body.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 ")


@the_connection_only
def test_a_busy_kept_alive_connection_outlives_the_header_time_limit(data_dir: Path) -> None:
    """The header limit is per request: a connection that keeps asking for 3x that long loses nothing."""
    with http_server(server_env(data_dir=str(data_dir), http_read_timeout_s="1")) as (url, _):
        port = port_of(url)
        request = f"GET {LIVEZ_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        answered = 0
        with socket.create_connection(("127.0.0.1", port), timeout=60) as kept:
            started = time.monotonic()
            while time.monotonic() - started < 3.0:
                kept.sendall(request)
                answer = b""
                while b'"live"' not in answer:
                    chunk = kept.recv(4096)
                    assert chunk, f"the server closed the connection after {time.monotonic() - started:.2f} s"
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 200 ")
                answered += 1
                time.sleep(0.2)  # idle between requests, well within uvicorn's keep-alive timeout
        assert answered >= 10


@the_connection_only
def test_a_body_that_trickles_in_within_each_chunk_limit_is_cut_off_as_a_whole(data_dir: Path) -> None:
    """A byte every 0.5 s never waits the 2 s a chunk may take, yet the body takes far longer."""
    with http_server(server_env(data_dir=str(data_dir), http_read_timeout_s="2")) as (url, _):
        port = port_of(url)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as trickle:
            head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            accept = "Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n"
            trickle.sendall((head + accept).encode())
            trickle.settimeout(0.5)
            answer = b""
            for _ in range(120):  # 60 s of trickling at most; the server must answer long before
                try:
                    trickle.sendall(b" ")
                    chunk = trickle.recv(4096)
                except TimeoutError:
                    continue
                except OSError:  # closed after the answer
                    break
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]


@the_connection_only
def test_uvicorn_lines_are_json_on_stderr_and_stdout_stays_empty(data_dir: Path) -> None:
    env = server_env(data_dir=str(data_dir), log_level="debug")
    with http_server(env, stdout=subprocess.PIPE) as (url, process):
        get(url, LIVEZ_PATH)
        time.sleep(0.2)
        process.terminate()
        stdout, stderr = process.communicate(timeout=60)
    assert stdout == b""
    lines = [json.loads(line) for line in stderr.decode().splitlines()]
    loggers = {line.get("logger") for line in lines}
    assert {"uvicorn.error", "uvicorn.access"} <= loggers
    assert any(LIVEZ_PATH in line["event"] for line in lines if line.get("logger") == "uvicorn.access")
