"""No client locks the others out: the probes answer past MAX_CONNECTIONS and while a client churns
connections, and check the Host; a full session table makes room for a new client, each caller's
sessions are bounded, idle streams end."""

from __future__ import annotations

import http.client
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from http_support import INITIALIZE, ConnectionChurn, json_rpc_answer, post
from resilient_mcp.http.probes import LIVEZ_PATH, READYZ_PATH
from resilient_mcp.http.slow_clients import PROBE_CONNECTIONS
from support import ANSWER_TIMEOUT_S, http_server, server_env

pytestmark = pytest.mark.network

VERSION = "2025-11-25"
TOKENS = {name: f"{name}-" + "k9" * 20 for name in ("alice", "bob", "carol")}


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def probe(port: int, path: str, host: str | None = None) -> int:
    """GET a probe on a connection of its own; `host` replaces the Host header."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=ANSWER_TIMEOUT_S)
    try:
        connection.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@contextmanager
def held_connection(port: int) -> Iterator[socket.socket]:
    """A connection the server has accepted (one request answered), then held by a request that never ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as held:
        held.sendall(f"GET {LIVEZ_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        answer = b""
        while b'"live"' not in answer:
            chunk = held.recv(4096)
            assert chunk, f"closed before answering: {answer!r}"
            answer += chunk
        held.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # headers never end
        yield held


def test_the_probes_answer_while_max_connections_are_held(data_dir: Path) -> None:
    env = server_env(data_dir=str(data_dir), max_connections="4", http_read_timeout_s="120")
    with http_server(env) as (url, _):
        port = port_of(url)
        with ExitStack() as held:
            for _ in range(4):
                held.enter_context(held_connection(port))
            assert probe(port, LIVEZ_PATH) == 200
            assert probe(port, READYZ_PATH) == 200
            assert post(url)[0] == 503  # the probes' room is theirs only
            # That room is bounded too: when it is full, a new connection closes the one there
            # that has waited longest for a request.
            idle = [
                held.enter_context(socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S))
                for _ in range(PROBE_CONNECTIONS)
            ]
            assert probe(port, LIVEZ_PATH) == 200
            assert idle[0].recv(1024) == b""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while post(url)[0] != 200:  # once they are gone (the server sees them close soon after)
            assert time.monotonic() < deadline
            time.sleep(0.1)


def probe_outcomes(port: int, tries: int = 20) -> list[int | str]:
    """GET /livez `tries` times, each on a connection of its own: the status, or the error that
    came instead (a reset, a close without an answer); two errors end it, as 19 answers are owed."""
    outcomes: list[int | str] = []
    while len(outcomes) < tries and len([o for o in outcomes if o != 200]) < 2:
        try:
            outcomes.append(probe(port, LIVEZ_PATH))
        except OSError as error:
            outcomes.append(type(error).__name__)
    return outcomes


def test_the_probes_answer_while_a_client_churns_every_connection(data_dir: Path) -> None:
    """A client holds every connection it can and reopens each one the server closes, at once."""
    env = server_env(data_dir=str(data_dir), max_connections="50")
    with http_server(env) as (url, _):
        port = port_of(url)
        with ConnectionChurn(port, 50 + PROBE_CONNECTIONS + 100) as churn:
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            while churn.closed < 200:  # the server turns connections away, and they come back
                assert time.monotonic() < deadline, f"only {churn.closed} connections closed"
                time.sleep(0.05)
            outcomes = probe_outcomes(port)
    assert outcomes.count(200) >= 19, outcomes


def test_the_probes_answer_while_churn_would_use_up_a_low_open_files_limit(data_dir: Path) -> None:
    """Started with `ulimit -n 128` (a higher hard limit): 200 connections need more, and get it."""

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    env = server_env(data_dir=str(data_dir), max_connections="200")
    with http_server(env, preexec_fn=low_soft_limit) as (url, _):
        port = port_of(url)
        with ConnectionChurn(port, 300) as churn:
            outcomes = probe_outcomes(port)
            turned_away = churn.closed
    assert outcomes.count(200) >= 19, outcomes
    assert turned_away > 0  # the probes faced a full server, which could still accept


