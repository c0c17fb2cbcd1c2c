"""2025-11-25 answers that survive a dropped stream: `Last-Event-ID` resumption (SEP-1699).

The SDK answers a 2025-11-25 POST with an SSE stream; given an event store it first sends a
priming event (an id, no data, and `retry`), gives every later event an id, and answers a GET
with `Last-Event-ID` by replaying what came after it, then the rest of the answer as it comes.
Without one, an answer whose stream dropped (a proxy's time-out, a flaky network, a tool that
calls `ctx.close_sse_stream()` to make the client poll) was lost.

`EventLog` is that store, in this process's memory and bounded: per stream (one request's
answer) at most `MAX_STREAM_EVENTS` events and `MAX_STREAM_BYTES` bytes, and over all streams
`MAX_EVENTS` and `MAX_BYTES`; beyond a bound the oldest events go first (the newest event of a
stream is kept, whatever its size). A session's events go when the session ends. Each session
sees its own streams only (`SessionEvents`): the SDK names a stream by its request id, which
every session reuses, so an event id is `<stream key>-<seq>`, the key random and the session's.

With the postgres backend the events of an answer still running after `PERSIST_AFTER_S` are
also written, batched, to the store's database (`store/event_table.py`); an answer sooner done
never touches it. A GET with `Last-Event-ID` that reaches a replica where its session is not
open (sessions live in the memory of the replica that opened them) is then answered from the
database: the events after that id, then the rest as the running replica writes them
(`ReplayFromTable`), until the answer. New requests of the session still need its replica.
Stateless serving (`HTTP_STATELESS=true`) has no resumption: the SDK gives its transports no
event store, and ends a call with its request.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse, jsonrpc_message_adapter
from sse_starlette import EventSourceResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from resilient_mcp.authoring.errors import StoreUnavailableError
from resilient_mcp.calls.callers import caller
from resilient_mcp.http.sessions import SdkSessions
from resilient_mcp.store.event_table import EventTable, StreamEventRow
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)

MAX_STREAM_EVENTS = 256  # one answer's events (its progress notifications, its result)
MAX_STREAM_BYTES = 4 * 1024 * 1024
MAX_EVENTS = 10_000  # every stream's, in this process
MAX_BYTES = 32 * 1024 * 1024
RETRY_MS = 1000  # the `retry` of the priming event: how soon a client reconnects
PERSIST_AFTER_S = 1.0  # postgres: an answer still running this long is written to the database
FLUSH_EVERY_S = 0.2  # postgres: how often the events waiting to be written are written
PURGE_EVERY_S = 300.0  # postgres: how often rows left by replicas that died are looked for
# Another replica's answer: how long to wait for its first rows, and how often to look for more.
FIRST_ROWS_WITHIN_S = PERSIST_AFTER_S + 5 * FLUSH_EVERY_S
POLL_S = (0.1, 1.0)  # from, doubling up to
MAX_WAITING = 32  # reconnects waiting for another replica's first rows at once; more look once


@dataclass(eq=False, slots=True)
class _Event:
    seq: int
    message: str | None  # the JSON-RPC message's JSON; None for a priming event
    size: int


@dataclass(eq=False)
class _Stream:
    """One request's answer in one session (the SDK's stream), under a random key."""

    key: str
    stream_id: StreamId
    session: SessionEvents
    opened_at: float
    events: deque[_Event] = field(default_factory=deque)
    size: int = 0
    next_seq: int = 0
    finished: bool = False  # its response (or error) is stored: nothing follows
    persistent: bool = False  # postgres: written to the database
    written: int = 0  # postgres: events below this seq are written
    trimmed: int = 0  # postgres: rows below this seq are deleted


def event_id(key: str, seq: int) -> EventId:
    return f"{key}-{seq}"


def parse_event_id(value: str) -> tuple[str, int] | None:
    """(stream key, seq) of an event id this store gave, or None."""
    key, _, seq = value.rpartition("-")
    if len(key) != 16 or not seq.isdigit() or len(seq) > 9:
        return None
    return key, int(seq)


class EventLog(EventStore):
    """Every session's answer streams in this process, bounded; see the module docstring.

    The SDK's session manager is given this one store; each session's transport asks it for its
    own view (`for_session`). `table`: the store's events table (postgres), or None."""

    def __init__(self, table: Callable[[], Awaitable[EventTable]] | None = None) -> None:
        self.streams: OrderedDict[str, _Stream] = OrderedDict()  # oldest first (its first is O(1))
        self.events = 0
        self.size = 0
        self._table = table
        self._watched: set[_Stream] = set()  # postgres: streams to write or to trim
        self._forget: list[str] = []  # postgres: sessions whose rows to delete
        self._dropped: list[tuple[str, int]] = []  # postgres: written streams dropped whole
        self._flusher: asyncio.Task[None] | None = None
        self._unscoped = SessionEvents(self, "", "")

    def for_session(self, session_id: str, session_caller: str) -> SessionEvents:
        return SessionEvents(self, session_id, session_caller)

    # What the SDK calls on a transport that has no session (not used by the manager).
    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return await self._unscoped.store_event(stream_id, message)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        return await self._unscoped.replay_events_after(last_event_id, send_callback)

    @property
    def shared(self) -> bool:
        """Whether streams are written to the database, for other replicas."""
        return self._table is not None

    async def table(self) -> EventTable | None:
        return None if self._table is None else await self._table()

    def open_stream(self, session: SessionEvents, stream_id: StreamId) -> _Stream:
        key = secrets.token_hex(8)
        stream = _Stream(key, stream_id, session, time.monotonic())
        self.streams[key] = stream
        if self._table is not None and stream_id != GET_STREAM_KEY:  # the GET stream is not resumed
            self._watched.add(stream)
            self._start_flusher()
        return stream

    def append(self, stream: _Stream, message: str | None, terminal: bool) -> EventId:
        size = 0 if message is None else len(message)
        seq = stream.next_seq
        stream.next_seq += 1
        stream.events.append(_Event(seq, message, size))
        stream.size += size
        stream.finished = stream.finished or terminal
        self.events += 1
        self.size += size
        while len(stream.events) > 1 and (
            len(stream.events) > MAX_STREAM_EVENTS or stream.size > MAX_STREAM_BYTES
        ):
            self._drop_oldest(stream)
        while self.events > MAX_EVENTS or self.size > MAX_BYTES:
            oldest = next(iter(self.streams.values()))
            if oldest is stream and len(stream.events) == 1:
                break  # the event just stored stays, whatever its size
            self._drop_oldest(oldest)
        if stream.persistent:
            self._watched.add(stream)
        return event_id(stream.key, seq)

    def _drop_oldest(self, stream: _Stream) -> None:
        event = stream.events.popleft()
        stream.size -= event.size
        self.events -= 1
        self.size -= event.size
        if not stream.events:
            self._close(stream)
        elif stream.persistent:
            self._watched.add(stream)  # its dropped rows go too

    def _close(self, stream: _Stream) -> None:
        self.streams.pop(stream.key, None)
        self.events -= len(stream.events)
        self.size -= stream.size
        stream.events.clear()
        stream.size = 0
        self._watched.discard(stream)
        if stream.persistent:
            self._dropped.append((stream.key, stream.next_seq))
        if stream.session.streams.get(stream.stream_id) is stream:
            del stream.session.streams[stream.stream_id]

    def forget(self, session: SessionEvents) -> None:
        """The session ended: its events go (from the database too, where it wrote any)."""
        for stream in list(session.streams.values()):
            self._close(stream)
        if session.persisted:
            self._forget.append(session.session_id)

    # --- postgres: writing the long answers for the other replicas ---------------------------

    def _start_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_forever())

    async def _flush_forever(self) -> None:
        last_purge = time.monotonic()
        while True:
            await anyio.sleep(FLUSH_EVERY_S)
            try:
                await self.flush()
                if time.monotonic() - last_purge >= PURGE_EVERY_S:
                    last_purge = time.monotonic()
                    table = await self.table()
                    if table is not None:
                        await table.purge()
            except Exception as exc:  # kept in memory: this replica still resumes them
                cause = exc.__cause__ if isinstance(exc, StoreUnavailableError) else exc
                log.warning("stream_events_not_written", error=type(cause).__name__, detail=str(cause))

    async def flush(self) -> None:
        """Write what the streams still running after PERSIST_AFTER_S stored since the last flush."""
        now = time.monotonic()
        rows: list[StreamEventRow] = []
        trims: list[tuple[str, int]] = []
        for stream in list(self._watched):
            if not stream.persistent:
                if stream.finished:  # answered in time: never written
                    self._watched.discard(stream)
                    continue
                if now - stream.opened_at < PERSIST_AFTER_S:
                    continue
                stream.persistent = stream.session.persisted = True
                stream.trimmed = stream.events[0].seq if stream.events else 0  # none before it written
            self._watched.discard(stream)
            oldest = stream.events[0].seq if stream.events else stream.next_seq
            if oldest > stream.trimmed:
                trims.append((stream.key, oldest))
                stream.trimmed = oldest
            session = stream.session
            rows.extend(
                StreamEventRow(
                    stream.key, event.seq, session.session_id, session.caller, event.message, False
                )
                for event in stream.events
                if event.seq >= stream.written
            )
            last = rows[-1] if rows else None
            if (
                stream.finished
                and last is not None
                and (last.stream_key, last.seq) == (stream.key, stream.next_seq - 1)
            ):
                rows[-1] = last._replace(terminal=True)  # the answer: a replay ends with it
            stream.written = stream.next_seq
        forget, self._forget = self._forget, []
        trims += self._dropped
        self._dropped = []
        if rows or trims or forget:
            table = await self.table()
            if table is not None:
                await table.write(rows, trims, forget)


