"""Side-effecting calls through the whole server at 1 to 16 in flight, alone or against another checkout.

    python benchmarks/bench_idempotent_calls.py [--calls 600] [--in-flight 1,4,8,16] [--dsn POSTGRES_DSN]
    python benchmarks/bench_idempotent_calls.py --against DIR [--rounds 8]   (DIR has its own .venv)
    python benchmarks/bench_idempotent_calls.py --transport memory ...       (in-process, the SDK's Client)

The same trivial tool is served twice: plainly, and with `side_effect=True` (claim, run,
complete per idempotency key). Over stdio (the default) each server is the project's own
command in a subprocess, as a host runs it, spoken to in JSON-RPC lines (2025-11-25) with any
number of requests in flight; its CPU is read from /proc for every row. Rows per backend
(SQLite; PostgreSQL too in a project with that backend, the stand-in's with
SAMPLE_PROJECT_BACKEND=postgres, on `--dsn`, `<PREFIX>DATABASE_URL` or a throwaway pgserver):
new keys and replays (retries of completed keys) with 1, 4, 8 and 16 calls in flight on one
session, as calls per second, p50/p99 latency and the server's CPU per call; then a plain
call's p99 alone, while 16 new keys run beside it, and while 16 plain calls do (what a busy
event loop alone does to it, without a claim).

`--against DIR` measures another project, DIR, beside this one (the stand-in served by this
work tree's library): a project on resilient-mcp, or one rendered before it (BENCH_PROJECT_ROOT
names each; DIR's server runs on DIR/.venv/bin/python), one server per backend and side, on one
PostgreSQL. Each round asks both for every row in turn, alternating which goes first (A B B A
...), so that a busy machine slows both alike. Printed per row: each side's medians, and the
ratios as the median with the range over rounds: the other side's server CPU per call over
this side's (the verdict: a shared machine's load moves it far less than wall time), and the
rate this/other beside it, with the targets of the claim path against release 0.2.0 and the
load average before and after. In memory (`--transport memory`) the script runs itself as a
worker in each project instead, and the CPU is each worker's, client included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import itertools
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
    return {"rate": len(latencies) / wall_s, "p50": cuts[49], "p99": cuts[98], "calls": len(latencies)}


def row_names(in_flight: list[int]) -> list[str]:
    names = [name for n in in_flight for name in (f"new key x{n}", f"replay x{n}")]
    busy = max(in_flight)
    return [*names, "plain, idle", f"plain beside {busy} new keys", f"plain beside {busy} plain calls"]


CallTool = Callable[[str, dict[str, object]], Awaitable[None]]  # raises when the call failed


class Bench:
    """One server and one client session, measured a row at a time; each row also reads the
    CPU seconds `cpu_s` counts (the server's over stdio; in memory, this process's, client included)."""

    def __init__(self, call_tool: CallTool, cpu_s: Callable[[], float], calls: int, busy: int) -> None:
        self.call_tool = call_tool
        self.cpu_s = cpu_s
        self.calls = calls
        self.busy = busy  # new keys in flight beside the loaded plain row

    async def call(self, tool: str, arguments: dict[str, object]) -> float:
        started = time.perf_counter()
        await self.call_tool(tool, arguments)
        return time.perf_counter() - started

    async def warm_up(self) -> None:
        for n in range(WARM_UP):  # imports, connections, caches
            await self.call("record_plain", {"amount": n})
            await self.call("record_once", {"amount": n, "idempotency_key": f"warm-{n}"})

    async def measure(self, name: str, round_: int) -> Row:
        """One row, with the CPU seconds per call spent in it (`cpu`)."""
        cpu = self.cpu_s()
        measured = await self._measure(name, round_)
        calls = measured.pop("calls")
        return {**measured, "cpu": (self.cpu_s() - cpu) / calls}

    async def _measure(self, name: str, round_: int) -> Row:
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
        beside = [0]  # the background's calls: the row's CPU is spent on them too

        async def background(worker: int) -> None:
            n = 0
            while not stop.is_set():
                if claiming:
                    key = f"r{round_}-busy{worker}-{n}"
                    await self.call("record_once", {"amount": 1, "idempotency_key": key})
                else:
                    await self.call("record_plain", {"amount": n})
                n += 1
                beside[0] += 1
                going.add(worker)
                if len(going) == self.busy:
                    all_going.set()

        async with anyio.create_task_group() as group:
            for worker in range(self.busy):
                group.start_soon(background, worker)
            await all_going.wait()  # each background caller has one call behind it
            loaded = await self.plain()
            stop.set()
        return {**loaded, "calls": loaded["calls"] + beside[0]}

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

        async def call_tool(tool: str, arguments: dict[str, object]) -> None:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content

        bench = Bench(call_tool, this_process_cpu_s, calls, max(in_flight))
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


# --- over stdio: the server as a host runs it ----------------------------------


def serve_stdio(backend: str) -> int:
    """The project's own command serving stdio (run in the project's environment by `--serve`),
    the bench's tools added to its tools/ package, on the data directory or PostgreSQL schema
    that BENCH_DATA_DIR and BENCH_DATABASE_URL name."""
    prefix = project.ENV_PREFIX
    os.environ[f"{prefix}DATA_DIR"] = os.environ["BENCH_DATA_DIR"]
    if os.environ.get("BENCH_DATABASE_URL"):
        os.environ[f"{prefix}DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]
    os.environ[f"{prefix}LOG_LEVEL"] = "warning"  # the per-call line is measured by bench_overhead
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "bench_records.py").write_text(TOOLS)
        project_module("tools").__path__.append(directory)
        with backend_store(backend):
            return int(project_module("cli").main([]))


def this_process_cpu_s() -> float:
    return time.process_time()


class StdioServer:
    """One project's server subprocess spoken to in JSON-RPC lines, any number of requests in
    flight; its CPU read from /proc."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: IO[str]) -> None:
        self.process = process
        self.stderr = stderr
        self.answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.threads: dict[str, int] = {}  # each thread's CPU nanoseconds, as last read
        self.reader = asyncio.ensure_future(self.read_answers())

    @classmethod
    async def start(
        cls, python: str, root: Path, backend: str, env: dict[str, str], stderr: IO[str]
    ) -> StdioServer:
        script = str(Path(__file__).resolve())
        process = await asyncio.create_subprocess_exec(
            python,
            script,
            "--serve",
            backend,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**env, "BENCH_PROJECT_ROOT": str(root)},
            limit=2**24,
        )
        server = cls(process, stderr)
        handshake = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench_idempotent_calls", "version": "1"},
        }
        await server.request("initialize", handshake)
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return server

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")

    async def read_answers(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            waiting = self.answers.pop(message.get("id"), None) if "method" not in message else None
            if waiting is not None:
                waiting.set_result(message)
        for waiting in self.answers.values():
            self.stderr.seek(0)
            waiting.set_exception(RuntimeError(f"the server exited:\n{self.stderr.read()[-3000:]}"))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.answers[request_id] = answer
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await answer

    async def call_tool(self, tool: str, arguments: dict[str, object]) -> None:
        answer = await self.request("tools/call", {"name": tool, "arguments": arguments})
        if "error" in answer or answer["result"].get("isError"):
            raise RuntimeError(f"{tool} failed: {answer}")

    def cpu_s(self) -> float:
        """CPU seconds of every thread the server has run, in nanoseconds (Linux schedstat). A thread
        that ended keeps the time last read for it, so the count never goes back: the sum over the
        live threads alone would drop when one of anyio's idle worker threads ends."""
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):  # it ended meanwhile
                self.threads[task.name] = int((task / "schedstat").read_text().split()[0])
        return sum(self.threads.values()) / 1e9

    async def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 60)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        await self.reader


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def server_env(files: contextlib.ExitStack, dsn: str | None) -> dict[str, str]:
    """A server's environment as a host passes it (no PYTHONUNBUFFERED), with a data directory
    and, in a PostgreSQL project, a schema of its own, removed when `files` closes."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    env["BENCH_DATA_DIR"] = files.enter_context(tempfile.TemporaryDirectory())
    if dsn:  # a PostgreSQL project's start-up asks for it, whichever store serves
        target = files.enter_context(postgres_target(dsn))
        assert target is not None
        env["BENCH_DATABASE_URL"] = target
    return env


async def stdio_rounds(
    sides: dict[str, tuple[str, Path]], backend: str, args: argparse.Namespace, in_flight: list[int]
) -> dict[str, list[dict[str, Row]]]:
    """Every row of every round on each side's server over stdio, alternating which goes first
    (A B B A ...), so that a busy machine slows both alike."""
    rounds: dict[str, list[dict[str, Row]]] = {side: [] for side in sides}
    with contextlib.ExitStack() as files:
        launches = {
            side: (
                python,
                root,
                server_env(files, args.dsn),
                files.enter_context(tempfile.TemporaryFile("w+")),
            )
            for side, (python, root) in sides.items()
        }
        async with contextlib.AsyncExitStack() as running:
            benches: dict[str, Bench] = {}
            for side, (python, root, env, stderr) in launches.items():
                server = await StdioServer.start(python, root, backend, env, stderr)
                running.push_async_callback(server.close)
                benches[side] = Bench(server.call_tool, server.cpu_s, args.calls, max(in_flight))
                await benches[side].warm_up()
            for round_ in range(args.rounds):
                for results in rounds.values():
                    results.append({})
                for index, name in enumerate(row_names(in_flight)):
                    order = list(benches) if (round_ + index) % 2 == 0 else list(reversed(benches))
                    for side in order:
                        rounds[side][-1][name] = await benches[side].measure(name, round_)
    return rounds


def over_stdio(args: argparse.Namespace, in_flight: list[int]) -> int:
    sides = {"this": (sys.executable, ROOT)}
    if args.against:
        other = Path(args.against).resolve()
        sides["other"] = (str(other_python(other)), other)
    backends = ["sqlite", "postgres"] if project.IDEMPOTENCY_BACKEND == "postgres" else ["sqlite"]
    described = ", ".join(f"{side} = {root} ({rendered_from(root)})" for side, (_, root) in sides.items())
    sys.stdout.write(
        f"{described}\n{args.calls} calls a row, over stdio (each server a subprocess, 2025-11-25);"
        f" {args.rounds} rounds; {os.cpu_count()} CPUs; the verdict is the server's CPU per call\n"
    )
    with contextlib.ExitStack() as stack:
        # One PostgreSQL for every server, a schema each (the other project may be a PostgreSQL one).
        if ("postgres" in backends or args.against) and not args.dsn:
            local = start_local_postgres(stack)
            args.dsn = None if local is None else local.dsn
        for backend in backends:
            if backend == "postgres" and not args.dsn:
                sys.stdout.write("\npostgres: skipped; pass --dsn or install pgserver\n")
                continue
            before = load()
            rounds = anyio.run(stdio_rounds, sides, backend, args, in_flight)
            sys.stdout.write(f"\n{backend}: {before} before, {load()} after\n")
            print_rounds(backend, rounds, "the server process (every thread)")
    return 0


def loaded_factor(rows: dict[str, Row], beside: str = " new keys") -> float:
    """A plain call's p99 while new keys (target: at most 2), or plain calls, run beside it, over
    its idle p99."""
    loaded = next(name for name in rows if name.startswith("plain beside") and name.endswith(beside))
    return rows[loaded]["p99"] / rows["plain, idle"]["p99"]


# The claim path's targets against release 0.2.0, as the other side's server CPU per call over this
# side's (how many of this side's calls the other's CPU would serve): (backend, row) -> least.
TARGETS: dict[tuple[str, str], float] = {
    ("sqlite", "new key x16"): 2.5,
    ("postgres", "new key x16"): 3.0,
    ("sqlite", "new key x1"): 1.0,
    ("postgres", "new key x1"): 1.0,
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


def print_rounds(backend: str, rounds: dict[str, list[dict[str, Row]]], cpu_of: str) -> None:
    """Each side's medians per row; beside another side, the ratios: CPU per call other/this
    (the verdict: the machine's load moves it least) and rate this/other, median [range] over rounds."""
    sides = list(rounds)
    head = f"{'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU µs':>7}"
    ratios = "  CPU other/this  rate this/other  target" if len(sides) == 2 else ""
    sys.stdout.write(
        f"{backend}: medians over {len(rounds[sides[0]])} rounds; CPU: {cpu_of}, per call\n"
        f"{'':<24}" + "".join(f" {side:^31}" for side in sides) + "\n"
        f"{'':<24}" + "".join(f" {head}" for _ in sides) + f"{ratios}\n"
    )
    for name in rounds[sides[0]][0]:
        cells = ""
        for side in sides:
            rate, p50, p99, cpu = (
                statistics.median(rows[name][key] for rows in rounds[side])
                for key in ("rate", "p50", "p99", "cpu")
            )
            cells += f" {rate:>8.0f} {p50 * 1e3:>7.2f} {p99 * 1e3:>7.2f} {cpu * 1e6:>7.0f}"
        if len(sides) == 2:
            this, other = rounds[sides[0]], rounds[sides[1]]
            cpu_ratio = [b[name]["cpu"] / a[name]["cpu"] for a, b in zip(this, other, strict=True)]
            rate_ratio = [a[name]["rate"] / b[name]["rate"] for a, b in zip(this, other, strict=True)]
            least = TARGETS.get((backend, name))
            verdict = ""
            if least is not None:
                verdict = f">= {least:g}x " + ("met" if statistics.median(cpu_ratio) >= least else "NOT met")
            cells += f" {spread(cpu_ratio):>17} {spread(rate_ratio):>16}  {verdict}"
        sys.stdout.write(f"{name:<24}{cells}\n")
    for beside, target in ((" new keys", " (target: at most 2x)"), (" plain calls", "")):
        factors = ", ".join(
            f"{side} {spread([loaded_factor(r, beside) for r in each])}x" for side, each in rounds.items()
        )
        sys.stdout.write(f"plain p99 beside{beside} / idle: {factors}{target}\n")


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


def other_python(other: Path) -> Path:
    python = other / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: run `uv sync`, `uv pip install -e '.[dev]'` in {other}")
    return python


def against(args: argparse.Namespace, in_flight: list[int]) -> int:
    other = Path(args.against).resolve()
    sides = {"this": (sys.executable, ROOT), "other": (str(other_python(other)), other)}
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
            print_rounds(backend, rounds, "each worker process, client included")
    return 0


def main(argv: list[str]) -> int:
    prefix = project.ENV_PREFIX
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=600, help="calls a row (plain rows: twice as many)")
    parser.add_argument("--in-flight", default="1,4,8,16", help="calls in flight, comma-separated")
    parser.add_argument("--dsn", default=os.environ.get(f"{prefix}DATABASE_URL"), help="postgres projects")
    parser.add_argument("--against", metavar="DIR", help="another checkout of this project, with its .venv")
    parser.add_argument("--rounds", type=int, default=8, help="with --against: rounds of every row")
    parser.add_argument(
        "--transport",
        choices=["stdio", "memory"],
        default="stdio",
        help="stdio: each server a subprocess, as a host runs it (default); memory: in-process",
    )
    parser.add_argument("--worker", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    parser.add_argument("--serve", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve_stdio(args.serve)
    in_flight = sorted({int(n) for n in args.in_flight.split(",")})
    if not in_flight or min(in_flight) < 1 or args.calls < max(in_flight) or args.rounds < 1:
        parser.error("--in-flight counts and --rounds must be at least 1, --calls at least the largest count")
    os.environ[f"{prefix}LOG_LEVEL"] = "warning"  # the per-call line is measured by bench_overhead
    if args.worker:
        result = measure(args.worker, args.calls, in_flight, args.dsn, worker=True)
        if "skipped" in result:
            answer(result)
        return 0
    if args.transport == "stdio":
        return over_stdio(args, in_flight)
    if args.against:
        return against(args, in_flight)
    sys.stdout.write(f"{args.calls} calls a row, in memory; {os.cpu_count()} CPUs\n")
    for backend in ["sqlite", "postgres"] if project.IDEMPOTENCY_BACKEND == "postgres" else ["sqlite"]:
        result = measure(backend, args.calls, in_flight, args.dsn, worker=False)
        if "skipped" in result:
            sys.stdout.write(f"\n{backend}: skipped; {result['skipped']}\n")
            continue
        sys.stdout.write(f"\n{result['where']}\n")
        print_rounds(backend, {"this": [result["rows"]]}, "this process, client included")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
