"""How fast the idempotency store records side-effecting calls, per backend, in one run.

    python benchmarks/bench_idempotency_store.py [--calls 2000] [--concurrency 16] [--dir PATH]
        [--dsn POSTGRES_DSN]   (postgres projects; default: <PREFIX>DATABASE_URL, else a throwaway one)

One call is what the resilience layer does for a new key: `claim` (committed durably),
`mark_started`, then `complete`. Reported: calls per second, run one after another and
with `--concurrency` callers at once; latency p50/p99 of one call; and replays per second
(a retry of a completed key). The store alone, without MCP around it. SQLite always;
PostgreSQL too in a project with that backend (`project.IDEMPOTENCY_BACKEND`; the stand-in
project's with SAMPLE_PROJECT_BACKEND=postgres).

Under each backend, "durable commit" is its floor: one row inserted and committed durably
on its own, in the same place, as the claim must be before the side effect starts (an
fsync of the SQLite file; PostgreSQL's WAL flush and one round trip). No new key can cost
less than that; the rest of a call is the store's own work.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from bench_project import core, project_module

idempotency = core("store")
project = project_module("project")

TOOL = "send_invoice"
FINGERPRINT = idempotency.fingerprint({"customer": "c-42", "amount_cents": 1999})
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "invoice sent"}], "isError": False}
LEASE_S = 60.0
WARM_UP = 50  # calls before the measured ones: connections, caches, prepared statements


async def one_call(store: Any, key: str) -> float:
    started = time.perf_counter()
    claim = await store.claim(TOOL, key, FINGERPRINT, LEASE_S)
    assert claim.kind == "new", claim
    await store.mark_started(TOOL, key)
    await store.complete(TOOL, key, RESULT)
    return time.perf_counter() - started


FLOOR_TABLE = "CREATE TABLE IF NOT EXISTS bench_floor (key text PRIMARY KEY)"


def percentiles(latencies: list[float]) -> str:
    """The p50 and p99 columns, in milliseconds."""
    cuts = statistics.quantiles(latencies, n=100)
    return f" {cuts[49] * 1000:>8.2f} {cuts[98] * 1000:>8.2f}"


def floor_row(latencies: list[float]) -> str:
    """The floor's row: only the sequential rate and the latencies."""
    rate = len(latencies) / sum(latencies)
    return f"{'  durable commit':<18} {rate:>9.0f} {'-':>14}{percentiles(latencies)} {'-':>11}"


def sqlite_floor(path: Path, calls: int) -> list[float]:
    """Single-row inserts in an SQLite file in WAL mode, each committed on its own and
    flushed to the disk, as a new key's claim is."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(FLOOR_TABLE)
        latencies = []
        for n in range(WARM_UP + calls):
            started = time.perf_counter()
            conn.execute("INSERT INTO bench_floor (key) VALUES (?)", (f"k-{n}",))
            latencies.append(time.perf_counter() - started)
        return latencies[WARM_UP:]
    finally:
        conn.close()


async def postgres_floor(dsn: str, calls: int) -> list[float]:
    """Single-row inserts, each its own durably committed transaction, one round trip each."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(FLOOR_TABLE)
        latencies = []
        for n in range(WARM_UP + calls):
            started = time.perf_counter()
            await conn.execute("INSERT INTO bench_floor (key) VALUES (%s)", (f"k-{n}",))
            latencies.append(time.perf_counter() - started)
        return latencies[WARM_UP:]


async def measure(name: str, store: Any, calls: int, concurrency: int) -> str:
    await store.open()
    try:
        for n in range(WARM_UP):
            await one_call(store, f"warm-{n}")

        started = time.perf_counter()
        latencies = [await one_call(store, f"seq-{n}") for n in range(calls)]
        sequential_s = time.perf_counter() - started

        async def caller(worker: int) -> None:
            for n in range(worker, calls, concurrency):
                await one_call(store, f"par-{n}")

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for worker in range(concurrency):
                group.start_soon(caller, worker)
        concurrent_s = time.perf_counter() - started

        started = time.perf_counter()
        for n in range(calls):
            assert (await store.claim(TOOL, f"seq-{n}", FINGERPRINT, LEASE_S)).kind == "replay"
        replay_s = time.perf_counter() - started
    finally:
        await store.close()
    return (
        f"{name:<18} {calls / sequential_s:>9.0f} {calls / concurrent_s:>14.0f}"
        f"{percentiles(latencies)} {calls / replay_s:>11.0f}"
    )