class SessionEvents(EventStore):
    """One session's view of the EventLog: the store its transport is given."""

    def __init__(self, log: EventLog, session_id: str, session_caller: str) -> None:
        self.log = log
        self.session_id = session_id
        self.caller = session_caller
        self.streams: dict[StreamId, _Stream] = {}  # the SDK's stream id: its current stream
        self.persisted = False  # postgres: some of its rows are in the database
        self.transport: StreamableHTTPServerTransport | None = None  # the session's, once built

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        stream = self.streams.get(stream_id)
        if stream is None or stream.finished:  # a new request (a request id used again, too)
            stream = self.streams[stream_id] = self.log.open_stream(self, stream_id)
        if message is None:
            return self.log.append(stream, None, terminal=False)
        text = message.model_dump_json(by_alias=True, exclude_unset=True)  # as the SDK writes it
        return self.log.append(stream, text, terminal=isinstance(message, JSONRPCResponse | JSONRPCError))

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send this session's events after `last_event_id`; the stream's id while its answer is
        still to come (the SDK then forwards the rest), None when it is complete or unknown."""
        place = parse_event_id(last_event_id)
        stream = self.log.streams.get(place[0]) if place is not None else None
        if place is None or stream is None or stream.session is not self:
            return None
        after = place[1]
        while True:  # events stored while one is being sent are sent too
            pending = [event for event in stream.events if event.seq > after]
            if not pending:
                break
            for event in pending:
                after = event.seq
                if event.message is not None:
                    message = jsonrpc_message_adapter.validate_json(event.message)
                    await send_callback(EventMessage(message, event_id(stream.key, event.seq)))
        if stream.finished:
            return None
        if self.transport is not None:
            # The client left the stream it read this answer on, whether or not the server has
            # noticed yet: the SDK forwards the rest to this request only once that one is gone.
            self.transport.close_sse_stream(stream.stream_id)
        return stream.stream_id

    def forget(self) -> None:
        self.log.forget(self)


class ResumableTransport(StreamableHTTPServerTransport):
    """The SDK's session transport, given its session's own view of an EventLog (the session
    manager hands every session the same store), which it empties when the session ends."""

    def __init__(
        self, mcp_session_id: str | None, *, event_store: EventStore | None = None, **kw: Any
    ) -> None:
        if isinstance(event_store, EventLog) and mcp_session_id is not None:
            event_store = event_store.for_session(mcp_session_id, caller() or "")
        self.session_events = event_store if isinstance(event_store, SessionEvents) else None
        super().__init__(mcp_session_id, event_store=event_store, **kw)
        if self.session_events is not None:
            self.session_events.transport = self

    async def terminate(self) -> None:
        await super().terminate()
        if self.session_events is not None:
            self.session_events.forget()


class ReplayFromTable:
    """ASGI middleware around the SDK's /mcp app (postgres, sessions): a GET with `Last-Event-ID`
    whose session is not open here is answered from the database when its stream is there."""

    def __init__(self, app: ASGIApp, sessions: SdkSessions, log: EventLog) -> None:
        self.app = app
        self.sessions = sessions
        self.log = log
        self.waiting = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        place = parse_event_id(headers.get(LAST_EVENT_ID_HEADER, ""))
        table = await self.log.table() if place is not None and session_id else None
        if table is None or place is None or session_id is None or self.sessions.is_open(session_id):
            await self.app(scope, receive, send)
            return
        key, after = place
        whose = {"session_id": session_id, "caller": caller() or ""}
        patience = FIRST_ROWS_WITHIN_S if self.waiting < MAX_WAITING else 0.0  # made-up ids cost little
        self.waiting += 1
        try:
            found = await _appears(table, key, after, whose, patience)
        finally:
            self.waiting -= 1
        if not found:
            await self.app(scope, receive, send)  # the SDK's answer: the session is not found
            return
        log.info("stream_resumed_from_table", session=session_id[:8])
        response = EventSourceResponse(
            _tail(table, key, after, whose),
            headers={"Cache-Control": "no-cache, no-transform", MCP_SESSION_ID_HEADER: session_id},
        )
        await response(scope, receive, send)


async def _appears(table: EventTable, key: str, after: int, whose: dict[str, str], patience: float) -> bool:
    """Whether the stream is in the database, or gets there within `patience` seconds (its
    replica writes it a moment after the answer began)."""
    deadline = time.monotonic() + patience
    try:
        while (await table.after(key, after, **whose)) is None:
            if time.monotonic() > deadline:
                return False
            await anyio.sleep(FLUSH_EVERY_S)
    except StoreUnavailableError:
        return False
    return True


async def _tail(
    table: EventTable, key: str, after: int, whose: dict[str, str]
) -> AsyncIterator[dict[str, Any]]:
    """The stream's events after `after`, as its replica writes them, until its answer; ends
    early when the session ended (its rows are gone) or the database fails (the client may
    reconnect)."""
    delay = POLL_S[0]
    while True:
        try:
            events = await table.after(key, after, **whose)
        except StoreUnavailableError:
            return
        if events is None:
            return
        for event in events:
            after = event.seq
            if event.message is not None:
                yield {"event": "message", "id": event_id(key, event.seq), "data": event.message}
            if event.terminal:
                return
        delay = POLL_S[0] if events else min(delay * 2, POLL_S[1])
        await anyio.sleep(delay)
