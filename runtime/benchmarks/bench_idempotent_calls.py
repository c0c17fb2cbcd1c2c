"""Side-effecting calls through the whole server at 1 to 16 in flight, alone or against another checkout.

    python benchmarks/bench_idempotent_calls.py [--calls 600] [--in-flight 1,4,8,16] [--dsn POSTGRES_DSN]
    python benchmarks/bench_idempotent_calls.py --against DIR [--rounds 8]   (DIR has its own .venv)

The same trivial tool is served twice: plainly, and with `side_effect=True` (claim, run,
complete per idempotency key). Both go through validation, the resilience wrapper and
logging, in memory over the SDK's `Client` (2026-07-28). Rows per backend (SQLite;
PostgreSQL too in a project with that backend, the stand-in's with SAMPLE_PROJECT_BACKEND=postgres,
on `--dsn`, `<PREFIX>DATABASE_URL` or a throwaway pgserver): new keys and replays (retries of
completed keys) with 1, 4, 8 and 16 calls in flight on one session, as calls per second and
p50/p99 latency; then a plain call's p99 alone, while 16 new keys run beside it, and while 16
plain calls do (what a busy event loop alone does to it, without a claim).

`--against DIR` runs this script as a worker subprocess in each project (this one's, the
stand-in served by this work tree's library, with this interpreter; DIR's with DIR/.venv/bin/python,
a project on resilient-mcp or one rendered before it; BENCH_PROJECT_ROOT names each), one per
backend and side, on one PostgreSQL. Each round asks both for every row in turn, alternating
which goes first (A B B A ...), so that a busy machine slows both alike; printed are each
row's medians and its rate ratio this/other as the median with the range over rounds,
beside the targets of the claim path against release 0.2.0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import anyio
from bench_idempotency_store import postgres_target, start_local_postgres
from bench_project import ROOT, SAMPLE_PROJECT, core, package_name, project_module
from mcp import Client

project = project_module("project")
app = core("server.app")
startup = core("server.startup")
owner_settings = project_module("settings")
idempotency = core("store")

WARM_UP = 50
PLAIN_ROW_S = 2.0
MIN_PLAIN_CALLS = 20
Row = dict[str, float]  # rate (calls/s), p50 and p99 (seconds)

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
    """Serve with this backend's store, whichever the project stores its keys in."""
    if backend == project.IDEMPOTENCY_BACKEND:
        yield
        return
    sqlite = core("store.sqlite")

    def sqlite_store(settings: Any) -> object:
        return sqlite.SQLiteStore(settings.data_dir / idempotency.DB_FILENAME)

    original, app.create_store = app.create_store, sqlite_store
    try:
        yield
    finally:
        app.create_store = original


def row(latencies: list[float], wall_s: float) -> Row:
    cuts = statistics.quantiles(latencies, n=100)
    return {"rate": len(latencies) / wall_s, "p50": cuts[49], "p99": cuts[98]}


def row_names(in_flight: list[int]) -> list[str]:
    names = [name for n in in_flight for name in (f"new key x{n}", f"replay x{n}")]
    busy = max(in_flight)
    return [*names, "plain, idle", f"plain beside {busy} new keys", f"plain beside {busy} plain calls"]


