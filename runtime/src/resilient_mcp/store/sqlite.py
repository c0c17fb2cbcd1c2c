"""The idempotency table in an SQLite file, safe for several processes sharing it.

Two clients may launch the same server on one machine, so a session of several
statements is a `BEGIN IMMEDIATE` transaction: the file lock makes it atomic across
processes. A session of one statement (a new key's claim, the start mark, the outcome, a
read) runs it in autocommit mode, as on PostgreSQL: one statement is atomic on its own,
and a read then takes no write lock.

The event loop never waits for the disk or for a lock. Two connections serve:

- the loop's own runs reads, and the writes that need not reach the disk (the start mark,
  the outcome), when the file is free: tens of microseconds, less than a thread hop. It
  never waits for the write lock (`busy_timeout = 0`) and never checkpoints: a write that
  finds the file locked goes to the writer thread instead.
- the writer thread's (`sqlite_writer.py`) runs what must wait: every claim (its commit
  waits for fsync), sessions of several statements, and the writes that found the file
  locked. Claims that arrive while a commit is on its way to the disk share the next
  commit. Another process holding the lock stalls a call for at most LOOP_BUSY_TIMEOUT_S,
  after which it fails as transient (retry); other calls go on.

WAL mode at `synchronous = NORMAL`: a commit survives the process dying (it is in the OS
page cache) but not a power cut. A claim's commit is at `synchronous = FULL` (a session
marked `durable`), so it is on disk before the side effect starts; the start mark and outcome
may be lost in a power cut, which only turns the key into a key in doubt (a start mark
is trusted only from an owner on this boot of this machine, see `same_boot`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from resilient_mcp.authoring.errors import FatalError, StoreUnavailableError, TableLostError
from resilient_mcp.authoring.settings import data_dir_fix
from resilient_mcp.project import this_project
from resilient_mcp.store.dialect import NO_PARAMS, Dialect, Params, Session
from resilient_mcp.store.instances import OwnerRow, same_boot
from resilient_mcp.store.sql import SCHEMA_VERSION, SQLStore
from resilient_mcp.store.sqlite_writer import SQLiteWriter, WriterSession
from resilient_mcp.store.store import DEFAULT_TTL_S, HEARTBEAT_S
from resilient_mcp.store.table_file import TableFile
from resilient_mcp.telemetry.logs import get_logger

if TYPE_CHECKING:
    from resilient_mcp.authoring.checks import HealthStatus

_log = get_logger(__name__)

BUSY_TIMEOUT_S = 15.0  # opening, and the heartbeat thread: waiting blocks no one
LOOP_BUSY_TIMEOUT_S = 2.0  # while serving: the longest a locked file may stall a call

DIALECT = Dialect(
    time_type="REAL",
    time_default="",
    float_type="REAL",
    small_int_type="INTEGER",
    now=":now",  # every session binds `now`: this machine's clock, one value per transaction
    epoch="{}",
    after="(:now + {})",
    before="(:now - {})",
    row_lock="",  # BEGIN IMMEDIATE holds the whole file
    schema_lock=None,
    sweep_lock=None,
    alters_primary_key=False,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]


class SQLiteStore(SQLStore):
    """The idempotency table in `path` (created with its directory)."""

    dialect = DIALECT
    start_in_claim = False  # the claim waits for fsync, a start mark does not

    def __init__(
        self,
        path: Path,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
        task_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        super().__init__(ttl_s=ttl_s, heartbeat_s=heartbeat_s, task_ttl_s=task_ttl_s)
        self.path = path
        self._conn: sqlite3.Connection | None = None  # the event loop's
        self._writer: SQLiteWriter | None = None
        self._writer_conn: sqlite3.Connection | None = None
        self._heartbeat_conn: sqlite3.Connection | None = None
        self._table_file = TableFile(path)  # whether the path still names the file opened

    def where(self) -> str:
        return f"sqlite {self.path.name}"

    async def _connect(self) -> None:
        if self._conn is None:
            self._conn, writer_conn = await anyio.to_thread.run_sync(self._connect_sync)
            self._writer_conn, self._writer = writer_conn, SQLiteWriter(writer_conn)

    def _connect_sync(self) -> tuple[sqlite3.Connection, sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FatalError(
                f"data directory {self.path.parent} cannot be created ({exc.strerror or exc})", data_dir_fix()
            ) from None
        try:
            self._table_file.hold()
        except OSError as exc:
            raise FatalError(
                f"the idempotency table {self.path} cannot be opened ({exc.strerror or exc})", data_dir_fix()
            ) from None
        try:
            writer = _connect(self.path, busy_timeout_s=BUSY_TIMEOUT_S)
            try:
                loop = _connect(self.path, busy_timeout_s=0)
                loop.execute("PRAGMA wal_autocheckpoint = 0")  # the writer's commits checkpoint
            except BaseException:
                writer.close()
                raise
        except sqlite3.Error as exc:
            self._table_file.release()
            fatal = self._open_failed(exc)
            assert fatal is not None
            raise fatal from None
        return loop, writer

    async def open(self) -> None:
        await super().open()
        if self._writer is not None:  # opened: from now on a lock stalls a call, not a start-up
            await self._writer.execute(f"PRAGMA busy_timeout = {int(LOOP_BUSY_TIMEOUT_S * 1000)}", NO_PARAMS)

    async def _disconnect(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await anyio.to_thread.run_sync(writer.stop)
        for conn in (self._conn, self._writer_conn):
            if conn is not None:
                conn.close()
        self._conn = self._writer_conn = None
        self._table_file.release()  # last: closing it drops this process's locks on the file

    def _open_failed(self, exc: Exception) -> FatalError | None:
        if isinstance(exc, TableLostError):
            return FatalError(
                f"the idempotency table {self.path} was {self._table_file.lost()} while the server opened it",
                "make sure nothing else moves files in the data directory, then start again",
            )
        if not isinstance(exc, sqlite3.Error):
            return None
        variable = f"{this_project().env_prefix}DATA_DIR"
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return FatalError(
                f"{self.path} is not an SQLite database ({exc})",
                f"move the file away or set {variable} to another directory",
            )
        return FatalError(f"the idempotency table {self.path} cannot be written ({exc})", data_dir_fix())

    def _newer_schema(self, version: int) -> FatalError:
        return FatalError(
            f"the idempotency table {self.path} has schema version {version}, newer than this server's"
            f" {SCHEMA_VERSION}",
            f"upgrade this server, or set {this_project().env_prefix}DATA_DIR to another directory",
        )

    def _start_record_intact(self, owner: OwnerRow | None) -> bool:
        # The file is local: the owner's unflushed writes are lost only if this machine restarted.
        return owner is not None and same_boot(owner, self.me)

    def _unflushed_writes_survive(self, owner: OwnerRow) -> bool:
        return same_boot(owner, self.me)

    @asynccontextmanager
    async def _session(
        self, operation: str, *, transaction: bool = False, durable: bool = False, shield: bool = False
    ) -> AsyncIterator[Session]:
        # `shield` needs nothing here: what the writer thread was sent runs to its end, and is waited for.
        conn, writer = self._conn, self._writer
        if conn is None or writer is None:
            raise RuntimeError("the idempotency store is not open: call open() first")
        self._table_file.ensure()  # one stat: never a claim, a replay or a write in a lost table
        try:
            if transaction:
                async with writer.session(durable=durable) as session:
                    yield _WriterSession(session)
            else:
                yield _LoopSession(conn, writer, durable=durable)
        except sqlite3.OperationalError as exc:
            if not self._opened:
                raise
            _log.warning(
                "idempotency_store_error", operation=operation, error=type(exc).__name__, detail=str(exc)
            )
            raise StoreUnavailableError(operation) from exc

    async def check(self) -> tuple[HealthStatus, str]:
        lost = self._table_file.lost()
        if lost is not None:
            return "failing", f"{self.where()}: the file was {lost} while the server ran; restart it"
        return await super().check()

    async def _beat_in_thread(self) -> None:
        if self._table_file.lost() is None:  # looked at every beat: a loss is seen within one
            await super()._beat_in_thread()

    @asynccontextmanager
    async def _heartbeat_transaction(self) -> AsyncIterator[Session]:
        self._table_file.ensure()
        if self._heartbeat_conn is None:
            self._heartbeat_conn = _connect(self.path, busy_timeout_s=BUSY_TIMEOUT_S)
        with _transaction(self._heartbeat_conn):
            yield _SQLiteSession(self._heartbeat_conn)

    async def _close_heartbeat_connection(self) -> None:
        conn, self._heartbeat_conn = self._heartbeat_conn, None
        if conn is not None:
            conn.close()


class _SQLiteSession(Session):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._now = time.time()

    async def rows(self, statement: str, params: Params = NO_PARAMS) -> list[tuple[Any, ...]]:
        return self._conn.execute(statement, {**params, "now": self._now}).fetchall()

    async def execute(self, statement: str, params: Params = NO_PARAMS) -> int:
        return self._conn.execute(statement, {**params, "now": self._now}).rowcount


class _LoopSession(Session):
    """One statement on the loop's connection, or on the writer thread when it must wait:
    it must reach the disk (`durable`), or the file is locked right now."""

    def __init__(self, conn: sqlite3.Connection, writer: SQLiteWriter, *, durable: bool) -> None:
        self._conn = conn
        self._writer = writer
        self._durable = durable
        self._now = time.time()

    async def rows(self, statement: str, params: Params = NO_PARAMS) -> list[tuple[Any, ...]]:
        bound = {**params, "now": self._now}
        if not self._durable:
            try:
                return self._conn.execute(statement, bound).fetchall()
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    raise
        return await self._writer.rows(statement, bound, durable=self._durable)

    async def execute(self, statement: str, params: Params = NO_PARAMS) -> int:
        bound = {**params, "now": self._now}
        if not self._durable:
            try:
                return self._conn.execute(statement, bound).rowcount
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    raise
        return await self._writer.execute(statement, bound, durable=self._durable)


class _WriterSession(Session):
    """A transaction of several statements on the writer thread."""

    def __init__(self, session: WriterSession) -> None:
        self._session = session
        self._now = time.time()

    async def rows(self, statement: str, params: Params = NO_PARAMS) -> list[tuple[Any, ...]]:
        return await self._session.rows(statement, {**params, "now": self._now})

    async def execute(self, statement: str, params: Params = NO_PARAMS) -> int:
        return await self._session.execute(statement, {**params, "now": self._now})


def _locked(exc: sqlite3.OperationalError) -> bool:
    """The statement found another connection holding the write lock, and did nothing."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


def _connect(path: Path, *, busy_timeout_s: float) -> sqlite3.Connection:
    # isolation_level=None: transactions are the explicit BEGIN IMMEDIATE ... COMMIT.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    try:
        _switch_to_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    except BaseException:
        conn.close()
        raise
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
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction holding the file's write lock from its first statement."""
    if conn.in_transaction:
        raise RuntimeError("an idempotency store session is already open on this connection")
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
