"""The idempotency table in SQL, written once for both backends.

Every statement and every decision is here: claim, start mark, outcome, operator's
verdict, heartbeat sweep, migrations, unregistering on close, row mapping. A backend
(`sqlite.py`, `postgres.py`) adds only its `Dialect` (where the two databases' SQL
differs: column types, the clock, row locks, the durability marker) and how a statement
runs (on the event loop, or through a connection pool).

Durability: a claim is always committed durably (it must survive a power cut, because the
side effect follows). Whether the start mark and the outcome are is the backend's choice:
SQLite leaves them in the OS page cache (they outlive the process, and a machine restart
that loses them is seen, see `same_boot`); PostgreSQL flushes them, because its crash
restart loses unflushed commits without a trace a client could see. Either way "never
started" is trusted only when the store vouches that no write since the claim was lost
(`_start_record_intact`), so a lost start mark makes a key in doubt, never a second run.
"""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import anyio

from resilient_mcp.authoring.errors import ClaimLostError, FatalError, StoreUnavailableError
from resilient_mcp.store import event_table, task_table
from resilient_mcp.store.dialect import Dialect, Params, Session, Transaction
from resilient_mcp.store.instances import HeartbeatThread, Instance, OwnerRow, owner_gone_reason
from resilient_mcp.store.rules import (
    LEASE_EXPIRED,
    SETTLED_DONE,
    ExistingKey,
    encode_result,
    health_verdict,
    judge,
    running_reason,
)
from resilient_mcp.store.store import (
    BODY_ENDED,
    BODY_NOT_STARTED,
    BODY_RUNNING,
    DEFAULT_TTL_S,
    HEARTBEAT_S,
    LEGACY_CALLER,
    LOCAL_CALLER,
    Claim,
    IdempotencyStore,
    KeyRecord,
    KeyState,
    Outcome,
    settled_result,
)
from resilient_mcp.telemetry.logs import get_logger

if TYPE_CHECKING:
    from resilient_mcp.authoring.checks import HealthStatus

_log = get_logger(__name__)

SCHEMA_VERSION = 5
PURGE_EVERY_S = 60.0
CHECK_TIMEOUT_S = 5.0
CLAIM_ATTEMPTS = 5  # a row deleted between our INSERT and SELECT: insert again
STOPPED_NOTE = "the server stopped before the call finished"


# The rows the queries return, read by name. Each query's column list is built from its row's
# fields (`Statements._columns`), so a column added, removed or moved cannot shift another.


class ExistingRow(NamedTuple):
    """A claimed key, with its owner's instance row (None columns when the owner is gone)."""

    fingerprint: str
    state: KeyState
    result: str | None
    lease_until: float
    # The owner's instance row, all None when it is gone (the LEFT JOIN found none).
    owner_id: Any
    owner_host_id: Any
    owner_hostname: Any
    owner_pid: Any
    owner_heartbeat_at: Any
    owner_heartbeat_s: Any
    now: float
    body: int
    expired: bool  # older than the TTL: the key is new again
    caller: str  # the caller's own, or LEGACY_CALLER (stored before keys had a caller)


class InstanceRow(NamedTuple):
    """Another server's instance row, as the heartbeat sweep reads it."""

    instance_id: str
    host_id: str
    hostname: str
    pid: int
    heartbeat_at: float
    heartbeat_s: float


class RecordRow(NamedTuple):
    """A key as `keys` shows it to an operator."""

    tool: str
    key: str
    state: KeyState
    fingerprint: str
    created_at: float
    updated_at: float
    note: str
    now: float
    caller: str