def test_the_probes_check_the_host_and_accept_the_address_they_were_reached_at(data_dir: Path) -> None:
    env = server_env(data_dir=str(data_dir), allowed_hosts="mcp.example.com", allow_unauthenticated="true")
    with http_server(env, host="0.0.0.0") as (url, _):
        port = port_of(url)
        for path in (LIVEZ_PATH, READYZ_PATH):
            assert probe(port, path, host="evil.example") == 421
            assert probe(port, path, host=f"evil.example:{port}") == 421
            assert probe(port, path, host=f"localhost:{port}") == 421  # not allowed on this bind
            assert probe(port, path, host="mcp.example.com") == 200
            assert probe(port, path, host=f"127.0.0.1:{port}") == 200  # what a HEALTHCHECK or kubelet sends
        assert post(url, Host=f"127.0.0.1:{port}")[0] == 421  # /mcp does not accept the address


# --- sessions (2025-11-25 era) ---------------------------------------------------------------


def open_session(url: str, who: str) -> str:
    status, headers, body = post(url, Authorization=f"Bearer {TOKENS[who]}")
    assert status == 200, body
    session = headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post(url, initialized, **session_headers(who, session))[0] == 202
    return session


def session_headers(who: str | None, session: str) -> dict[str, str]:
    headers = {"Mcp-Session-Id": session, "Mcp-Protocol-Version": VERSION}
    if who is not None:
        headers["Authorization"] = f"Bearer {TOKENS[who]}"
    return headers


def ping(url: str, who: str | None, session: str) -> int:
    return post(url, {"jsonrpc": "2.0", "id": 7, "method": "ping"}, **session_headers(who, session))[0]


@pytest.fixture
def bearer_env(data_dir: Path, tmp_path: Path) -> dict[str, str]:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{name} {token}\n" for name, token in TOKENS.items()))
    return server_env(data_dir=str(data_dir), auth="bearer", bearer_tokens_file=str(tokens))


def test_a_full_session_table_makes_room_for_a_new_client(bearer_env: dict[str, str]) -> None:
    with http_server({**bearer_env, **server_env(max_sessions="4")}) as (url, _):
        alice_1, alice_2 = open_session(url, "alice"), open_session(url, "alice")
        bob_1, bob_2 = open_session(url, "bob"), open_session(url, "bob")
        kept = [("alice", alice_1), ("bob", bob_1), ("bob", bob_2)]
        assert [ping(url, who, session) for who, session in kept] == [200] * 3  # alice_2 least recent
        carol = open_session(url, "carol")  # the SDK alone answered 503 until a session idled out
        assert ping(url, "alice", alice_2) == 404  # the least recently used: its client initializes again
        assert [ping(url, who, session) for who, session in kept] == [200] * 3
        assert ping(url, "carol", carol) == 200
        assert post(url, Authorization=f"Bearer {TOKENS['alice']}")[0] == 200  # and again


def test_a_caller_past_its_own_bound_gives_up_its_own_oldest_session(bearer_env: dict[str, str]) -> None:
    with http_server({**bearer_env, **server_env(max_sessions_per_caller="2")}) as (url, _):
        bob = open_session(url, "bob")  # the least recently used of all, but not alice's
        alice_1, alice_2 = open_session(url, "alice"), open_session(url, "alice")
        assert ping(url, "alice", alice_1) == 200
        alice_3 = open_session(url, "alice")
        assert ping(url, "alice", alice_2) == 404
        assert [ping(url, "alice", alice_1), ping(url, "alice", alice_3), ping(url, "bob", bob)] == [200] * 3


def test_a_session_whose_only_traffic_is_a_standing_stream_ends_at_the_idle_timeout(data_dir: Path) -> None:
    with http_server(server_env(data_dir=str(data_dir), session_idle_timeout_s="2")) as (url, _):
        _, headers, _ = post(url, INITIALIZE)
        session = headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert post(url, initialized, **session_headers(None, session))[0] == 202
        stream = http.client.HTTPConnection("127.0.0.1", port_of(url), timeout=ANSWER_TIMEOUT_S)
        began = time.monotonic()
        accept = {"Accept": "text/event-stream"}
        stream.request("GET", "/mcp", headers={**accept, **session_headers(None, session)})
        response = stream.getresponse()
        assert response.status == 200
        while response.read1(4096):  # sse-starlette pings every 15 s: the stream ends before the first
            assert time.monotonic() - began < ANSWER_TIMEOUT_S, "the stream kept the session open"
        lasted = time.monotonic() - began
        stream.close()
        assert lasted >= 1.5, f"ended after {lasted:.2f} s, before the idle timeout"
        assert ping(url, None, session) == 404
        assert json_rpc_answer(post(url, INITIALIZE)[2])["result"]["protocolVersion"] == VERSION
