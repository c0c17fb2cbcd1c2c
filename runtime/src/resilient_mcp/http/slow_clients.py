"""Bounds on slow clients: a request's headers, and then its whole body, must each arrive in time.

uvicorn bounds idle keep-alive connections but not a client that sends its headers or its
body a byte at a time; each such connection would be held open for ever. The body's time
limit is for all of it: one limit per chunk would let a byte every few seconds through.

`MAX_CONNECTIONS` is counted here rather than by uvicorn's `limit_concurrency`, which answers
503 to every request, the probes too, once that many connections are open: clients that merely
hold connections would get a healthy server restarted. Past `MAX_CONNECTIONS`, `PROBE_CONNECTIONS`
more connections are accepted for `/livez` and `/readyz` only (anything else on them gets 503),
each for one request and with a short deadline for it. A client that keeps reopening
connections would fill those too, so when they are full a new connection takes the place of the
one that has waited longest without sending a whole request, and a connection whose first bytes,
already there when it is accepted, are a whole probe request is never the one closed: churn
costs the churner its own connections, not the orchestrator its probe.

Each connection is a file descriptor. Past the process's limit on them, accept() fails and
asyncio stops accepting for a second at a time, probes included; `allow_descriptors` raises the
limit to what `MAX_CONNECTIONS` needs, within the hard limit, and says when that is short.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.h11_impl import H11Protocol

from resilient_mcp.http.probes import PROBE_PATHS
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)

PROBE_CONNECTIONS = 16  # accepted past MAX_CONNECTIONS, for the probes only
PROBE_HEADERS_S = 5.0  # the most a connection for the probes waits for its request
_PROBE_REQUESTS = tuple(f"GET {path} ".encode() for path in sorted(PROBE_PATHS))
_PEEK_BYTES = 4096
# Besides the connections: the listening socket, the store, telemetry, log and worker threads' files.
DESCRIPTOR_HEADROOM = 256


def allow_descriptors(max_connections: int) -> None:
    """Raise the soft limit on open files to what `max_connections` needs, within the hard limit."""
    if sys.platform == "win32":  # no such limit there
        return
    import resource  # Unix only

    needed = max_connections + PROBE_CONNECTIONS + DESCRIPTOR_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    allowed = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (allowed, hard))
    except (ValueError, OSError):  # macOS caps it below its own hard limit (kern.maxfilesperproc)
        allowed = soft
    if allowed < needed:
        log.warning(
            "file_descriptors_short",
            open_files_limit=allowed,
            needed=needed,
            detail=f"MAX_CONNECTIONS={max_connections} needs {needed} open files: raise `ulimit -n` "
            "(the hard limit, e.g. the container's nofile) or lower MAX_CONNECTIONS",
        )


class ConnectionRoom:
    """Up to `limit` connections; `make_room` closes the one that has waited longest for its request."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.members: set[H11Protocol] = set()
        self._waiting: dict[H11Protocol, None] = {}  # no whole request yet, longest waiting first

    def admit(self, connection: H11Protocol, *, waiting: bool) -> bool:
        if len(self.members) >= self.limit:
            return False
        self.members.add(connection)
        if waiting:
            self._waiting[connection] = None
        return True

    def make_room(self) -> bool:
        """Close the member that has waited longest without a whole request; False if none is waiting."""
        if not self._waiting:
            return False
        oldest = next(iter(self._waiting))
        self.leave(oldest)
        oldest.transport.close()
        return True

    def answering(self, connection: H11Protocol) -> None:
        self._waiting.pop(connection, None)

    def leave(self, connection: H11Protocol) -> None:
        self.members.discard(connection)
        self._waiting.pop(connection, None)


def bounded_h11(read_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol: `max_connections` (and the probes' own), each request's headers in time."""
    served = ConnectionRoom(max_connections)
    probes_only = ConnectionRoom(PROBE_CONNECTIONS)

    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _headers_s = read_timeout_s
        _room: ConnectionRoom | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if served.admit(self, waiting=False):
                self._room = served
            else:
                probe = _sent_a_probe(transport)  # a whole probe request is there: it never waits
                if not probes_only.admit(self, waiting=not probe):
                    if not probes_only.make_room():
                        transport.close()  # every connection for the probes is answering one
                        return
                    probes_only.admit(self, waiting=not probe)
                self._room = probes_only
                self.app = ProbesOnly(self.app)
                self._headers_s = min(read_timeout_s, PROBE_HEADERS_S)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self._between_requests():
                self._arm()  # a new request begins on a kept-alive connection
            super().data_received(data)
            if self._deadline is not None and not self._between_requests():
                # Its headers are in: the body has its own limit (BodyReadTimeout), and the
                # idle time after the answer is uvicorn's keep-alive timeout. A timer left
                # running would cut a busy kept-alive connection between two requests.
                self._deadline.cancel()
                self._deadline = None
                if self._room is probes_only:
                    probes_only.answering(self)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            if self._room is not None:
                self._room.leave(self)
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(self._headers_s, self._headers_too_slow)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _headers_too_slow(self) -> None:
            self._deadline = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol


def _sent_a_probe(transport: asyncio.Transport) -> bool:
    """Whether the bytes already received on a new connection are a whole `GET` of a probe.

    Read without taking them (MSG_PEEK): h11 parses them as usual once the connection reads.
    The socket is asyncio's, non-blocking: nothing there yet raises rather than waits.
    """
    transport_socket = transport.get_extra_info("socket")
    if transport_socket is None:
        return False
    peeking = socket.socket(fileno=transport_socket.fileno())  # the same descriptor, not a copy
    try:
        head = peeking.recv(_PEEK_BYTES, socket.MSG_PEEK)
    except OSError:
        return False
    finally:
        peeking.detach()  # the transport still owns the descriptor
    return head.startswith(_PROBE_REQUESTS) and b"\r\n\r\n" in head


class ProbesOnly:
    """ASGI app for a connection past `MAX_CONNECTIONS`: the probes answer, anything else gets 503.

    Every answer closes the connection, so the room is free for the next probe.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in PROBE_PATHS:
            await service_unavailable(scope, receive, send)  # type: ignore[arg-type]
            return

        async def send_and_close(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_and_close)


class BodyReadTimeout:
    """ASGI middleware: the whole request body must arrive within the time limit (else 408),
    counted from the app's first read of it."""

    def __init__(self, app: ASGIApp, read_timeout_s: float) -> None:
        self.app = app
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False
        answered = False  # by this middleware: what the app sends afterwards is dropped
        deadline: float | None = None

        async def bounded_receive() -> Message:
            nonlocal body_done, answered, deadline
            if body_done:  # afterwards receive() waits for a disconnect: unbounded on purpose
                return await receive()
            if deadline is None:
                deadline = anyio.current_time() + self.read_timeout_s
            with anyio.CancelScope(deadline=deadline):
                message = await receive()
                body_done = message["type"] != "http.request" or not message.get("more_body", False)
                return message
            body_done = answered = True
            await _send_408(send)
            return {"type": "http.disconnect"}  # the app gives up on this request

        async def guarded_send(message: Message) -> None:
            if not answered:
                await send(message)

        await self.app(scope, bounded_receive, guarded_send)


async def _send_408(send: Send) -> None:
    body = b"Request body not received in time"
    headers: list[tuple[bytes, Any]] = [
        (b"content-type", b"text/plain"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 408, "headers": headers})
    await send({"type": "http.response.body", "body": body})