class Statements:
    """Every statement of the table, in one dialect."""

    def __init__(self, d: Dialect) -> None:
        t, now = d.time_type, d.now
        default = d.time_default

        def epoch(column: str) -> str:
            return d.epoch.format(column)

        def expired(prefix: str = "") -> str:
            # A pending claim whose lease is still running is never purged, however old.
            return (
                f"{prefix}created_at < {d.before.format(':ttl')}"
                f" AND NOT ({prefix}state = 'pending' AND {prefix}lease_until > {now})"
            )

        c = d.compile
        # MIGRATIONS[n] upgrades the schema from version n to n + 1; never change a released step.
        self.migrations: tuple[tuple[str, ...], ...] = (
            (
                f"""CREATE TABLE idempotency_instances (
            instance_id text PRIMARY KEY,
            host_id text NOT NULL,
            hostname text NOT NULL,
            pid integer NOT NULL,
            started_at {t} NOT NULL{default},
            heartbeat_at {t} NOT NULL{default},
            heartbeat_s {d.float_type} NOT NULL
        )""",
                f"""CREATE TABLE idempotency_keys (
            tool text NOT NULL,
            key text NOT NULL,
            fingerprint text NOT NULL,
            state text NOT NULL CHECK (state IN ('pending', 'completed', 'in_doubt')),
            owner text NOT NULL,
            created_at {t} NOT NULL{default},
            updated_at {t} NOT NULL{default},
            lease_until {t} NOT NULL,
            result text,
            note text NOT NULL DEFAULT '',
            PRIMARY KEY (tool, key)
        )""",
                "CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at)",
                "CREATE INDEX idempotency_keys_state ON idempotency_keys (state) WHERE state <> 'completed'",
            ),
            # How far each call got (rules.py); rows from before count as started.
            (f"ALTER TABLE idempotency_keys ADD COLUMN body {d.small_int_type} NOT NULL DEFAULT 1",),
            # Keys belong to their caller; the rows from before get the legacy caller.
            _caller_in_primary_key(d),
            # Durable tasks, in the same database (task_table.py).
            task_table.migration(d),
            # Answer streams a client may resume on another replica (event_table.py).
            event_table.migration(d),
        )
        self.schema_lock = d.schema_lock and c(d.schema_lock)
        self.sweep_lock = d.sweep_lock and c(d.sweep_lock)
        self.version_table = (
            "CREATE TABLE IF NOT EXISTS idempotency_schema_version (version integer NOT NULL)"
        )
        self.version = "SELECT max(version) FROM idempotency_schema_version"
        self.forget_version = "DELETE FROM idempotency_schema_version"
        self.set_version = c("INSERT INTO idempotency_schema_version (version) VALUES (:version)")

        # A legacy row of the key holds it for every caller until it ages out (see `claim`).
        self.insert_claim = c(
            "INSERT INTO idempotency_keys"
            " (caller, tool, key, fingerprint, state, owner, created_at, updated_at, lease_until, body)"
            f" SELECT :caller, :tool, :key, :fingerprint, 'pending', :owner, {now}, {now},"
            f" {d.after.format(':lease')}, :body WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys"
            f" WHERE caller = '{LEGACY_CALLER}' AND tool = :tool AND key = :key)"
            " ON CONFLICT (caller, tool, key) DO NOTHING"
        )
        # What a claim reads of an existing key (see `SQLStore._existing`), and from where.
        self.existing_columns = _columns(
            ExistingRow._fields,
            fingerprint="k.fingerprint",
            state="k.state",
            result="k.result",
            lease_until=epoch("k.lease_until"),
            owner_id="i.instance_id",
            owner_host_id="i.host_id",
            owner_hostname="i.hostname",
            owner_pid="i.pid",
            owner_heartbeat_at=epoch("i.heartbeat_at"),
            owner_heartbeat_s="i.heartbeat_s",
            now=epoch(now),
            body="k.body",
            expired=expired("k."),
            caller="k.caller",
        )
        self.existing_join = "LEFT JOIN idempotency_instances AS i ON i.instance_id = k.owner"
        # The caller's row, or the key's legacy row (never both: a legacy row blocks the insert).
        self.caller_or_legacy = f"k.caller IN (:caller, '{LEGACY_CALLER}')"
        existing = (
            f"SELECT {self.existing_columns} FROM idempotency_keys AS k {self.existing_join}"
            f" WHERE k.tool = :tool AND k.key = :key AND {self.caller_or_legacy}"
        )
        self.peek_existing = c(existing)
        # The row is locked by a statement of its own, then read: a locking SELECT that waited
        # for another transaction's change re-reads the changed row but not the rows joined to
        # it (PostgreSQL's READ COMMITTED), so a take-over would show a new owner without its
        # instance row, "gone", and the second replica would take the key over too.
        self.lock_key = (
            c(
                "SELECT 1 FROM idempotency_keys AS k"
                f" WHERE k.tool = :tool AND k.key = :key AND {self.caller_or_legacy}{d.row_lock}"
            )
            if d.row_lock
            else None
        )
        self.select_existing = c(existing)
        key = " WHERE caller = :caller AND tool = :tool AND key = :key"
        self.delete_key = c(f"DELETE FROM idempotency_keys{key}")
        # The one principal's claim makes the key's legacy row its own.
        self.adopt_legacy = c(
            f"UPDATE idempotency_keys SET caller = :caller WHERE caller = '{LEGACY_CALLER}'"
            " AND tool = :tool AND key = :key"
        )
        self.take_over = c(
            f"UPDATE idempotency_keys SET owner = :owner, updated_at = {now}, note = '', body = :body,"
            f" lease_until = {d.after.format(':lease')}{key}"
        )
        self.set_in_doubt = c(
            f"UPDATE idempotency_keys SET state = 'in_doubt', note = :note, updated_at = {now}{key}"
        )
        ours = f"{key} AND owner = :owner"
        self.mark_started = c(f"UPDATE idempotency_keys SET body = :running{ours} AND state = 'pending'")
        self.complete = c(
            "UPDATE idempotency_keys SET state = 'completed', result = :result, note = '',"
            f" updated_at = {now}{ours} AND state IN ('pending', 'in_doubt')"
        )
        self.release = c(f"DELETE FROM idempotency_keys{ours} AND state IN ('pending', 'in_doubt')")
        self.mark_in_doubt = c(
            f"UPDATE idempotency_keys SET state = 'in_doubt', note = :note, updated_at = {now}, body = :body"
            f"{ours} AND state = 'pending'"
        )
        self.settle_done = c(
            f"UPDATE idempotency_keys SET state = 'completed', result = :result, note = :note,"
            f" updated_at = {now}{key}"
        )
        record_columns = _columns(
            RecordRow._fields,
            tool="tool",
            key="key",
            state="state",
            fingerprint="fingerprint",
            created_at=epoch("created_at"),
            updated_at=epoch("updated_at"),
            note="note",
            now=epoch(now),
            caller="caller",
        )
        records = f"SELECT {record_columns} FROM idempotency_keys"
        self.get = c(f"{records}{key}")
        self.find = c(f"{records} WHERE tool = :tool AND key = :key ORDER BY caller")
        self.list_all = c(f"{records} ORDER BY created_at DESC LIMIT :limit")
        self.list_in_doubt = c(f"{records} WHERE state = 'in_doubt' ORDER BY created_at DESC LIMIT :limit")
        self.in_doubt_count = "SELECT count(*) FROM idempotency_keys WHERE state = 'in_doubt'"
        self.purge = c(f"DELETE FROM idempotency_keys WHERE {expired()}")

        self.register = c(
            "INSERT INTO idempotency_instances"
            " (instance_id, host_id, hostname, pid, heartbeat_s, started_at, heartbeat_at)"
            f" VALUES (:instance, :host_id, :hostname, :pid, :heartbeat_s, {now}, {now})"
            " ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        )
        self.now = c(f"SELECT {epoch(now)}")
        instance_columns = _columns(
            InstanceRow._fields,
            instance_id="instance_id",
            host_id="host_id",
            hostname="hostname",
            pid="pid",
            heartbeat_at=epoch("heartbeat_at"),
            heartbeat_s="heartbeat_s",
        )
        self.others = c(
            f"SELECT {instance_columns} FROM idempotency_instances WHERE instance_id <> :instance"
        )
        self.unregister = c("DELETE FROM idempotency_instances WHERE instance_id = :instance")
        # Provably never reached its body: free again.
        self.free_never_started = c(
            "DELETE FROM idempotency_keys WHERE owner = :owner AND state = 'pending' AND body = :not_started"
        )
        self.owner_in_doubt = c(
            f"UPDATE idempotency_keys SET state = 'in_doubt', note = :note, updated_at = {now}"
            " WHERE owner = :owner AND state = 'pending'"
        )
        self.lease_in_doubt = c(
            f"UPDATE idempotency_keys SET state = 'in_doubt', note = :note, updated_at = {now}"
            f" WHERE state = 'pending' AND lease_until <= {now}"
        )
        self.orphans_in_doubt = c(
            f"UPDATE idempotency_keys SET state = 'in_doubt', note = :note, updated_at = {now}"
            " WHERE state = 'pending' AND NOT EXISTS"
            " (SELECT 1 FROM idempotency_instances AS i WHERE i.instance_id = idempotency_keys.owner)"
        )


def _caller_in_primary_key(d: Dialect) -> tuple[str, ...]:
    """Schema 3: `caller` joins the primary key; every row stored before gets LEGACY_CALLER."""
    add = f"ALTER TABLE idempotency_keys ADD COLUMN caller text NOT NULL DEFAULT '{LEGACY_CALLER}'"
    if d.alters_primary_key:
        return (
            add,
            "ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey",
            "ALTER TABLE idempotency_keys ADD PRIMARY KEY (caller, tool, key)",
        )
    # SQLite keeps a table's primary key for life: the rows move to a new table with the new key.
    columns = "tool, key, fingerprint, state, owner, created_at, updated_at, lease_until, result, note, body"
    t = d.time_type
    return (
        f"""CREATE TABLE idempotency_keys_by_caller (
            caller text NOT NULL DEFAULT '{LEGACY_CALLER}',
            tool text NOT NULL,
            key text NOT NULL,
            fingerprint text NOT NULL,
            state text NOT NULL CHECK (state IN ('pending', 'completed', 'in_doubt')),
            owner text NOT NULL,
            created_at {t} NOT NULL{d.time_default},
            updated_at {t} NOT NULL{d.time_default},
            lease_until {t} NOT NULL,
            result text,
            note text NOT NULL DEFAULT '',
            body {d.small_int_type} NOT NULL DEFAULT 1,
            PRIMARY KEY (caller, tool, key)
        )""",
        f"INSERT INTO idempotency_keys_by_caller (caller, {columns})"
        f" SELECT '{LEGACY_CALLER}', {columns} FROM idempotency_keys",
        "DROP TABLE idempotency_keys",
        "ALTER TABLE idempotency_keys_by_caller RENAME TO idempotency_keys",
        "CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at)",
        "CREATE INDEX idempotency_keys_state ON idempotency_keys (state) WHERE state <> 'completed'",
    )


def _columns(fields: tuple[str, ...], **expressions: str) -> str:
    """The SELECT list of a row's fields, in their order: every field, each once, nothing else."""
    if set(expressions) != set(fields):
        raise AssertionError(f"unmatched columns: {set(fields) ^ set(expressions)}")
    return ", ".join(expressions[name] for name in fields)


class SQLStore(IdempotencyStore):
    """The table's logic over a backend's sessions; see DESIGN.md "Idempotency table"."""

    dialect: ClassVar[Dialect]
    sql: ClassVar[Statements]
    task_sql: ClassVar[task_table.TaskStatements]
    event_sql: ClassVar[event_table.EventStatements]

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
        task_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        self.ttl_s = ttl_s
        self.task_ttl_s = task_ttl_s
        self.heartbeat_s = heartbeat_s
        self.me = Instance.new(heartbeat_s)
        self.tasks = task_table.TaskTable(self._session, self.task_sql, self.me.instance_id)
        self.stream_events = event_table.EventTable(self._session, self.event_sql)
        self._heartbeat: HeartbeatThread | None = None
        self._opened = False
        self._last_purge = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "dialect" in cls.__dict__:
            cls.sql = Statements(cls.dialect)
            cls.task_sql = task_table.TaskStatements(cls.dialect)
            cls.event_sql = event_table.EventStatements(cls.dialect)

    # --- what a backend provides ------------------------------------------------

    @abstractmethod
    async def _connect(self) -> None:
        """Open the serving connection(s); FatalError when the database cannot be reached."""

    @abstractmethod
    async def _disconnect(self) -> None:
        """Close the serving connection(s)."""

    @abstractmethod
    def _session(
        self, operation: str, *, transaction: bool = False, durable: bool = False, shield: bool = False
    ) -> AbstractAsyncContextManager[Session]:
        """A session on a serving connection; its database errors become StoreUnavailableError
        once the store is open. `durable`: its commit reaches the disk before it ends.
        `shield`: an outcome being recorded is not abandoned when the caller is cancelled."""

    @abstractmethod
    def _heartbeat_transaction(self) -> AbstractAsyncContextManager[Session]:
        """A transaction on the heartbeat thread's own connection (opened on first use)."""

    @abstractmethod
    async def _close_heartbeat_connection(self) -> None:
        """Close the heartbeat thread's connection, on the heartbeat thread's loop."""

    @abstractmethod
    def _open_failed(self, exc: Exception) -> FatalError | None:
        """The FatalError for a database error while opening (None: not a database error)."""

    @abstractmethod
    def _newer_schema(self, version: int) -> FatalError:
        """The table was created by a newer server."""

    @abstractmethod
    def where(self) -> str:
        """The table as clients may see it named (health_check, /readyz): no address, no path."""

    @abstractmethod
    def _start_record_intact(self, owner: OwnerRow | None) -> bool:
        """Whether a start mark written since the claim by `owner` would be visible now."""

    @abstractmethod
    def _unflushed_writes_survive(self, owner: OwnerRow) -> bool:
        """Whether `owner`'s writes that were not flushed to disk are still visible."""

    async def _insert_claim(self, params: Params) -> bool:
        """Insert a new key's claim (`Statements.insert_claim`), durably; False if the key exists.
        A backend may send concurrent claims together."""
        async with self._session("claim", durable=True) as db:
            return bool(await db.execute(self.sql.insert_claim, params))

    async def _peek_existing(self, params: Params) -> tuple[Any, ...] | None:
        """The row of an existing key (`Statements.peek_existing`), unlocked; None if there is none.
        A backend may send concurrent reads together."""
        async with self._session("claim") as db:
            return await db.one(self.sql.peek_existing, params)

    async def _store_outcome(self, params: Params) -> bool:
        """Record a call's result (`Statements.complete`); False if the claim is no longer ours.
        A backend may send concurrent outcomes together."""
        async with self._session("complete", shield=True) as db:
            return bool(await db.execute(self.sql.complete, params))

    # --- lifecycle ------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            return
        await self._connect()
        try:
            await self._migrate()
            self.me.mark_open()
            await self._beat(self._serving_transaction)
        except Exception as exc:
            self.me.mark_closed()
            await self._disconnect()
            fatal = self._open_failed(exc)
            if fatal is None:
                raise
            raise fatal from None
        except BaseException:
            self.me.mark_closed()
            await self._disconnect()
            raise
        self._opened = True
        self._heartbeat = HeartbeatThread(
            self._beat_in_thread, self._close_heartbeat_connection, self.heartbeat_s
        )
        self._heartbeat.start()

    async def close(self) -> None:
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            await anyio.to_thread.run_sync(heartbeat.stop)
        self.me.mark_closed()
        if not self._opened:
            return
        try:
            with anyio.CancelScope(shield=True):
                async with self._session("close", transaction=True) as db:
                    # Calls still running when the server stops can no longer finish; those that
                    # never reached their body never will (marking the start needs this store).
                    mine = {"owner": self.me.instance_id, "instance": self.me.instance_id}
                    await db.execute(self.sql.free_never_started, {**mine, "not_started": BODY_NOT_STARTED})
                    await db.execute(self.sql.owner_in_doubt, {**mine, "note": STOPPED_NOTE})
                    await db.execute(self.sql.unregister, mine)
        except StoreUnavailableError as exc:
            _log.warning(
                "idempotency_unregister_failed", error=type(exc.__cause__).__name__, detail=str(exc.__cause__)
            )
        finally:
            self._opened = False
            with anyio.CancelScope(shield=True):
                await self._disconnect()

    def _serving_transaction(self) -> AbstractAsyncContextManager[Session]:
        return self._session("heartbeat", transaction=True)

    async def _migrate(self) -> None:
        """Bring the schema to SCHEMA_VERSION; safe when several processes open it at once."""
        sql = self.sql
        async with self._session("migrate", transaction=True) as db:
            if sql.schema_lock:
                await db.rows(sql.schema_lock)
            await db.execute(sql.version_table)
            row = await db.one(sql.version)
            version = int(row[0]) if row and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise self._newer_schema(version)
            for step in sql.migrations[version:]:
                for statement in step:
                    await db.execute(statement)
            if version < SCHEMA_VERSION:
                await db.execute(sql.forget_version)
                await db.execute(sql.set_version, {"version": SCHEMA_VERSION})

    # --- the table's operations -------------------------------------------------

    async def claim(
        self,
        tool: str,
        key: str,
        fingerprint: str,
        lease_s: float,
        *,
        caller: str = LOCAL_CALLER,
        started: bool = False,
    ) -> Claim:
        sql = self.sql
        params = {
            "caller": caller,
            "tool": tool,
            "key": key,
            "fingerprint": fingerprint,
            "owner": self.me.instance_id,
            "lease": float(lease_s),
            "ttl": float(self.ttl_s),
            "body": BODY_RUNNING if started else BODY_NOT_STARTED,  # what the claim records
        }
        # A new key, the common case: one statement, committed durably before the effect.
        if await self._insert_claim(params):
            return Claim("new")
        # A retry of a completed key, or other arguments: an answer that changes nothing,
        # read without locking the row (locking it is a write, and its commit a flush).
        peeked = await self._peek_existing(params)
        row = None if peeked is None else ExistingRow(*peeked)
        answered = row is not None and (row.fingerprint != fingerprint or row.state == "completed")
        if answered and row is not None and not row.expired:
            return judge(self._existing(row, caller), fingerprint, float(row.now), self.me).claim
        async with self._session("claim", transaction=True, durable=True) as db:
            for _ in range(CLAIM_ATTEMPTS):
                row = await self._locked_existing(db, params)
                if row is not None and not row.expired:
                    break
                if row is not None:  # past its TTL: the key is new again
                    await db.execute(sql.delete_key, {**params, "caller": row.caller})
                if await db.execute(sql.insert_claim, params):
                    return Claim("new")
            else:
                raise StoreUnavailableError("claim")
            if row.caller != caller and caller == LOCAL_CALLER:
                await db.execute(sql.adopt_legacy, params)  # from now on the row is the caller's own
            verdict = judge(self._existing(row, caller), fingerprint, float(row.now), self.me)
            if verdict.take_over:
                await db.execute(sql.take_over, params)
            if verdict.now_in_doubt is not None:
                await db.execute(sql.set_in_doubt, {**params, "note": verdict.now_in_doubt})
            return verdict.claim

    async def _locked_existing(self, db: Session, params: Params) -> ExistingRow | None:
        """The row of (caller, tool, key) or the key's legacy row, locked until the transaction
        ends, as committed once the lock is ours."""
        if self.sql.lock_key is not None:
            await db.rows(self.sql.lock_key, params)
        row = await db.one(self.sql.select_existing, params)
        return None if row is None else ExistingRow(*row)

    def _held(self, caller: str, tool: str, key: str, **more: Any) -> dict[str, Any]:
        """The parameters of a write to a key this instance holds (its owner condition)."""
        return {"caller": caller, "tool": tool, "key": key, "owner": self.me.instance_id, **more}

    async def mark_started(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> None:
        params = self._held(caller, tool, key, running=BODY_RUNNING)
        async with self._session("mark_started") as db:
            marked = await db.execute(self.sql.mark_started, params)
        if not marked:
            raise ClaimLostError

    async def complete(
        self, tool: str, key: str, result: dict[str, Any], *, caller: str = LOCAL_CALLER
    ) -> None:
        params = self._held(caller, tool, key, result=encode_result(result))
        if not await self._store_outcome(params):
            _log.warning("idempotency_result_not_stored", tool=tool, reason="the claim is no longer ours")

    async def release(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> None:
        params = self._held(caller, tool, key)
        async with self._session("release", shield=True) as db:
            await db.execute(self.sql.release, params)

    async def mark_in_doubt(
        self, tool: str, key: str, note: str = "", *, caller: str = LOCAL_CALLER, still_running: bool = False
    ) -> None:
        params = self._held(caller, tool, key, note=note, body=BODY_RUNNING if still_running else BODY_ENDED)
        async with self._session("mark_in_doubt", shield=True) as db:
            await db.execute(self.sql.mark_in_doubt, params)

    async def get(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> KeyRecord | None:
        async with self._session("get") as db:
            row = await db.one(self.sql.get, {"caller": caller, "tool": tool, "key": key})
        return None if row is None else _record(row)

    async def find(self, tool: str, key: str) -> list[KeyRecord]:
        async with self._session("find") as db:
            rows = await db.rows(self.sql.find, {"tool": tool, "key": key})
        return [_record(row) for row in rows]

    async def still_running(self, tool: str, key: str, *, caller: str = LOCAL_CALLER) -> str | None:
        params = {"caller": caller, "tool": tool, "key": key, "ttl": float(self.ttl_s)}
        async with self._session("still_running") as db:
            row = await db.one(self.sql.peek_existing, params)
        existing = None if row is None else ExistingRow(*row)
        if existing is None or not _owns(caller, existing):
            return None
        return running_reason(self._existing(existing, caller), float(existing.now), self.me)

    async def in_doubt_count(self) -> int:
        async with self._session("in_doubt_count") as db:
            row = await db.one(self.sql.in_doubt_count)
        return int(row[0]) if row else 0

    async def list_keys(self, *, in_doubt_only: bool = False, limit: int = 50) -> list[KeyRecord]:
        statement = self.sql.list_in_doubt if in_doubt_only else self.sql.list_all
        async with self._session("list_keys") as db:
            rows = await db.rows(statement, {"limit": limit})
        return [_record(row) for row in rows]

    async def settle(
        self,
        tool: str,
        key: str,
        outcome: Outcome,
        note: str = "",
        *,
        caller: str = LOCAL_CALLER,
        force: bool = False,
    ) -> bool:
        sql = self.sql
        params = {"caller": caller, "tool": tool, "key": key, "ttl": float(self.ttl_s)}
        async with self._session("settle", transaction=True, durable=True, shield=True) as db:
            row = await self._locked_existing(db, params)
            if row is None or not _owns(caller, row):
                return False
            existing, now = self._existing(row, caller), float(row.now)
            if existing.state == "completed":
                return False
            # A body that may still run may yet have its effect: released, a retry would repeat it.
            if not force and running_reason(existing, now, self.me) is not None:
                return False
            params = {**params, "caller": row.caller}  # the caller's own row, or the key's legacy row
            if outcome == "failed":
                await db.execute(sql.delete_key, params)
            else:
                result = encode_result(settled_result(note))
                await db.execute(sql.settle_done, {**params, "result": result, "note": note or SETTLED_DONE})
            return True

    async def purge_expired(self, ttl_s: float) -> int:
        async with self._session("purge_expired") as db:
            return await db.execute(self.sql.purge, {"ttl": float(ttl_s)})

    async def check(self) -> tuple[HealthStatus, str]:
        where = self.where()
        try:
            with anyio.fail_after(CHECK_TIMEOUT_S):
                in_doubt = await self.in_doubt_count()
        except (StoreUnavailableError, TimeoutError, RuntimeError) as exc:
            return "failing", f"{where}: the idempotency table cannot be read ({type(exc).__name__})"
        return health_verdict(in_doubt, self._heartbeat, where)

    # --- heartbeat and sweep --------------------------------------------------

    async def _beat_in_thread(self) -> None:
        try:
            await self._beat(self._heartbeat_transaction)
        except Exception:
            self.me.reachability.failed()
            raise

    async def _beat(self, transaction: Transaction) -> None:
        """Prove we are alive; turn claims that can never finish into keys in doubt."""
        sql, me = self.sql, self.me
        async with transaction() as db:
            await db.execute(
                sql.register,
                {
                    "instance": me.instance_id,
                    "host_id": me.host_id,
                    "hostname": me.hostname,
                    "pid": me.pid,
                    "heartbeat_s": float(me.heartbeat_s),
                },
            )
        async with transaction() as db:
            if sql.sweep_lock:
                locked = await db.one(sql.sweep_lock)
                if not (locked and locked[0]):
                    return  # another replica is sweeping right now
            row = await db.one(sql.now)
            now = float(row[0]) if row else 0.0
            me.reachability.reached(now)
            for other in await db.rows(sql.others, {"instance": me.instance_id}):
                owner = _owner(InstanceRow(*other))
                reason = owner_gone_reason(owner, me, now)
                if reason is None:
                    continue
                gone = {"owner": owner.instance_id, "instance": owner.instance_id}
                if self._unflushed_writes_survive(owner):  # then "not started" is proof
                    await db.execute(sql.free_never_started, {**gone, "not_started": BODY_NOT_STARTED})
                await db.execute(sql.owner_in_doubt, {**gone, "note": reason})
                await db.execute(sql.unregister, gone)
            await db.execute(sql.lease_in_doubt, {"note": LEASE_EXPIRED})
            await db.execute(sql.orphans_in_doubt, {"note": owner_gone_reason(None, me, now)})
            if now - self._last_purge >= PURGE_EVERY_S:
                self._last_purge = now
                await db.execute(sql.purge, {"ttl": float(self.ttl_s)})
                await db.execute(self.task_sql.purge, {"ttl": float(self.task_ttl_s)})

    # --- row mapping ------------------------------------------------------------

    def _existing(self, row: ExistingRow, caller: str) -> ExistingKey:
        owner = None
        if row.owner_id is not None:
            owner = _owner(
                InstanceRow(
                    row.owner_id,
                    row.owner_host_id,
                    row.owner_hostname,
                    row.owner_pid,
                    row.owner_heartbeat_at,
                    row.owner_heartbeat_s,
                )
            )
        return ExistingKey(
            fingerprint=row.fingerprint,
            state=row.state,
            result_json=row.result,
            lease_until=float(row.lease_until),
            owner=owner,
            body=int(row.body),
            start_record_intact=self._start_record_intact(owner),
            unowned=row.caller != caller and caller != LOCAL_CALLER,
        )


def _owns(caller: str, row: ExistingRow) -> bool:
    """Whether the row is the caller's: its own, or a legacy row and the caller the one principal."""
    return row.caller == caller or caller == LOCAL_CALLER


def _owner(row: InstanceRow) -> OwnerRow:
    pid, heartbeat_at, heartbeat_s = int(row.pid), float(row.heartbeat_at), float(row.heartbeat_s)
    return OwnerRow(row.instance_id, row.host_id, row.hostname, pid, heartbeat_at, heartbeat_s)


def _record(row: tuple[Any, ...]) -> KeyRecord:
    record = RecordRow(*row)
    created, updated = float(record.created_at), float(record.updated_at)
    age = round(float(record.now) - created, 3)
    return KeyRecord(
        record.tool,
        record.key,
        record.state,
        record.fingerprint,
        created,
        updated,
        age,
        record.note,
        record.caller,
    )