class Bench:
    """One server and one client session, measured a row at a time."""

    def __init__(self, client: Client, calls: int, busy: int) -> None:
        self.client = client
        self.calls = calls
        self.busy = busy  # new keys in flight beside the loaded plain row

    async def call(self, tool: str, arguments: dict[str, object]) -> float:
        started = time.perf_counter()
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, result.content
        return time.perf_counter() - started

    async def warm_up(self) -> None:
        for n in range(WARM_UP):  # imports, connections, caches
            await self.call("record_plain", {"amount": n})
            await self.call("record_once", {"amount": n, "idempotency_key": f"warm-{n}"})

    async def measure(self, name: str, round_: int) -> Row:
        """One row; a replay row retries the keys of the new-key row before it in the same round."""
        kind, _, in_flight = name.rpartition(" x")
        if kind in ("new key", "replay"):
            keys = [f"r{round_}-x{in_flight}-{n}" for n in range(self.calls)]
            return await self.concurrently(int(in_flight), keys)
        if name == "plain, idle":
            return await self.plain()
        # Beside new keys, or beside as many plain calls: the event loop just as busy, no claims.
        claiming = name.endswith(" new keys")
        stop, all_going = anyio.Event(), anyio.Event()
        going: set[int] = set()

        async def background(worker: int) -> None:
            n = 0
            while not stop.is_set():
                if claiming:
                    key = f"r{round_}-busy{worker}-{n}"
                    await self.call("record_once", {"amount": 1, "idempotency_key": key})
                else:
                    await self.call("record_plain", {"amount": n})
                n += 1
                going.add(worker)
                if len(going) == self.busy:
                    all_going.set()

        async with anyio.create_task_group() as group:
            for worker in range(self.busy):
                group.start_soon(background, worker)
            await all_going.wait()  # each background caller has one call behind it
            loaded = await self.plain()
            stop.set()
        return loaded

    async def concurrently(self, callers: int, keys: list[str]) -> Row:
        """Every key's call, `callers` in flight at once (each caller one after another)."""
        latencies: list[float] = []

        async def caller(mine: list[str]) -> None:
            for key in mine:
                latencies.append(await self.call("record_once", {"amount": 1, "idempotency_key": key}))

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for worker in range(callers):
                group.start_soon(caller, keys[worker::callers])
        return row(latencies, time.perf_counter() - started)

    async def plain(self) -> Row:
        """Plain calls one after another, twice a row's count (a p99 needs the samples), or fewer
        once PLAIN_ROW_S have passed: beside claims that block the event loop they crawl."""
        started = time.perf_counter()
        latencies: list[float] = []
        while len(latencies) < 2 * self.calls:
            latencies.append(await self.call("record_plain", {"amount": len(latencies)}))
            if len(latencies) >= MIN_PLAIN_CALLS and time.perf_counter() - started > PLAIN_ROW_S:
                break
        return row(latencies, time.perf_counter() - started)


Requests = Callable[[], Awaitable[tuple[str, int] | None]]  # the next (row, round), None: done


def load_settings() -> Any:
    """This checkout's settings: since 0.3 the entry point hands the owner's class in; before, the
    core found it (run --against 0.2.0)."""
    if inspect.signature(startup.load_settings).parameters:
        return startup.load_settings(owner_settings.Settings)
    return startup.load_settings()


async def serve(
    calls: int, in_flight: list[int], tools: ModuleType, requests: Requests, measured: Callable[[Row], None]
) -> None:
    """Measure the rows `requests` asks for, in its order, on one server."""
    server = app.create_server(load_settings(), tools_package=tools)
    async with Client(server) as client:
        bench = Bench(client, calls, max(in_flight))
        await bench.warm_up()
        while (request := await requests()) is not None:
            measured(await bench.measure(*request))
    await server.store.close()


def answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def requested() -> tuple[str, int] | None:
    """A worker's next row, asked for on stdin as a JSON line."""
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    if not line:
        return None
    request = json.loads(line)
    return request["row"], request["round"]


def measure(backend: str, calls: int, in_flight: list[int], dsn: str | None, worker: bool) -> dict[str, Any]:
    """A worker's rows (asked on stdin, answered on stdout), or one pass over every row here; or why not."""
    if backend == "postgres" and project.IDEMPOTENCY_BACKEND != "postgres":
        return {"skipped": "the project stores its keys in SQLite"}
    with bench_tools() as tools, database(backend, dsn) as where, backend_store(backend):
        if where is None:
            return {"skipped": f"pass --dsn, set {project.ENV_PREFIX}DATABASE_URL or install pgserver"}
        if worker:
            answer({"where": where})
            anyio.run(serve, calls, in_flight, tools, requested, answer)
            return {}
        names, rows = iter(row_names(in_flight)), list[Row]()

        async def each_row_once() -> tuple[str, int] | None:
            name = next(names, None)
            return None if name is None else (name, 0)

        anyio.run(serve, calls, in_flight, tools, each_row_once, rows.append)
        return {"where": where, "rows": dict(zip(row_names(in_flight), rows, strict=True))}


def loaded_factor(rows: dict[str, Row], beside: str = " new keys") -> float:
    """A plain call's p99 while new keys (target: at most 2), or plain calls, run beside it, over
    its idle p99."""
    loaded = next(name for name in rows if name.startswith("plain beside") and name.endswith(beside))
    return rows[loaded]["p99"] / rows["plain, idle"]["p99"]


