# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The idempotency table in an SQLite file, safe for several processes sharing it.

Two clients may launch the same server on one machine, so every write is a
`BEGIN IMMEDIATE` transaction: the file lock makes a claim atomic across processes.
The work runs in a worker thread, one at a time per store, on one connection.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import structlog

from .._errors import ClaimLostError, FatalError, StoreUnavailableError
from .._project import ENV_PREFIX
from . import (
    BODY_ENDED,
    BODY_NOT_STARTED,
    BODY_RUNNING,
    DEFAULT_TTL_S,
    HEARTBEAT_S,
    Claim,
    HealthStatus,
    IdempotencyStore,
    KeyRecord,
    Outcome,
    settled_result,
)
from .instances import HeartbeatThread, Instance, OwnerRow, owner_gone_reason, same_boot
from .rules import (
    LEASE_EXPIRED,
    SETTLED_DONE,
    ExistingKey,
    encode_result,
    health_verdict,
    judge,
    pending_in_doubt_reason,
)

T = TypeVar("T")
_log = structlog.get_logger(__name__)

SCHEMA_VERSION = 2
BUSY_TIMEOUT_S = 15.0  # how long a write waits for another process's transaction
PURGE_EVERY_S = 60.0

# _MIGRATIONS[n] upgrades the schema from version n to n + 1; never edit a released step.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE idempotency_instances (
            instance_id TEXT PRIMARY KEY,
            host_id TEXT NOT NULL,
            hostname TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL,
            heartbeat_s REAL NOT NULL
        )""",
        """CREATE TABLE idempotency_keys (
            tool TEXT NOT NULL,
            key TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'in_doubt')),
            owner TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            lease_until REAL NOT NULL,
            result TEXT,
            note TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (tool, key)
        )""",
        "CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at)",
        "CREATE INDEX idempotency_keys_state ON idempotency_keys (state) WHERE state <> 'completed'",
    ),
    # How far each call got (rules.py); rows from before count as started.
    ("ALTER TABLE idempotency_keys ADD COLUMN body INTEGER NOT NULL DEFAULT 1",),
)

_SELECT_EXISTING = """
    SELECT k.fingerprint, k.state, k.result, k.lease_until,
           i.instance_id, i.host_id, i.hostname, i.pid, i.heartbeat_at, i.heartbeat_s, k.body
    FROM idempotency_keys AS k LEFT JOIN idempotency_instances AS i ON i.instance_id = k.owner
    WHERE k.tool = ? AND k.key = ?"""
_SELECT_RECORDS = "SELECT tool, key, state, fingerprint, created_at, updated_at, note FROM idempotency_keys"
# A pending claim whose lease is still running is never purged, however old.
_NOT_RUNNING = "NOT (state = 'pending' AND lease_until > ?)"


class SQLiteStore(IdempotencyStore):
    """The idempotency table in `path` (created with its directory)."""

    def __init__(self, path: Path, *, ttl_s: float = DEFAULT_TTL_S, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self.heartbeat_s = heartbeat_s
        self.me = Instance.new(heartbeat_s)
        self._conn: sqlite3.Connection | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._heartbeat: HeartbeatThread | None = None
        self._heartbeat_conn: sqlite3.Connection | None = None
        self._last_purge = 0.0

    # --- lifecycle ------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._limiter = anyio.CapacityLimiter(1)
        self._conn = await anyio.to_thread.run_sync(self._open_sync)
        self._heartbeat = HeartbeatThread(self._beat_in_thread, self._close_heartbeat_conn, self.heartbeat_s)
        self._heartbeat.start()

    async def close(self) -> None:
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            await anyio.to_thread.run_sync(heartbeat.stop)
        self.me.mark_closed()
        conn, self._conn = self._conn, None
        if conn is not None:
            await anyio.to_thread.run_sync(partial(self._close_sync, conn), limiter=self._limiter)

    def _open_sync(self) -> sqlite3.Connection:
        variable = f"{ENV_PREFIX}DATA_DIR"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FatalError(
                f"data directory {self.path.parent} cannot be created ({exc.strerror or exc})",
                f"set {variable} to a writable directory or fix its permissions",
            ) from None
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(self.path)
            _migrate(conn, self.path)
            self.me.mark_open()
            self._beat(conn)
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
                raise FatalError(
                    f"{self.path} is not an SQLite database ({exc})",
                    f"move the file away or set {variable} to another directory",
                ) from None
            raise FatalError(
                f"the idempotency table {self.path} cannot be written ({exc})",
                f"set {variable} to a writable directory or fix its permissions",
            ) from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        return conn

    def _close_sync(self, conn: sqlite3.Connection) -> None:
        try:
            with _write(conn):
                # Calls still running when the server stops can no longer finish; those that
                # never reached their body never will (marking the start needs this store).
                conn.execute(
                    "DELETE FROM idempotency_keys WHERE owner = ? AND state = 'pending' AND body = ?",
                    (self.me.instance_id, BODY_NOT_STARTED),
                )
                conn.execute(
                    "UPDATE idempotency_keys SET state = 'in_doubt', note = ?, updated_at = ?"
                    " WHERE owner = ? AND state = 'pending'",
                    ("the server stopped before the call finished", time.time(), self.me.instance_id),
                )
                conn.execute(
                    "DELETE FROM idempotency_instances WHERE instance_id = ?", (self.me.instance_id,)
                )
        except sqlite3.Error as exc:
            _log.warning("idempotency_unregister_failed", error=type(exc).__name__, detail=str(exc))
        finally:
            conn.close()

    # --- the table's operations -------------------------------------------------

    async def claim(self, tool: str, key: str, fingerprint: str, lease_s: float) -> Claim:
        return await self._run("claim", self._claim, tool, key, fingerprint, lease_s)

    def _claim(
        self, conn: sqlite3.Connection, tool: str, key: str, fingerprint: str, lease_s: float
    ) -> Claim:
        with _write(conn, durable=True):
            now = time.time()
            conn.execute(
                "DELETE FROM idempotency_keys"
                f" WHERE tool = ? AND key = ? AND created_at < ? AND {_NOT_RUNNING}",
                (tool, key, now - self.ttl_s, now),
            )
            row = conn.execute(_SELECT_EXISTING, (tool, key)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency_keys"
                    " (tool, key, fingerprint, state, owner, created_at, updated_at, lease_until, body)"
                    " VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
                    (tool, key, fingerprint, self.me.instance_id, now, now, now + lease_s, BODY_NOT_STARTED),
                )
                return Claim("new")
            verdict = judge(_existing(row, self.me), fingerprint, now, self.me)
            if verdict.take_over:
                conn.execute(
                    "UPDATE idempotency_keys SET owner = ?, updated_at = ?, lease_until = ?, note = ''"
                    " WHERE tool = ? AND key = ?",
                    (self.me.instance_id, now, now + lease_s, tool, key),
                )
            if verdict.now_in_doubt is not None:
                _set_in_doubt(conn, tool, key, verdict.now_in_doubt, now)
            return verdict.claim

    async def mark_started(self, tool: str, key: str) -> None:
        if not await self._run("mark_started", self._mark_started, tool, key):
            raise ClaimLostError

    def _mark_started(self, conn: sqlite3.Connection, tool: str, key: str) -> bool:
        # Not durable (no fsync): it must survive this process, and is trusted only on the same boot.
        with _write(conn):
            cursor = conn.execute(
                "UPDATE idempotency_keys SET body = ?"
                " WHERE tool = ? AND key = ? AND owner = ? AND state = 'pending'",
                (BODY_RUNNING, tool, key, self.me.instance_id),
            )
            return cursor.rowcount > 0

    async def complete(self, tool: str, key: str, result: dict[str, Any]) -> None:
        stored = await self._run("complete", self._finish, tool, key, "completed", encode_result(result))
        if not stored:
            _log.warning("idempotency_result_not_stored", tool=tool, reason="the claim is no longer ours")

    async def release(self, tool: str, key: str) -> None:
        await self._run("release", self._finish, tool, key, "released", None)

    async def mark_in_doubt(
        self, tool: str, key: str, note: str = "", *, still_running: bool = False
    ) -> None:
        how = "in_doubt_running" if still_running else "in_doubt"
        await self._run("mark_in_doubt", self._finish, tool, key, how, note)

    def _finish(self, conn: sqlite3.Connection, tool: str, key: str, how: str, value: str | None) -> bool:
        """End our own claim: only the instance that claimed a key may record its outcome."""
        now = time.time()
        with _write(conn):
            if how == "completed":
                cursor = conn.execute(
                    "UPDATE idempotency_keys SET state = 'completed', result = ?, note = '', updated_at = ?"
                    " WHERE tool = ? AND key = ? AND owner = ? AND state IN ('pending', 'in_doubt')",
                    (value, now, tool, key, self.me.instance_id),
                )
            elif how == "released":
                cursor = conn.execute(
                    "DELETE FROM idempotency_keys"
                    " WHERE tool = ? AND key = ? AND owner = ? AND state IN ('pending', 'in_doubt')",
                    (tool, key, self.me.instance_id),
                )
            else:
                body = BODY_RUNNING if how == "in_doubt_running" else BODY_ENDED
                cursor = conn.execute(
                    "UPDATE idempotency_keys SET state = 'in_doubt', note = ?, updated_at = ?, body = ?"
                    " WHERE tool = ? AND key = ? AND owner = ? AND state = 'pending'",
                    (value, now, body, tool, key, self.me.instance_id),
                )
            return cursor.rowcount > 0

    async def get(self, tool: str, key: str) -> KeyRecord | None:
        return await self._run("get", self._get, tool, key)

    def _get(self, conn: sqlite3.Connection, tool: str, key: str) -> KeyRecord | None:
        row = conn.execute(f"{_SELECT_RECORDS} WHERE tool = ? AND key = ?", (tool, key)).fetchone()
        return None if row is None else _record(row, time.time())

    async def in_doubt_count(self) -> int:
        return await self._run("in_doubt_count", self._in_doubt_count)

    def _in_doubt_count(self, conn: sqlite3.Connection) -> int:
        count: int = conn.execute(
            "SELECT count(*) FROM idempotency_keys WHERE state = 'in_doubt'"
        ).fetchone()[0]
        return count

    async def list_keys(self, *, in_doubt_only: bool = False, limit: int = 50) -> list[KeyRecord]:
        return await self._run("list_keys", self._list_keys, in_doubt_only, limit)

    def _list_keys(self, conn: sqlite3.Connection, in_doubt_only: bool, limit: int) -> list[KeyRecord]:
        where = " WHERE state = 'in_doubt'" if in_doubt_only else ""
        rows = conn.execute(f"{_SELECT_RECORDS}{where} ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        now = time.time()
        return [_record(row, now) for row in rows]

    async def settle(self, tool: str, key: str, outcome: Outcome, note: str = "") -> bool:
        return await self._run("settle", self._settle, tool, key, outcome, note)

    def _settle(self, conn: sqlite3.Connection, tool: str, key: str, outcome: Outcome, note: str) -> bool:
        with _write(conn):
            now = time.time()
            row = conn.execute(_SELECT_EXISTING, (tool, key)).fetchone()
            if row is None:
                return False
            existing = _existing(row, self.me)
            if existing.state == "completed":
                return False
            running = existing.state == "pending" and (
                pending_in_doubt_reason(existing, now, self.me) is None
            )
            if running:
                return False  # still running: its owner will record the outcome
            if outcome == "failed":
                conn.execute("DELETE FROM idempotency_keys WHERE tool = ? AND key = ?", (tool, key))
            else:
                conn.execute(
                    "UPDATE idempotency_keys SET state = 'completed', result = ?, note = ?, updated_at = ?"
                    " WHERE tool = ? AND key = ?",
                    (encode_result(settled_result(note)), note or SETTLED_DONE, now, tool, key),
                )
            return True

    async def purge_expired(self, ttl_s: float) -> int:
        return await self._run("purge_expired", self._purge, ttl_s)

    def _purge(self, conn: sqlite3.Connection, ttl_s: float) -> int:
        with _write(conn):
            now = time.time()
            cursor = conn.execute(
                f"DELETE FROM idempotency_keys WHERE created_at < ? AND {_NOT_RUNNING}", (now - ttl_s, now)
            )
            return cursor.rowcount

    async def check(self) -> tuple[HealthStatus, str]:
        try:
            in_doubt = await self.in_doubt_count()
        except (StoreUnavailableError, RuntimeError) as exc:
            return "failing", f"the idempotency table {self.path.name} cannot be read ({type(exc).__name__})"
        return health_verdict(in_doubt, self._heartbeat, f"sqlite {self.path.name}")

    # --- heartbeat and sweep --------------------------------------------------

    def _beat_in_thread(self) -> None:
        if self._heartbeat_conn is None:
            self._heartbeat_conn = _connect(self.path)
        self._beat(self._heartbeat_conn)

    def _close_heartbeat_conn(self) -> None:
        conn, self._heartbeat_conn = self._heartbeat_conn, None
        if conn is not None:
            conn.close()

    def _beat(self, conn: sqlite3.Connection) -> None:
        """Prove we are alive; turn claims that can never finish into keys in doubt."""
        with _write(conn):
            now = time.time()
            me = self.me
            conn.execute(
                "INSERT INTO idempotency_instances"
                " (instance_id, host_id, hostname, pid, heartbeat_s, started_at, heartbeat_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
                (me.instance_id, me.host_id, me.hostname, me.pid, me.heartbeat_s, now, now),
            )
            others = conn.execute(
                "SELECT instance_id, host_id, hostname, pid, heartbeat_at, heartbeat_s"
                " FROM idempotency_instances WHERE instance_id <> ?",
                (me.instance_id,),
            ).fetchall()
            for row in others:
                owner = OwnerRow(*row)
                reason = owner_gone_reason(owner, me, now)
                if reason is not None:
                    if same_boot(owner, me):  # its unflushed writes survived: "not started" is proof
                        conn.execute(
                            "DELETE FROM idempotency_keys WHERE owner = ? AND state = 'pending' AND body = ?",
                            (owner.instance_id, BODY_NOT_STARTED),
                        )
                    conn.execute(
                        "UPDATE idempotency_keys SET state = 'in_doubt', note = ?, updated_at = ?"
                        " WHERE owner = ? AND state = 'pending'",
                        (reason, now, row[0]),
                    )
                    conn.execute("DELETE FROM idempotency_instances WHERE instance_id = ?", (row[0],))
            conn.execute(
                "UPDATE idempotency_keys SET state = 'in_doubt', note = ?, updated_at = ?"
                " WHERE state = 'pending' AND lease_until <= ?",
                (LEASE_EXPIRED, now, now),
            )
            conn.execute(
                "UPDATE idempotency_keys SET state = 'in_doubt', note = ?, updated_at = ?"
                " WHERE state = 'pending' AND owner NOT IN (SELECT instance_id FROM idempotency_instances)",
                (owner_gone_reason(None, me, now), now),
            )
        if now - self._last_purge >= PURGE_EVERY_S:
            self._last_purge = now
            self._purge(conn, self.ttl_s)

    # --- plumbing -------------------------------------------------------------

    async def _run(self, operation: str, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` in a worker thread; database errors become StoreUnavailableError."""
        conn, limiter = self._conn, self._limiter
        if conn is None or limiter is None:
            raise RuntimeError("the idempotency store is not open: call open() first")
        try:
            return await anyio.to_thread.run_sync(partial(fn, conn, *args), limiter=limiter)
        except sqlite3.OperationalError as exc:
            _log.warning(
                "idempotency_store_error", operation=operation, error=type(exc).__name__, detail=str(exc)
            )
            raise StoreUnavailableError(operation) from exc


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are the explicit BEGIN IMMEDIATE ... COMMIT below.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    _switch_to_wal(conn)
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    """Turn on WAL, waiting out other processes doing the same on a new file.

    Changing the journal mode does not wait on the busy timeout: servers starting
    together on a fresh file would otherwise see "database is locked" at once.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@contextmanager
def _write(conn: sqlite3.Connection, *, durable: bool = False) -> Iterator[None]:
    """One write transaction holding the file's write lock from its first statement.

    `durable`: the commit reaches the disk before returning (a claim must survive a
    power cut). The others may be lost then, which only turns a claim into a key in doubt.
    """
    if durable:
        conn.execute("PRAGMA synchronous = FULL")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        if durable:
            conn.execute("PRAGMA synchronous = NORMAL")


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the schema to SCHEMA_VERSION; safe when several processes open the file at once."""
    with _write(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS idempotency_schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) FROM idempotency_schema_version").fetchone()
        version: int = row[0] or 0
        if version > SCHEMA_VERSION:
            raise FatalError(
                f"the idempotency table {path} has schema version {version}, newer than this server's"
                f" {SCHEMA_VERSION}",
                f"upgrade this server, or set {ENV_PREFIX}DATA_DIR to another directory",
            )
        for step in _MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute("DELETE FROM idempotency_schema_version")
            conn.execute("INSERT INTO idempotency_schema_version (version) VALUES (?)", (SCHEMA_VERSION,))


def _existing(row: tuple[Any, ...], me: Instance) -> ExistingKey:
    owner = None if row[4] is None else OwnerRow(*row[4:10])
    return ExistingKey(
        fingerprint=row[0],
        state=row[1],
        result_json=row[2],
        lease_until=row[3],
        owner=owner,
        body=row[10],
        # The file is local: the owner's unflushed writes are lost only if this machine restarted.
        start_record_intact=owner is not None and same_boot(owner, me),
    )


def _set_in_doubt(conn: sqlite3.Connection, tool: str, key: str, note: str, now: float) -> None:
    conn.execute(
        "UPDATE idempotency_keys SET state = 'in_doubt', note = ?, updated_at = ? WHERE tool = ? AND key = ?",
        (note, now, tool, key),
    )


def _record(row: tuple[Any, ...], now: float) -> KeyRecord:
    tool, key, state, fingerprint, created_at, updated_at, note = row
    return KeyRecord(tool, key, state, fingerprint, created_at, updated_at, round(now - created_at, 3), note)
