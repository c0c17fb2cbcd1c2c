"""Raw HTTP against a served /mcp: the requests a browser, a proxy or a stranger would send."""

from __future__ import annotations

import errno
import http.client
import json
import selectors
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.inbound import NAME_BEARING_METHODS

from resilient_mcp.commands.diagnose import MODERN, with_envelope
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND
from support import server_env

# Stateless HTTP: the settings of replicas behind a load balancer that any request may reach.
STATELESS = {
    f"{ENV_PREFIX}HTTP_STATELESS": "true",
    f"{ENV_PREFIX}REQUEST_STATE_KEYS": "replicas-request-state-key-0123456789abcdef",
}

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "http-tests", "version": "1"},
    },
}


def post(url: str, body: Any = INITIALIZE, **headers: str) -> tuple[int, dict[str, str], str]:
    """POST a JSON-RPC body to url with these headers (`Host`, `Origin`, ...): status, headers, text."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
    try:
        connection.request("POST", parts.path, body=payload, headers=sent)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        connection.close()


def modern_call(url: str, token: str, name: str, request_id: int) -> tuple[int, dict[str, str], str]:
    """A raw 2026-07-28 tools/call: its method and tool name ride in headers too."""
    return modern_request(url, token, "tools/call", {"name": name}, request_id)


def modern_request(
    url: str, token: str, method: str, params: dict[str, Any], request_id: int
) -> tuple[int, dict[str, str], str]:
    """A raw 2026-07-28 request: its method, and the name or URI it bears, ride in headers too."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": with_envelope(MODERN, params)}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name_key = NAME_BEARING_METHODS.get(method)
    if name_key is not None:
        headers["Mcp-Name"] = params[name_key]
    return post(url, body, Authorization=f"Bearer {token}", **headers)


def json_rpc_answer(body: str) -> Any:
    """The JSON-RPC message of a response body, plain JSON or one SSE `data:` event."""
    if body.lstrip().startswith("{"):
        return json.loads(body)
    data = [line.removeprefix("data:").strip() for line in body.splitlines() if line.startswith("data:")]
    return json.loads(next(line for line in data if line))


def get(url: str, path: str) -> tuple[int, Any]:
    """GET a path beside /mcp: status and decoded JSON body."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def client_with_token(url: str, token: str, mode: str = "auto") -> Client:
    """An MCP client that sends `Authorization: Bearer <token>` on every request."""
    http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http_client), mode=mode)


def shared_server_env(request: pytest.FixtureRequest, data_dir: Path, **settings: str) -> dict[str, str]:
    """Settings for a server that several tests share (a module-scoped fixture)."""
    if IDEMPOTENCY_BACKEND == "postgres":
        # The per-test schema does not exist yet at module scope: the database's default schema.
        settings.setdefault("database_url", request.getfixturevalue("postgres_dsn"))
    return server_env(data_dir=str(data_dir), **settings)


class ConnectionChurn:
    """A client that holds `count` idle connections to a port and reopens each one the server closes.

    It sends nothing: what a client that only wants to use up connections does. Run as a
    context manager (one thread of its own); `closed` counts the connections the server ended.
    """

    def __init__(self, port: int, count: int, host: str = "127.0.0.1") -> None:
        self.address = (host, port)
        self.count = count
        self.closed = 0
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connection-churn", daemon=True)

    def __enter__(self) -> ConnectionChurn:
        for _ in range(self.count):
            self._open()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _open(self) -> None:
        while True:
            connection = socket.socket(socket.AF_INET6 if ":" in self.address[0] else socket.AF_INET)
            connection.setblocking(False)
            if connection.connect_ex(self.address) in (0, errno.EINPROGRESS):
                self._selector.register(connection, selectors.EVENT_READ)
                return
            connection.close()  # refused: tried again, as such a client would
            time.sleep(0.001)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                connection: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    ended = connection.recv(65536) == b""  # an answer (503, 408) is read and dropped
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    ended = True
                if ended:
                    self._selector.unregister(connection)
                    connection.close()
                    self.closed += 1
                    self._open()