def print_alone(backend: str, result: dict[str, Any]) -> None:
    if "skipped" in result:
        sys.stdout.write(f"\n{backend}: skipped; {result['skipped']}\n")
        return
    rows: dict[str, Row] = result["rows"]
    plain_rate = rows["plain, idle"]["rate"]
    sys.stdout.write(
        f"\n{result['where']}\n{'':<26} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs plain':>9}\n"
    )
    for name, values in rows.items():
        sys.stdout.write(
            f"{name:<26} {values['rate']:>9.0f} {values['p50'] * 1e3:>8.3f} {values['p99'] * 1e3:>8.3f}"
            f" {values['rate'] / plain_rate:>9.2f}\n"
        )
    sys.stdout.write(
        f"plain p99 beside new keys / idle: {loaded_factor(rows):.2f}x (target: at most 2x);"
        f" beside plain calls / idle: {loaded_factor(rows, ' plain calls'):.2f}x\n"
    )


# The claim path's targets against release 0.2.0: (backend, row) -> (text, least ratio).
TARGETS: dict[tuple[str, str], tuple[str, float | None]] = {
    ("sqlite", "new key x16"): (">= 2.5x", 2.5),
    ("postgres", "new key x16"): (">= 3x", 3.0),
    ("sqlite", "new key x1"): ("no slower than today", None),
    ("postgres", "new key x1"): ("no slower than today", None),
}


