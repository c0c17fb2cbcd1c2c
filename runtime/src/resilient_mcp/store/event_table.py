"""2025-11-25 answer streams kept in the store's database, so another replica can resume them.

The HTTP layer (`http/resumption.py`) keeps every answer's SSE events in memory, bounded; with
the postgres backend it also writes here the events of an answer that is still running after a
moment, so a client whose stream dropped may reconnect (`Last-Event-ID`) to any replica. One
row per event: the stream's random key and the event's place in it (its SSE id is
`<stream_key>-<seq>`), the session and caller it belongs to (a replay is only for them), and the
JSON-RPC message (NULL for a priming event). The table mirrors the memory's bounds: rows the
memory dropped are deleted, and so are a session's rows when it ends; rows a replica left
behind when it died go after `RETENTION_S`. Nothing here must survive a crash of the database,
so its commits are not waited for on the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from resilient_mcp.store.dialect import Dialect, Session

RETENTION_S = 3600.0  # rows no live session cleared (its replica died) are deleted after this


def migration(d: Dialect) -> tuple[str, ...]:
    """Schema 5: the answer streams' events."""
    return (
        f"""CREATE TABLE mcp_stream_events (
            stream_key text NOT NULL,
            seq integer NOT NULL,
            session_id text NOT NULL,
            caller text NOT NULL,
            message text,
            terminal {d.small_int_type} NOT NULL DEFAULT 0,
            created_at {d.time_type} NOT NULL{d.time_default},
            PRIMARY KEY (stream_key, seq)
        )""",
        "CREATE INDEX mcp_stream_events_session ON mcp_stream_events (session_id)",
        "CREATE INDEX mcp_stream_events_created_at ON mcp_stream_events (created_at)",
    )


class StreamEventRow(NamedTuple):
    """One event to write: `message` is the JSON-RPC message's JSON, None for a priming event."""

    stream_key: str
    seq: int
    session_id: str
    caller: str
    message: str | None
    terminal: bool


class StoredEvent(NamedTuple):
    """One event read back for a replay."""

    seq: int
    message: str | None
    terminal: bool


class EventStatements:
    """Every statement of the events table, in one dialect."""

    def __init__(self, d: Dialect) -> None:
        c = d.compile
        self.relaxed_commit = d.relaxed_commit
        self.insert = c(
            "INSERT INTO mcp_stream_events"
            " (stream_key, seq, session_id, caller, message, terminal, created_at) VALUES"
            f" (:stream_key, :seq, :session_id, :caller, :message, :terminal, {d.now})"
            " ON CONFLICT DO NOTHING"
        )
        self.trim = c("DELETE FROM mcp_stream_events WHERE stream_key = :stream_key AND seq < :oldest")
        self.forget_session = c("DELETE FROM mcp_stream_events WHERE session_id = :session_id")
        self.purge = c(f"DELETE FROM mcp_stream_events WHERE created_at < {d.before.format(':age')}")
        self.after = c(
            "SELECT seq, message, terminal FROM mcp_stream_events WHERE stream_key = :stream_key"
            " AND session_id = :session_id AND caller = :caller AND seq > :after ORDER BY seq"
        )
        self.known = c(
            "SELECT 1 FROM mcp_stream_events WHERE stream_key = :stream_key"
            " AND session_id = :session_id AND caller = :caller LIMIT 1"
        )


class EventTable:
    """The events table on the store's connections (`SQLStore._session`)."""

    def __init__(
        self, session: Callable[..., AbstractAsyncContextManager[Session]], statements: EventStatements
    ) -> None:
        self._session = session
        self._sql = statements

    async def write(
        self, rows: Sequence[StreamEventRow], trims: Sequence[tuple[str, int]], forget: Sequence[str]
    ) -> None:
        """Add `rows`, drop each (stream, oldest kept seq) of `trims`, forget the sessions `forget`:
        one transaction, committed without waiting for the disk."""
        sql = self._sql
        async with self._session("stream_events", transaction=True) as db:
            if sql.relaxed_commit:
                await db.execute(sql.relaxed_commit)
            for row in rows:
                params: dict[str, Any] = row._asdict()
                params["terminal"] = int(row.terminal)
                await db.execute(sql.insert, params)
            for stream_key, oldest in trims:
                await db.execute(sql.trim, {"stream_key": stream_key, "oldest": oldest})
            for session_id in forget:
                await db.execute(sql.forget_session, {"session_id": session_id})

    async def purge(self, age_s: float = RETENTION_S) -> int:
        """Delete the rows older than `age_s` seconds; how many."""
        async with self._session("stream_events") as db:
            return await db.execute(self._sql.purge, {"age": age_s})

    async def after(
        self, stream_key: str, seq: int, *, session_id: str, caller: str
    ) -> list[StoredEvent] | None:
        """The events of a stream of (session, caller) after `seq`; None when it has none stored."""
        whose = {"stream_key": stream_key, "session_id": session_id, "caller": caller}
        async with self._session("stream_events") as db:
            rows = await db.rows(self._sql.after, {**whose, "after": seq})
            if not rows and await db.one(self._sql.known, whose) is None:
                return None
        return [StoredEvent(int(row[0]), row[1], bool(row[2])) for row in rows]