@dataclass(frozen=True)
class LocalPostgres:
    """A throwaway PostgreSQL started here, which only this process uses (the soak kills it)."""

    dsn: str
    data_dir: Path
    bin_dir: Path  # its initdb and pg_ctl
    log: Path
    user: str | None  # the account it runs as when this process is root (PostgreSQL refuses root)

    def postmaster_pid(self) -> int:
        """The running postmaster's pid: the first line of postmaster.pid."""
        return int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def pg_ctl(self, *args: str, timeout_s: float = 60.0) -> None:
        """`pg_ctl -D <data> -l <log> <args>`, as the server's account; its output in the error."""
        command = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log), *args]
        with tempfile.TemporaryFile("w+") as output:  # not a pipe: a server it starts could hold that open
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                timeout=timeout_s,
                user=self.user,
            )
            if done.returncode != 0:
                output.seek(0)
                raise subprocess.CalledProcessError(done.returncode, command, output.read())

    def stop(self) -> None:
        """Stop whichever postmaster runs now (after a restart, not the one first started)."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.pg_ctl("-m", "immediate", "-w", "stop")


@dataclass(frozen=True)
class PostgresTarget:
    """Where a PostgreSQL run goes: a fresh schema, on a DSN given or on a server started here."""

    dsn: str  # its search_path is the fresh schema
    server: LocalPostgres | None  # None on a DSN given: not this process's to stop or kill


def start_local_postgres(stack: contextlib.ExitStack) -> LocalPostgres | None:
    """A throwaway PostgreSQL, stopped and deleted when `stack` closes: pgserver's, else an
    installed PostgreSQL's initdb and pg_ctl; None when there is neither."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            from pgserver._commands import POSTGRES_BIN_PATH
            from pgserver.postgres_server import get_server
        except ImportError:
            return _start_with_pg_ctl(stack)
    data_dir = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    server = get_server(data_dir, cleanup_mode="delete")
    local = LocalPostgres(server.get_uri(), data_dir, POSTGRES_BIN_PATH, server.log, server.system_user)
    first_postmaster = local.postmaster_pid()

    def cleanup() -> None:
        with contextlib.suppress(OSError, ValueError):
            if local.postmaster_pid() != first_postmaster:  # restarted (by the soak)
                local.stop()  # pgserver stops only the postmaster it started; quiet when it is gone
                logging.getLogger("pgserver").setLevel(logging.CRITICAL)
        server.cleanup()

    stack.callback(cleanup)
    return local


def _start_with_pg_ctl(stack: contextlib.ExitStack) -> LocalPostgres | None:
    candidates = [
        shutil.which("pg_ctl"),
        *sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True),
    ]
    pg_ctl = next((Path(c) for c in candidates if c), None)
    if pg_ctl is None or not (pg_ctl.parent / "initdb").exists():
        return None
    folder = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    stack.callback(shutil.rmtree, folder, ignore_errors=True)
    user = None
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # PostgreSQL refuses to run as root
        import pwd

        user = "postgres" if _has_account("postgres") else "nobody"
        os.chown(folder, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    local = LocalPostgres(
        f"postgresql://postgres@/postgres?host={folder}", folder / "data", pg_ctl.parent, folder / "log", user
    )
    initdb = [str(pg_ctl.parent / "initdb"), "-D", str(local.data_dir), "-U", "postgres"]
    subprocess.run([*initdb, "--auth=trust", "-E", "UTF8"], check=True, capture_output=True, user=user)
    local.pg_ctl("-o", f"-k {folder} -c listen_addresses=''", "-w", "start")
    stack.callback(local.stop)
    return local


def _has_account(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def postgres_target(dsn: str | None) -> Iterator[str | None]:
    """The DSN of a fresh schema (dropped afterwards) on the DSN given, else on a throwaway
    PostgreSQL; None when there is no PostgreSQL to use (no DSN, no pgserver, no initdb and pg_ctl)."""
    with postgres_schema(dsn) as target:
        yield None if target is None else target.dsn


@contextlib.contextmanager
def postgres_schema(dsn: str | None) -> Iterator[PostgresTarget | None]:
    """As postgres_target, with the throwaway server when one was started (the soak kills it)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with contextlib.ExitStack() as stack:
        server = None
        if not dsn:
            server = start_local_postgres(stack)
            if server is None:
                yield None
                return
            dsn = server.dsn
        schema = sql.Identifier(f"idempotency_bench_{uuid.uuid4().hex[:12]}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        try:
            yield PostgresTarget(make_conninfo(dsn, options=f"-c search_path={schema.as_string()}"), server)
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))


async def main(argv: list[str]) -> int:
    prefix = project.ENV_PREFIX
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    where = "where the SQLite file goes (created if missing; default: a temporary folder)"
    parser.add_argument("--dir", type=Path, default=None, help=where)
    parser.add_argument("--dsn", default=os.environ.get(f"{prefix}DATABASE_URL"), help="postgres projects")
    args = parser.parse_args(argv)
    if args.dir is not None:
        try:
            args.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            reason = exc.strerror or exc
            parser.error(f"--dir {args.dir} cannot be created ({reason}); pass a writable folder")

    sys.stdout.write(f"{args.calls} calls (claim + start + complete) per run; {os.cpu_count()} CPUs\n")
    sys.stdout.write(
        f"{'backend':<18} {'calls/s':>9} {f'calls/s x{args.concurrency}':>14}"
        f" {'p50 ms':>8} {'p99 ms':>8} {'replays/s':>11}\n"
    )
    sqlite = core("store.sqlite")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        store = sqlite.SQLiteStore(Path(directory) / idempotency.DB_FILENAME)
        sys.stdout.write(await measure("sqlite", store, args.calls, args.concurrency) + "\n")
        sys.stdout.write(floor_row(sqlite_floor(Path(directory) / "floor.db", args.calls)) + "\n")
    if project.IDEMPOTENCY_BACKEND == "postgres":
        postgres = core("store.postgres")
        with postgres_target(args.dsn) as dsn:
            if dsn is None:
                how = f"pass --dsn, set {prefix}DATABASE_URL, or install pgserver or PostgreSQL"
                sys.stdout.write(f"postgres  skipped: {how}\n")
            else:
                store = postgres.PostgresStore(dsn, pool_max_size=args.concurrency)
                sys.stdout.write(await measure("postgres", store, args.calls, args.concurrency) + "\n")
                sys.stdout.write(floor_row(await postgres_floor(dsn, args.calls)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