class Worker:
    """This script, run as a worker in the project at `root` with that project's interpreter,
    one process per backend and side, kept for every round: rows are asked for one at a time."""

    def __init__(
        self, python: str, root: Path, backend: str, args: argparse.Namespace, stderr: IO[str]
    ) -> None:
        self.root = root
        self.stderr = stderr  # a file, not a pipe: nobody reads it while rows run
        script = str(Path(__file__).resolve())
        command = [python, script, "--worker", backend, "--calls", str(args.calls), "--in-flight"]
        self.process = subprocess.Popen(
            [*command, args.in_flight, *(["--dsn", args.dsn] if args.dsn else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, "BENCH_PROJECT_ROOT": str(root)},
        )
        self.hello = self.read()  # where it measures, or why it skips

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise SystemExit(f"the worker in {self.root} failed:\n{self.stderr.read()[-3000:]}")
        message: dict[str, Any] = json.loads(line)
        return message

    def measure(self, name: str, round_: int) -> Row:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"row": name, "round": round_}) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()  # end of requests: the worker closes its store and leaves
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def spread(values: list[float]) -> str:
    """The median with the range over rounds: 1.17 [1.10-1.25]."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def print_against(backend: str, rounds: dict[str, list[dict[str, Row]]]) -> None:
    this, other = rounds["this"], rounds["other"]
    head = f"{'calls/s':>9} {'p50 ms':>7} {'p99 ms':>7}"
    sys.stdout.write(
        f"\n{backend}: medians over {len(this)} rounds\n"
        f"{'':<26} {'this':^25} {'other':^25} {'this/other rate':>19}  target\n"
        f"{'':<26} {head} {head} {'median [range]':>19}\n"
    )
    for name in this[0]:
        cells = ""
        for side in (this, other):
            rate, p50, p99 = (
                statistics.median(rows[name][key] for rows in side) for key in ("rate", "p50", "p99")
            )
            cells += f" {rate:>9.0f} {p50 * 1e3:>7.3f} {p99 * 1e3:>7.3f}"
        ratios = [a[name]["rate"] / b[name]["rate"] for a, b in zip(this, other, strict=True)]
        text, least = TARGETS.get((backend, name), ("", None))
        verdict = "" if least is None else (" met" if statistics.median(ratios) >= least else " NOT met")
        sys.stdout.write(f"{name:<26}{cells} {spread(ratios):>19}  {text}{verdict}\n")
    for beside, target in ((" new keys", " (target: this at most 2x)"), (" plain calls", "")):
        factors = {side: spread([loaded_factor(r, beside) for r in each]) for side, each in rounds.items()}
        sys.stdout.write(
            f"plain p99 beside{beside} / idle: this {factors['this']}x, other {factors['other']}x{target}\n"
        )


def rendered_from(root: Path) -> str:
    """The template commit a checkout was rendered from, as its Copier answers file records it;
    the library's stand-in is this work tree's."""
    if root == SAMPLE_PROJECT.resolve():
        return "the stand-in project, on this work tree's resilient-mcp"
    with contextlib.suppress(OSError):
        for line in (root / ".copier-answers.yml").read_text().splitlines():
            if line.startswith("_commit:"):
                return f"template {line.partition(':')[2].strip()}"
    return "template commit unknown"


def against(args: argparse.Namespace, in_flight: list[int]) -> int:
    other = Path(args.against).resolve()
    other_python = other / ".venv" / "bin" / "python"
    if not other_python.exists():
        raise SystemExit(f"{other_python} is missing: run `uv sync`, `uv pip install -e '.[dev]'` in {other}")
    sides = {"this": (sys.executable, ROOT), "other": (str(other_python), other)}
    backends = ["sqlite", "postgres"] if project.IDEMPOTENCY_BACKEND == "postgres" else ["sqlite"]
    sys.stdout.write(
        f"this = {ROOT} ({rendered_from(ROOT)}), other = {other} ({rendered_from(other)})\n"
        f"{args.calls} calls a row, each row in both in turn, in memory; {os.cpu_count()} CPUs;"
        " the targets hold against release 0.2.0\n"
    )
    with contextlib.ExitStack() as stack:
        if "postgres" in backends and not args.dsn:  # one server for both sides; each worker makes a schema
            local = start_local_postgres(stack)
            args.dsn = None if local is None else local.dsn
        for backend in backends:
            with contextlib.ExitStack() as running:
                workers: dict[str, Worker] = {}
                for side, (python, root) in sides.items():
                    stderr = running.enter_context(tempfile.TemporaryFile("w+"))
                    workers[side] = Worker(python, root, backend, args, stderr)
                    running.callback(workers[side].close)
                skipped = [
                    f"{side}: {w.hello['skipped']}" for side, w in workers.items() if "skipped" in w.hello
                ]
                if skipped:
                    sys.stdout.write(f"\n{backend}: skipped; {'; '.join(skipped)}\n")
                    continue
                rounds: dict[str, list[dict[str, Row]]] = {side: [] for side in workers}
                for round_ in range(args.rounds):
                    for results in rounds.values():
                        results.append({})
                    for index, name in enumerate(row_names(in_flight)):
                        # Row by row, both see the same machine; A B B A ...: neither always goes first.
                        order = list(workers) if (round_ + index) % 2 == 0 else list(reversed(workers))
                        for side in order:
                            rounds[side][-1][name] = workers[side].measure(name, round_)
            print_against(backend, rounds)
    return 0


def main(argv: list[str]) -> int:
    prefix = project.ENV_PREFIX
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=600, help="calls a row (plain rows: twice as many)")
    parser.add_argument("--in-flight", default="1,4,8,16", help="calls in flight, comma-separated")
    parser.add_argument("--dsn", default=os.environ.get(f"{prefix}DATABASE_URL"), help="postgres projects")
    parser.add_argument("--against", metavar="DIR", help="another checkout of this project, with its .venv")
    parser.add_argument("--rounds", type=int, default=8, help="with --against: rounds of every row")
    parser.add_argument("--worker", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    in_flight = sorted({int(n) for n in args.in_flight.split(",")})
    if not in_flight or min(in_flight) < 1 or args.calls < max(in_flight) or args.rounds < 1:
        parser.error("--in-flight counts and --rounds must be at least 1, --calls at least the largest count")
    os.environ[f"{prefix}LOG_LEVEL"] = "warning"  # the per-call line is measured by bench_overhead
    if args.worker:
        result = measure(args.worker, args.calls, in_flight, args.dsn, worker=True)
        if "skipped" in result:
            answer(result)
        return 0
    if args.against:
        return against(args, in_flight)
    sys.stdout.write(f"{args.calls} calls a row, in memory; {os.cpu_count()} CPUs\n")
    for backend in ["sqlite", "postgres"] if project.IDEMPOTENCY_BACKEND == "postgres" else ["sqlite"]:
        print_alone(backend, measure(backend, args.calls, in_flight, args.dsn, worker=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
