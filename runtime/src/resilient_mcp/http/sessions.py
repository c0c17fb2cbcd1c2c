"""MCP sessions (2025-11-25 era) that no client can use up or hold for ever.

The SDK refuses every new session (503) while `MAX_SESSIONS` are open, until one idles out: a
client that opens sessions in a loop locked every other new client out for
`SESSION_IDLE_TIMEOUT_S`. Here a new session makes room first:

- a caller (the token's subject) that already holds `MAX_SESSIONS_PER_CALLER` gives up its own
  least recently used session. Without auth there is no caller to tell apart: behind a proxy,
  NAT or on loopback every client has the same address, so only the table's bound applies;
- a full table gives up the least recently used session of anyone.

Only a session with no request in flight is given up; its client gets 404 on its next request
and initializes again, as the spec lets it. When none can be, the new session is refused: 429
(the caller's own bound) or 503 (the table), with `Retry-After`.

The SDK also counts an open GET (SSE) stream as a request in flight, so a session whose client
keeps one open never expires. Here it does not count: once no other request has been in
flight for `SESSION_IDLE_TIMEOUT_S`, the session ends, and its stream with it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from resilient_mcp.calls.callers import caller
from resilient_mcp.sdk_fence import discard_session, session_transports
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)


class SdkSessions:
    """The SDK session manager's table of sessions, which it does not expose (reached through
    sdk_fence). A transport's `idle_scope` is public."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._manager = manager

    def is_open(self, session_id: str) -> bool:
        return session_id in session_transports(self._manager)

    async def close(self, session_id: str) -> None:
        transport = session_transports(self._manager).get(session_id)
        if transport is not None:
            await discard_session(self._manager, session_id, transport)

    def expire_after(self, session_id: str, idle_s: float) -> None:
        """End the session once `idle_s` pass, whatever streams it has open."""
        transport = session_transports(self._manager).get(session_id)
        scope = transport.idle_scope if transport is not None else None
        if scope is not None and not scope.cancel_called:
            scope.deadline = anyio.current_time() + idle_s


@dataclass
class _Session:
    caller: str | None  # the token's subject; None without auth
    busy: int = 0  # requests in flight, a standing GET stream not counted


class SessionAdmission:
    """ASGI middleware around the SDK's /mcp app (inside auth): makes room for new sessions,
    expires sessions whose only traffic is a standing stream."""

    def __init__(
        self, app: ASGIApp, sessions: SdkSessions, *, max_sessions: int, per_caller: int, idle_s: float
    ) -> None:
        self.app = app
        self.sdk = sessions
        self.max_sessions = max_sessions
        self.per_caller = per_caller
        self.idle_s = idle_s
        self.sessions: OrderedDict[str, _Session] = OrderedDict()  # least recently used first
        self.opening = 0  # new sessions admitted here, not answered yet

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        who = caller()
        if session_id is None and _opens_a_session(headers):
            await self._open(who, scope, receive, send)
            return
        session = self.sessions.get(session_id) if session_id is not None else None
        if session is None or session.caller != who:  # the SDK answers it (404), nothing to count
            await self.app(scope, receive, send)
            return
        assert session_id is not None
        self.sessions.move_to_end(session_id)
        if scope["method"] == "GET":
            await self._stream(session_id, session, scope, receive, send)
            return
        session.busy += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._done(session_id, session)

    async def _open(self, who: str | None, scope: Scope, receive: Receive, send: Send) -> None:
        victims, refusal = self._make_room(who)
        for victim in victims:
            await self.sdk.close(victim)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        opened: list[tuple[str, _Session]] = []
        answered = False

        async def note_session(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start" and not answered:
                answered = True
                self.opening -= 1  # now a session in the table, or nothing
                session_id = Headers(raw=message.get("headers", [])).get(MCP_SESSION_ID_HEADER)
                if message["status"] < 400 and session_id is not None:
                    session = _Session(who, busy=1)
                    self.sessions[session_id] = session
                    opened.append((session_id, session))
            await send(message)

        try:
            await self.app(scope, receive, note_session)
        finally:
            if not answered:
                self.opening -= 1
            for session_id, session in opened:
                self._done(session_id, session)

    async def _stream(
        self, session_id: str, session: _Session, scope: Scope, receive: Receive, send: Send
    ) -> None:
        async def once_open(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start" and not session.busy:
                # The SDK has just suspended the idle countdown for this stream: resume it.
                self.sdk.expire_after(session_id, self.idle_s)

        await self.app(scope, receive, once_open)

    def _done(self, session_id: str, session: _Session) -> None:
        session.busy -= 1
        if session_id in self.sessions:
            self.sessions.move_to_end(session_id)
        if not session.busy:
            self.sdk.expire_after(session_id, self.idle_s)  # even while a GET stream is open

    def _make_room(self, who: str | None) -> tuple[list[str], JSONResponse | None]:
        """The sessions to close for a new one of `who`, or why it is refused; the room is taken."""
        for session_id in [sid for sid in self.sessions if not self.sdk.is_open(sid)]:
            del self.sessions[session_id]  # ended by the client, the idle timeout or a crash
        victims: list[str] = []
        held = sum(1 for session in self.sessions.values() if session.caller == who) if who is not None else 0
        if held >= self.per_caller:
            victim = self._least_recently_used(lambda session: session.caller == who)
            if victim is None:
                return [], _refusal(429, "this caller has too many sessions open, all of them busy")
            victims.append(victim)
        if len(self.sessions) + self.opening >= self.max_sessions:
            victim = self._least_recently_used(lambda session: True)
            if victim is None:
                return victims, _refusal(503, "too many sessions open, all of them busy")
            victims.append(victim)
        for victim in victims:
            log.info("session_closed", reason="room_for_a_new_one", session=victim[:8])
        self.opening += 1
        return victims, None

    def _least_recently_used(self, whose: Callable[[_Session], bool]) -> str | None:
        """The least recently used session with no request in flight (its ID is forgotten here)."""
        for session_id, session in self.sessions.items():
            if not session.busy and whose(session):
                del self.sessions[session_id]
                return session_id
        return None


def _opens_a_session(headers: Headers) -> bool:
    """Whether the SDK would open a session for this request: no ID, and not the 2026-07-28 era."""
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _refusal(status: int, message: str) -> JSONResponse:
    log.warning("session_refused", status=status, detail=message)
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}
    return JSONResponse(body, status_code=status, headers={"Retry-After": "1"})
