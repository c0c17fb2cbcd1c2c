# Template-owned: `copier update` replaces this file; put your code in tools/.
"""How fast the idempotency store records side-effecting calls, per backend, in one run.

    python benchmarks/bench_idempotency_store.py [--calls 2000] [--concurrency 16] [--dir PATH]
        [--dsn POSTGRES_DSN]   (postgres projects; default: <PREFIX>DATABASE_URL, else a pgserver)

One call is what the resilience layer does for a new key: `claim` (committed durably),
`mark_started`, then `complete`. Reported: calls per second, run one after another and
with `--concurrency` callers at once; latency p50/p99 of one call; and replays per second
(a retry of a completed key). The store alone, without MCP around it. SQLite always;
PostgreSQL too in a project rendered with that backend (`project.IDEMPOTENCY_BACKEND`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from bench_project import package

idempotency = package("core._idempotency")
project = package("project")

TOOL = "send_invoice"
FINGERPRINT = idempotency.fingerprint({"customer": "c-42", "amount_cents": 1999})
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "invoice sent"}], "isError": False}
LEASE_S = 60.0


async def one_call(store: Any, key: str) -> float:
    started = time.perf_counter()
    claim = await store.claim(TOOL, key, FINGERPRINT, LEASE_S)
    assert claim.kind == "new", claim
    await store.mark_started(TOOL, key)
    await store.complete(TOOL, key, RESULT)
    return time.perf_counter() - started


async def measure(name: str, store: Any, calls: int, concurrency: int) -> str:
    await store.open()
    try:
        for n in range(50):  # warm up: connections, caches, prepared statements
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
    cuts = statistics.quantiles(latencies, n=100)
    return (
        f"{name:<9} {calls / sequential_s:>9.0f} {calls / concurrent_s:>14.0f}"
        f" {cuts[49] * 1000:>8.2f} {cuts[98] * 1000:>8.2f} {calls / replay_s:>11.0f}"
    )


@contextlib.contextmanager
def postgres_target(dsn: str | None) -> Iterator[str | None]:
    """A fresh schema (dropped afterwards) on the DSN given, else on a throwaway pgserver.

    None when there is no PostgreSQL to use (no DSN and no pgserver installed)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with contextlib.ExitStack() as stack:
        if not dsn:
            try:
                from pgserver.postgres_server import get_server
            except ImportError:
                yield None
                return
            server = get_server(Path(tempfile.mkdtemp(prefix="bench-pg-")), cleanup_mode="delete")
            stack.callback(server.cleanup)
            dsn = server.get_uri()
        schema = sql.Identifier(f"idempotency_bench_{uuid.uuid4().hex[:12]}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        try:
            yield make_conninfo(dsn, options=f"-c search_path={schema.as_string()}")
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
        f"{'backend':<9} {'calls/s':>9} {f'calls/s x{args.concurrency}':>14}"
        f" {'p50 ms':>8} {'p99 ms':>8} {'replays/s':>11}\n"
    )
    sqlite = package("core._idempotency.sqlite")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        store = sqlite.SQLiteStore(Path(directory) / idempotency.DB_FILENAME)
        sys.stdout.write(await measure("sqlite", store, args.calls, args.concurrency) + "\n")
    if project.IDEMPOTENCY_BACKEND == "postgres":
        postgres = package("core._idempotency.postgres")
        with postgres_target(args.dsn) as dsn:
            if dsn is None:
                how = f"pass --dsn, set {prefix}DATABASE_URL or install pgserver"
                sys.stdout.write(f"postgres  skipped: {how}\n")
            else:
                store = postgres.PostgresStore(dsn, pool_max_size=args.concurrency)
                sys.stdout.write(await measure("postgres", store, args.calls, args.concurrency) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
