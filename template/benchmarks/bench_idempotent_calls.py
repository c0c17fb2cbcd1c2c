# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Side-effecting calls through the whole server, with and without the idempotency table.

    python benchmarks/bench_idempotent_calls.py [--calls 1000] [--dsn POSTGRES_DSN]

The same trivial tool is served twice: plainly, and with `side_effect=True` (a new
idempotency key per call: claim, run, complete). Both go through validation, the
resilience wrapper and logging, in memory over the SDK's `Client` (2026-07-28), in
one process and one run, interleaved in batches so that machine noise hits both alike.
Reported per backend (SQLite; PostgreSQL too in a project rendered with it, on `--dsn`,
`<PREFIX>DATABASE_URL` or a throwaway pgserver): calls per second, p50 and p99 latency,
and the rate as a share of the plain tool's; replays are retries with a completed key.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import anyio
from bench_idempotency_store import postgres_target
from bench_project import package, package_name
from mcp import Client

project = package("project")
app = package("core._app")
startup = package("core._startup")
idempotency = package("core._idempotency")

BATCH = 50
TOOLS = '''
from PACKAGE.core import tool


@tool(idempotent=True)
async def record_plain(amount: int) -> str:
    """Record an amount (no idempotency table)."""
    return f"recorded {amount}"


@tool(side_effect=True)
async def record_once(amount: int) -> str:
    """Record an amount, once per idempotency key."""
    return f"recorded {amount}"
'''.replace("PACKAGE", package_name())


@contextlib.contextmanager
def bench_tools() -> Iterator[ModuleType]:
    """A tools package holding the two tools, imported from a temporary directory."""
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory) / "bench_tools"
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        (folder / "records.py").write_text(TOOLS)
        sys.path.insert(0, directory)
        try:
            yield importlib.import_module("bench_tools")
        finally:
            sys.path.remove(directory)
            for name in [name for name in sys.modules if name.partition(".")[0] == "bench_tools"]:
                del sys.modules[name]


@contextlib.contextmanager
def database(backend: str, dsn: str | None) -> Iterator[str | None]:
    """Where the table lives: a temporary data directory, or a PostgreSQL schema (None: none)."""
    prefix = project.ENV_PREFIX
    with tempfile.TemporaryDirectory() as directory:
        os.environ[f"{prefix}DATA_DIR"] = directory
        if backend == "sqlite":
            yield f"sqlite in {directory}"
            return
        with postgres_target(dsn) as target:
            if target is not None:
                os.environ[f"{prefix}DATABASE_URL"] = target
            yield None if target is None else "postgres"


@contextlib.contextmanager
def backend_store(backend: str) -> Iterator[None]:
    """Serve with this backend's store, whichever the project was rendered with."""
    if backend == project.IDEMPOTENCY_BACKEND:
        yield
        return
    sqlite = package("core._idempotency.sqlite")

    def sqlite_store(settings: object) -> object:
        return sqlite.SQLiteStore(settings.data_dir / idempotency.DB_FILENAME)  # type: ignore[attr-defined]

    original, app.create_store = app.create_store, sqlite_store
    try:
        yield
    finally:
        app.create_store = original


def summary(name: str, latencies: list[float], plain_rate: float) -> str:
    cuts = statistics.quantiles(latencies, n=100)
    rate = len(latencies) / sum(latencies)
    return f"{name:<22} {rate:>9.0f} {cuts[49] * 1e3:>8.3f} {cuts[98] * 1e3:>8.3f} {rate / plain_rate:>9.2f}"


async def run(calls: int, tools: ModuleType) -> list[str]:
    server = app.create_server(startup.load_settings(), tools_package=tools)
    timings: dict[str, list[float]] = {"plain tool": [], "idempotent, new key": [], "idempotent, replay": []}
    async with Client(server) as client:

        async def timed(name: str, tool: str, arguments: dict[str, object]) -> None:
            started = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            timings[name].append(time.perf_counter() - started)
            assert not result.is_error, result.content

        for n in range(50):  # warm up: imports, connections, caches
            await timed("plain tool", "record_plain", {"amount": n})
            await timed("idempotent, new key", "record_once", {"amount": n, "idempotency_key": f"warm-{n}"})
        for values in timings.values():
            values.clear()
        for start in range(0, calls, BATCH):
            batch = range(start, min(start + BATCH, calls))
            for n in batch:
                await timed("plain tool", "record_plain", {"amount": n})
            for n in batch:
                await timed("idempotent, new key", "record_once", {"amount": n, "idempotency_key": f"k-{n}"})
            for n in batch:
                await timed("idempotent, replay", "record_once", {"amount": n, "idempotency_key": f"k-{n}"})
    await server.store.close()
    plain_rate = len(timings["plain tool"]) / sum(timings["plain tool"])
    return [summary(name, values, plain_rate) for name, values in timings.items()]


def main(argv: list[str]) -> int:
    prefix = project.ENV_PREFIX
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--dsn", default=os.environ.get(f"{prefix}DATABASE_URL"), help="postgres projects")
    args = parser.parse_args(argv)
    os.environ[f"{prefix}LOG_LEVEL"] = "warning"  # the per-call line is measured by bench_overhead
    backends = ["sqlite", "postgres"] if project.IDEMPOTENCY_BACKEND == "postgres" else ["sqlite"]
    sys.stdout.write(f"{args.calls} calls each, in memory; {os.cpu_count()} CPUs\n")
    for backend in backends:
        with bench_tools() as tools, database(backend, args.dsn) as where, backend_store(backend):
            if where is None:
                how = f"pass --dsn, set {prefix}DATABASE_URL or install pgserver"
                sys.stdout.write(f"\n{backend}: skipped; {how}\n")
                continue
            lines = anyio.run(run, args.calls, tools)
        sys.stdout.write(f"\n{where}\n{'':<22} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs plain':>9}\n")
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
