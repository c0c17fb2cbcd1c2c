"""The idempotency table in PostgreSQL, shared by every replica of the server.

A claim is `INSERT ... ON CONFLICT DO NOTHING`: exactly one replica's insert wins, the
others read the row it committed; a new key costs that one round trip. Times come from
the database's clock, so replicas on hosts with skewed clocks agree on leases and
heartbeats. Statements run on pooled connections in autocommit mode.

Durability: every commit is flushed before it returns (`synchronous_commit` is at least
`on` for this store's connections, whatever the server's default). A database crash (a
backend killed, which makes the postmaster restart them all and replay its log without
changing `pg_postmaster_start_time()`), a restart or a power cut therefore loses nothing
that was acknowledged: a start mark that is absent proves the body never began, and a
stored outcome is replayed. A commit left unflushed would revert a started call to
"never started", and its retry would run the side effect a second time.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal, NamedTuple

import anyio
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from resilient_mcp.authoring.errors import FatalError, StoreUnavailableError
from resilient_mcp.authoring.settings import no_database_url
from resilient_mcp.project import this_project
from resilient_mcp.store.batches import Batches
from resilient_mcp.store.dialect import NO_PARAMS, Dialect, Params, Session
from resilient_mcp.store.instances import OwnerRow
from resilient_mcp.store.sql import SCHEMA_VERSION, SQLStore
from resilient_mcp.store.store import DEFAULT_TTL_S, HEARTBEAT_S, LEGACY_CALLER
from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.text import clip

AsyncConn = psycopg.AsyncConnection[Any]
_log = get_logger(__name__)

CONNECT_TIMEOUT_S = 5
POOL_MAX_SIZE = 10
# Every connection's options. client_encoding: text comes back as str whatever the database's
# encoding; from a SQL_ASCII one (an initdb under the C locale) psycopg returns bytes, and no
# stored fingerprint would ever equal a new one: every retry would be a conflict.
_CONNECTION: dict[str, Any] = {
    "autocommit": True,
    "connect_timeout": CONNECT_TIMEOUT_S,
    "client_encoding": "utf8",
}
_SCHEMA_LOCK = 0x1DE7_0001  # pg_advisory_xact_lock ids: one migration, one sweep at a time
_SWEEP_LOCK = 0x1DE7_0002
# Run once per new connection: a server, database or role default of `off` is raised to `on`;
# stricter ones (remote_write, remote_apply) are kept.
_DURABLE_COMMITS = (
    "SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') = 'off'"
)

DIALECT = Dialect(
    time_type="timestamptz",
    time_default=" DEFAULT now()",
    float_type="double precision",
    small_int_type="smallint",
    now="now()",
    epoch="extract(epoch from {})::float8",
    after="(now() + make_interval(secs => {}))",
    before="(now() - make_interval(secs => {}))",
    row_lock=" FOR UPDATE OF k",
    schema_lock=f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})",
    sweep_lock=f"SELECT pg_try_advisory_xact_lock({_SWEEP_LOCK})",
    alters_primary_key=True,
    placeholder="%({})s",
    relaxed_commit="SET LOCAL synchronous_commit = off",
)

# Concurrent claims and outcomes, one statement per batch (`batches.py`): both kinds go out
# together, one round trip and one commit for all that waited, and each row changed is returned
# with its kind, so each caller learns whether its own insert or update took place. A retry's
# claim of a key whose outcome is in the same batch finds the key taken either way, so the
# statement's two parts need no order. Each part's rows are one JSON parameter, not an array per
# column: psycopg writes each element of a `text[]` parameter in Python, on the event loop
# (benchmarks/IDEMPOTENT_CALLS.md). JSON carries the batch's text as it is: tool names,
# printable-ASCII keys, hex fingerprints, results already ASCII JSON.
_WRITES = DIALECT.compile(
    "WITH claimed AS (INSERT INTO idempotency_keys"
    " (caller, tool, key, fingerprint, state, owner, created_at, updated_at, lease_until, body)"
    " SELECT c.caller, c.tool, c.key, c.fingerprint, 'pending', :owner, now(), now(),"
    " now() + make_interval(secs => c.lease), c.body"
    " FROM json_to_recordset(:claims::json)"
    " AS c (caller text, tool text, key text, fingerprint text, lease float8, body smallint)"
    " WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys AS l"
    f" WHERE l.caller = '{LEGACY_CALLER}' AND l.tool = c.tool AND l.key = c.key)"
    " ON CONFLICT (caller, tool, key) DO NOTHING RETURNING caller, tool, key),"
    " completed AS (UPDATE idempotency_keys AS k"
    " SET state = 'completed', result = c.result, note = '', updated_at = now()"
    " FROM json_to_recordset(:outcomes::json) AS c (caller text, tool text, key text, result text)"
    " WHERE k.caller = c.caller AND k.tool = c.tool AND k.key = c.key AND k.owner = :owner"
    " AND k.state IN ('pending', 'in_doubt') RETURNING k.caller, k.tool, k.key)"
    " SELECT 'claim', caller, tool, key FROM claimed"
    " UNION ALL SELECT 'outcome', caller, tool, key FROM completed"
)
_CLAIM_FIELDS = ("caller", "tool", "key", "fingerprint", "lease", "body")
_OUTCOME_FIELDS = ("caller", "tool", "key", "result")
_PEEK_FIELDS = ("caller", "tool", "key")
_ROWS_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))

__all__ = ["SCHEMA_VERSION", "PostgresStore", "describe_dsn"]


class PostgresStore(SQLStore):
    """The idempotency table in the PostgreSQL database at `dsn` (tables in its search_path)."""

    dialect = DIALECT

    def __init__(
        self,
        dsn: str | None,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
        pool_max_size: int = POOL_MAX_SIZE,
        task_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        super().__init__(ttl_s=ttl_s, heartbeat_s=heartbeat_s, task_ttl_s=task_ttl_s)
        self.dsn = dsn
        self.pool_max_size = pool_max_size
        self._pool: AsyncConnectionPool[AsyncConn] | None = None
        self._heartbeat_conn: AsyncConn | None = None
        self._writes = Batches(self._write_many)
        self._peeks = Batches(self._peek_many)

    @functools.cached_property
    def _peek_statement(self) -> str:
        """Existing keys, read as `peek_existing` reads one: the row of each (caller, tool, key)
        found, or the key's legacy row."""
        return DIALECT.compile(
            f"SELECT c.caller, c.tool, c.key, {self.sql.existing_columns}"
            " FROM json_to_recordset(:rows::json) AS c (caller text, tool text, key text)"
            " JOIN idempotency_keys AS k ON k.tool = c.tool AND k.key = c.key"
            f" AND k.caller IN (c.caller, '{LEGACY_CALLER}') {self.sql.existing_join}"
        )

    def where(self) -> str:
        # Shown to clients (health_check) and to anyone (/readyz): the database's address is not
        # theirs to know. The operator's messages (start-up, the log) name it.
        return "postgres"

    def _require_dsn(self) -> str:
        if not self.dsn:
            raise no_database_url()
        return self.dsn

    def _unreachable(self, exc: BaseException) -> FatalError:
        reason = clip(" ".join(str(exc).split()), 300, mark="") or type(exc).__name__
        return FatalError(
            f"the PostgreSQL database {describe_dsn(self._require_dsn())} is unreachable ({reason})",
            f"check {this_project().env_prefix}DATABASE_URL and that the database accepts connections "
            "(for local development, `nox -s db` starts one and prints the URL to export)",
        )

    async def _connect(self) -> None:
        if self._pool is not None:
            return
        dsn = self._require_dsn()
        try:  # one connection first: its error says why, where a pool would only time out
            probe = await psycopg.AsyncConnection.connect(dsn, **_CONNECTION)
        except psycopg.Error as exc:
            raise self._unreachable(exc) from None
        await probe.close()
        pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=self.pool_max_size,
            kwargs=dict(_CONNECTION),
            configure=_durable_commits,
            open=False,
            name="idempotency",
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        except psycopg.Error as exc:
            await pool.close()
            raise self._unreachable(exc) from None
        self._pool = pool

    async def _disconnect(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _open_failed(self, exc: Exception) -> FatalError | None:
        if not isinstance(exc, psycopg.Error):
            return None
        reason = clip(" ".join(str(exc).split()), 300, mark="")
        return FatalError(
            f"the idempotency tables in {describe_dsn(self._require_dsn())} cannot be created or written"
            f" ({reason})",
            f"let the user in {this_project().env_prefix}DATABASE_URL create tables,"
            " or point it to another database",
        )

    def _newer_schema(self, version: int) -> FatalError:
        return FatalError(
            f"the idempotency table in {describe_dsn(self._require_dsn())} has schema version {version},"
            f" newer than this server's {SCHEMA_VERSION}",
            f"upgrade this server, or set {this_project().env_prefix}DATABASE_URL to another database",
        )

    def _start_record_intact(self, owner: OwnerRow | None) -> bool:
        return True  # no commit is left unflushed

    def _unflushed_writes_survive(self, owner: OwnerRow) -> bool:
        return True  # no commit is left unflushed

    async def _insert_claim(self, params: Params) -> bool:
        return await self._writes.submit(_Write("claim", params))

    async def _store_outcome(self, params: Params) -> bool:
        return await self._writes.submit(_Write("outcome", params))

    async def _write_many(self, batch: list[_Write]) -> list[bool]:
        if len(batch) == 1:  # alone: the plain statement of its kind
            kind, params = batch[0]
            return [await (super()._insert_claim if kind == "claim" else super()._store_outcome)(params)]
        claims = _first_of_each_key([write.params for write in batch if write.kind == "claim"])
        outcomes = _first_of_each_key([write.params for write in batch if write.kind == "outcome"])
        rows = {
            "claims": _json_rows(claims, _CLAIM_FIELDS),
            "outcomes": _json_rows(outcomes, _OUTCOME_FIELDS),
            "owner": self.me.instance_id,
        }
        async with self._session("write") as db:
            changed = {(kind, caller, tool, key) for kind, caller, tool, key in await db.rows(_WRITES, rows)}
        # A caller whose key came twice in its kind hears False (it was not the one sent): the
        # second claim then finds the first one's row, the second outcome the first one's result.
        sent = {id(params) for params in (*claims, *outcomes)}
        return [id(p) in sent and (kind, p["caller"], p["tool"], p["key"]) in changed for kind, p in batch]

    async def _peek_existing(self, params: Params) -> tuple[Any, ...] | None:
        return await self._peeks.submit(params)

    async def _peek_many(self, batch: list[Params]) -> list[tuple[Any, ...] | None]:
        if len(batch) == 1:
            return [await super()._peek_existing(batch[0])]
        keys = _json_rows(batch, _PEEK_FIELDS)
        async with self._session("claim") as db:
            rows = await db.rows(self._peek_statement, {"rows": keys, "ttl": float(self.ttl_s)})
        # Each row is the batch's (caller, tool, key), then the key's columns as `peek_existing`
        # reads them. One row per key: a legacy row blocks the caller's own (`insert_claim`).
        found = {(caller, tool, key): tuple(columns) for caller, tool, key, *columns in rows}
        return [found.get((params["caller"], params["tool"], params["key"])) for params in batch]

    @asynccontextmanager
    async def _session(
        self, operation: str, *, transaction: bool = False, durable: bool = False, shield: bool = False
    ) -> AsyncIterator[Session]:
        # `durable` needs nothing here: every commit is flushed unless its statement relaxes it.
        pool = self._pool
        if pool is None:
            raise RuntimeError("the idempotency store is not open: call open() first")
        try:
            with anyio.CancelScope(shield=shield):
                async with pool.connection(timeout=CONNECT_TIMEOUT_S * 2) as conn:
                    if transaction:
                        async with conn.transaction():
                            yield _PostgresSession(conn)
                    else:
                        yield _PostgresSession(conn)
        except psycopg.OperationalError as exc:
            if not self._opened:
                raise
            _log.warning(
                "idempotency_store_error", operation=operation, error=type(exc).__name__, detail=str(exc)
            )
            raise StoreUnavailableError(operation) from exc

    @asynccontextmanager
    async def _heartbeat_transaction(self) -> AsyncIterator[Session]:
        conn = self._heartbeat_conn
        if conn is None or conn.closed:
            conn = self._heartbeat_conn = await psycopg.AsyncConnection.connect(
                self._require_dsn(), **_CONNECTION
            )
        try:
            async with conn.transaction():
                yield _PostgresSession(conn)
        except psycopg.OperationalError:
            await self._close_heartbeat_connection()  # reconnect on the next beat
            raise

    async def _close_heartbeat_connection(self) -> None:
        conn, self._heartbeat_conn = self._heartbeat_conn, None
        if conn is not None:
            await conn.close()


class _Write(NamedTuple):
    """A claim or an outcome on its way, with the statement parameters of its kind."""

    kind: Literal["claim", "outcome"]
    params: Params


def _first_of_each_key(batch: list[Params]) -> list[Params]:
    """One row per (caller, tool, key): a second call with the same key finds the first one's row."""
    seen: dict[tuple[str, str, str], Params] = {}
    for params in batch:
        seen.setdefault((params["caller"], params["tool"], params["key"]), params)
    return list(seen.values())


def _json_rows(batch: list[Params], fields: tuple[str, ...]) -> str:
    """The batch's rows as one JSON array of objects with these fields, for `json_to_recordset`."""
    return _ROWS_JSON.encode([{name: params[name] for name in fields} for params in batch])


async def _durable_commits(conn: AsyncConn) -> None:
    await conn.execute(_DURABLE_COMMITS)


class _PostgresSession(Session):
    def __init__(self, conn: AsyncConn) -> None:
        self._conn = conn

    async def rows(self, statement: str, params: Params = NO_PARAMS) -> list[tuple[Any, ...]]:
        cursor = await self._conn.execute(statement, params or None)
        return await cursor.fetchall()

    async def execute(self, statement: str, params: Params = NO_PARAMS) -> int:
        cursor = await self._conn.execute(statement, params or None)
        return cursor.rowcount


def describe_dsn(dsn: str) -> str:
    """host:port/dbname of a DSN, without the user or password: safe for messages and logs."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable DSN)"
    host = str(info.get("host") or "localhost")
    port = str(info.get("port") or "5432")
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"
