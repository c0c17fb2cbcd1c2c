"""Durable tasks: what creating one costs against a call, tasks/get, and a server holding many.

    python benchmarks/bench_tasks.py [--backend sqlite|postgres|both] [--rounds 6] [--batch 200]
        [--in-flight 1000] [--finished 10000] [--skip-many] [--dsn DSN] [--json FILE]

The stand-in project's real server over stdio, each request in the 2026-07-28 envelope with
the tasks extension declared in its `_meta` (a plain call leaves it out), with the tools of
benchmarks/task_tools beside the project's: `bench_echo` (read-only) and `bench_charge`
(side_effect=True, a new idempotency key each call), both `task_support="optional"`, and
`bench_wait`, a task body that waits for `bench_release`. Per backend (SQLite; PostgreSQL
with `--backend postgres|both`, the default in a PostgreSQL project, on `--dsn` or a
throwaway pgserver):

1. Creation. Each of `--rounds` rounds sends a batch of each kind to one server, the order
   flipping every round: a call of each tool, a task of each tool (its body's run, its end
   written, included: the batch ends when its last task is terminal), and tasks/get of a
   finished task. Verdict statistic: the server process's CPU per request (schedstat), and
   each round's ratio task/call, as the median with its range over rounds.
2. Durable writes. One more batch of each kind under strace (tasks one at a time, each to its
   end), counting fsync and fdatasync: of the server process (SQLite: a commit at
   `synchronous = FULL` syncs the WAL), or of every PostgreSQL process (a commit with
   `synchronous_commit = on` syncs the WAL).
3. Many tasks. Two servers on stores of their own: one idle, one loaded with `--finished`
   tasks kept (finished) and then `--in-flight` tasks whose bodies wait. Rounds of plain calls
   alternate between them: the p99 of each batch's latency (client side), its ratio
   loaded/idle per round, and CPU per call. RSS of the loaded server at each step gives the
   memory each task costs. Its CPU over a quiet spell of a few seconds beside the idle one's
   is what the watch loop costs with that many tasks.

Figures to compare, not pass/fail: the verdicts against DESIGN.md's targets are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from resilient_mcp.commands.diagnose import (
    MODERN,
    RawStdioSession,
    open_session,
    unbuffered_free_env,
    with_envelope,
)
from resilient_mcp.tasks.wire import EXTENSION, REQUEST_CAPABILITIES
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND

sys.path.insert(0, str(Path(__file__).parent))
from bench_idempotency_store import LocalPostgres, postgres_schema, start_local_postgres
from bench_overhead import process_cpu_s, process_rss_mb

Backend = Literal["sqlite", "postgres"]
HERE = Path(__file__).resolve().parent
TASK_TOOLS = HERE / "task_tools"
LAUNCHER = HERE.parent / "tests" / "launch_with_tools.py"  # the project's command, with extra tools
BACKEND_VARIABLE = "SAMPLE_PROJECT_BACKEND"
TIMEOUT_S = 120.0  # one request's answer, on a loaded machine
TERMINAL = ("completed", "failed", "cancelled")
QUIET_S = 5.0  # the spell over which a server's CPU at rest is read
# DESIGN.md "Performance, reliability and scale", Tasks.
GET_TARGET_MS = 1.0  # tasks/get: well under a millisecond of server CPU
EXTRA_DURABLE_TARGET = 1.0  # creating a task: at most one durable write more than the call


def tasks_params(params: dict[str, Any], *, declared: bool = True) -> dict[str, Any]:
    """2026-07-28 request params, the tasks extension declared for this request alone."""
    enveloped = with_envelope(MODERN, params)
    if declared:
        capabilities = enveloped["_meta"].setdefault(REQUEST_CAPABILITIES, {})
        capabilities.setdefault("extensions", {})[EXTENSION] = {}
    return enveloped


class Server:
    """One server process over stdio, past its 2026-07-28 discovery."""

    def __init__(self, env: dict[str, str]) -> None:
        self.session = RawStdioSession([sys.executable, str(LAUNCHER), str(TASK_TOOLS), "serve"], env=env)
        answer = open_session(self.session, MODERN, timeout=TIMEOUT_S)
        if "result" not in answer:
            self.session.close(timeout=5)
            raise SystemExit("the server did not start:\n" + "\n".join(self.session.stderr_tail()))
        self.keys = 0

    @property
    def pid(self) -> int:
        return self.session.process.pid

    def cpu_s(self) -> float:
        return process_cpu_s(self.pid)

    def rss_mb(self) -> float:
        return process_rss_mb(self.pid)

    def request(self, method: str, params: dict[str, Any], *, declared: bool = True) -> dict[str, Any]:
        answer = self.session.request(method, tasks_params(params, declared=declared), timeout=TIMEOUT_S)
        result = answer.get("result")
        if not isinstance(result, dict) or result.get("isError"):
            raise SystemExit(f"{method} {params} was answered {answer}")
        return result

    def call(self, tool: str, *, task: bool) -> dict[str, Any]:
        """A call (task False) or a task (True) of a tool, with a new key for bench_charge."""
        arguments: dict[str, Any] = {"n": 1}
        if tool == "bench_charge":
            self.keys += 1
            arguments["idempotency_key"] = f"bench-{os.getpid()}-{self.pid}-{self.keys}"
        result = self.request("tools/call", {"name": tool, "arguments": arguments}, declared=task)
        if task and result.get("resultType") != "task":
            raise SystemExit(f"{tool} did not become a task: {result}")
        return result

    def get(self, task_id: str) -> dict[str, Any]:
        return self.request("tasks/get", {"taskId": task_id})

    def until_terminal(self, task_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            got = self.get(task_id)
            if got["status"] in TERMINAL:
                return got
            time.sleep(0.01)
        raise SystemExit(f"task {task_id} still not finished after {TIMEOUT_S:g} s")

    def close(self) -> None:
        self.session.close(timeout=10)


@dataclass
class Kind:
    """One kind of request in the creation rounds: how to send a batch of it."""

    name: str
    send: Callable[[Server, int], None]


def batch_of_calls(tool: str) -> Callable[[Server, int], None]:
    def send(server: Server, n: int) -> None:
        for _ in range(n):
            server.call(tool, task=False)

    return send


def batch_of_tasks(tool: str) -> Callable[[Server, int], None]:
    def send(server: Server, n: int) -> None:
        last = ""
        for _ in range(n):
            last = server.call(tool, task=True)["taskId"]
        for_each = server.until_terminal(last)  # the bodies ran meanwhile: the batch is whole
        if for_each["status"] != "completed":
            raise SystemExit(f"a {tool} task ended {for_each}")

    return send


def batch_of_gets(task_id: str) -> Callable[[Server, int], None]:
    def send(server: Server, n: int) -> None:
        for _ in range(n):
            server.get(task_id)

    return send


def creation_kinds(server: Server) -> list[Kind]:
    finished = server.call("bench_echo", task=True)["taskId"]
    server.until_terminal(finished)
    return [
        Kind("call bench_echo", batch_of_calls("bench_echo")),
        Kind("task bench_echo", batch_of_tasks("bench_echo")),
        Kind("call bench_charge", batch_of_calls("bench_charge")),
        Kind("task bench_charge", batch_of_tasks("bench_charge")),
        Kind("tasks/get", batch_of_gets(finished)),
    ]


def cpu_per_request(server: Server, kind: Kind, n: int) -> float:
    before = server.cpu_s()
    kind.send(server, n)
    return (server.cpu_s() - before) / n


# --- durable writes: fsync and fdatasync, counted by strace ------------------------------------


def postgres_pids(local: LocalPostgres) -> list[int]:
    """The postmaster and its children (backends, WAL writer, checkpointer...)."""
    postmaster = local.postmaster_pid()
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return [postmaster, *(int(pid) for pid in children)]


@contextlib.contextmanager
def syncs_counted(pids: list[int]) -> Iterator[list[int]]:
    """Count fsync and fdatasync of these processes (and their threads) while the block runs;
    the count is appended to the list yielded once the block ends."""
    counted: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-strace-") as folder:
        out = Path(folder) / "syncs"
        command = ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(out)]
        for pid in pids:
            command += ["-p", str(pid)]
        tracer = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not all(tracer_of(pid) == tracer.pid for pid in pids if Path(f"/proc/{pid}").exists()):
                if tracer.poll() is not None or time.monotonic() > deadline:
                    error = tracer.stderr.read().decode() if tracer.stderr else ""
                    raise OSError(f"strace could not attach: {error.strip()}")
                time.sleep(0.01)
            yield counted
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=30)
        lines = out.read_text().splitlines() if out.exists() else []
        counted.append(sum(1 for line in lines if "sync(" in line and "resumed" not in line))


def tracer_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


# --- the bench ----------------------------------------------------------------------------------


@dataclass
class Figures:
    backend: str
    rounds: int
    batch: int
    cpu_us: dict[str, list[float]] = field(default_factory=dict)  # kind -> per round
    syncs_per_request: dict[str, float | None] = field(default_factory=dict)
    syncs_note: str = ""
    plain_p99_ms: dict[str, list[float]] = field(default_factory=dict)  # idle / loaded -> per round
    plain_p50_ms: dict[str, list[float]] = field(default_factory=dict)
    plain_cpu_us: dict[str, list[float]] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)
    quiet_cpu_ms_per_s: dict[str, float] = field(default_factory=dict)
    load_s: dict[str, float] = field(default_factory=dict)
    in_flight: int = 0
    finished: int = 0


@contextlib.contextmanager
def stores(
    backend: Backend, count: int, dsn: str | None
) -> Iterator[tuple[list[dict[str, str]], LocalPostgres | None]]:
    """`count` stores of their own (data directories; PostgreSQL schemas too), as server settings."""
    with contextlib.ExitStack() as stack:
        made = (tempfile.TemporaryDirectory(prefix="bench-tasks-") for _ in range(count))
        folders = [Path(stack.enter_context(folder)) for folder in made]
        settings = [
            {
                f"{ENV_PREFIX}DATA_DIR": str(folder / "data"),
                BACKEND_VARIABLE: backend,
                f"{ENV_PREFIX}MAX_TASKS_PER_CALLER": "1000000",
            }
            for folder in folders
        ]
        local = None
        if backend == "postgres":
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            if not dsn:
                local = start_local_postgres(stack)
                if local is None:
                    raise SystemExit("no PostgreSQL: pass --dsn, or install pgserver or PostgreSQL")
                dsn = local.dsn
            for one in settings:
                target = stack.enter_context(postgres_schema(dsn))
                assert target is not None
                one[f"{ENV_PREFIX}DATABASE_URL"] = target.dsn
        yield settings, local


def creation(backend: Backend, args: argparse.Namespace, figures: Figures) -> None:
    with stores(backend, 1, args.dsn) as (settings, local):
        server = Server(unbuffered_free_env(settings[0]))
        try:
            kinds = creation_kinds(server)
            for kind in kinds:  # warm: every path imported and its statements prepared
                kind.send(server, 20)
            for round_ in range(args.rounds):
                order = kinds if round_ % 2 == 0 else kinds[::-1]
                for kind in order:
                    per_request = cpu_per_request(server, kind, args.batch)
                    figures.cpu_us.setdefault(kind.name, []).append(1e6 * per_request)
            pids = [server.pid] if local is None else postgres_pids(local)
            if backend == "postgres" and local is None:
                figures.syncs_note = "PostgreSQL given by --dsn: its processes cannot be traced"
                return
            n = max(20, args.batch // 4)
            for kind in kinds:
                # Tasks one at a time, each to its end: concurrent runs would share PostgreSQL's
                # WAL flushes (group commit) and hide a write.
                send = batch_of_tasks(kind.name.split()[1]) if kind.name.startswith("task ") else kind.send
                try:
                    with syncs_counted(pids) as counted:
                        for _ in range(n):
                            send(server, 1)
                except OSError as exc:
                    figures.syncs_note = str(exc)
                    return
                figures.syncs_per_request[kind.name] = counted[0] / n
        finally:
            server.close()


def many_tasks(backend: Backend, args: argparse.Namespace, figures: Figures) -> None:
    figures.in_flight, figures.finished = args.in_flight, args.finished
    with stores(backend, 2, args.dsn) as (settings, _):
        idle, loaded = Server(unbuffered_free_env(settings[0])), Server(unbuffered_free_env(settings[1]))
        try:
            for server in (idle, loaded):
                for _ in range(50):
                    server.call("bench_echo", task=False)
            figures.rss_mb["idle server"] = idle.rss_mb()
            figures.rss_mb["loaded, at start"] = loaded.rss_mb()
            started = time.monotonic()
            last = ""
            for _ in range(args.finished):
                last = loaded.call("bench_echo", task=True)["taskId"]
            loaded.until_terminal(last)
            figures.load_s["finished tasks created"] = time.monotonic() - started
            figures.rss_mb["loaded, finished kept"] = loaded.rss_mb()
            started = time.monotonic()
            waiting = [loaded.call("bench_wait", task=True)["taskId"] for _ in range(args.in_flight)]
            figures.load_s["waiting tasks created"] = time.monotonic() - started
            figures.rss_mb["loaded, in flight too"] = loaded.rss_mb()
            if loaded.get(waiting[0])["status"] != "working":
                raise SystemExit("a waiting task is not working")
            for name, server in (("idle", idle), ("loaded", loaded)):
                before = server.cpu_s()
                time.sleep(QUIET_S)  # a server at rest: what its loops cost while nothing is asked
                figures.quiet_cpu_ms_per_s[name] = 1e3 * (server.cpu_s() - before) / QUIET_S
            for round_ in range(args.rounds):
                pair = (("idle", idle), ("loaded", loaded))
                for name, server in pair if round_ % 2 == 0 else pair[::-1]:
                    latencies = []
                    before = server.cpu_s()
                    for _ in range(args.batch):
                        sent = time.perf_counter()
                        server.call("bench_echo", task=False)
                        latencies.append(time.perf_counter() - sent)
                    cpu_us = 1e6 * (server.cpu_s() - before) / args.batch
                    figures.plain_cpu_us.setdefault(name, []).append(cpu_us)
                    latencies.sort()
                    figures.plain_p99_ms.setdefault(name, []).append(1e3 * quantile(latencies, 0.99))
                    figures.plain_p50_ms.setdefault(name, []).append(1e3 * quantile(latencies, 0.50))
            loaded.call("bench_release", task=False)
            ended = loaded.until_terminal(waiting[-1])
            if ended["status"] != "completed":
                raise SystemExit(f"a waiting task ended {ended}")
            figures.rss_mb["loaded, all finished"] = loaded.rss_mb()
        finally:
            idle.close()
            loaded.close()


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float], digits: int = 0) -> str:
    """Median [min-max]."""
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def ratios(top: list[float], bottom: list[float]) -> list[float]:
    return [a / b for a, b in zip(top, bottom, strict=True) if b]


def report(f: Figures) -> str:
    cpu = f.cpu_us
    lines = [f"\n{f.backend}: {f.rounds} rounds of {f.batch} requests per kind (server CPU, µs per request)"]
    for name, values in cpu.items():
        syncs = f.syncs_per_request.get(name)
        shown = "-" if syncs is None else f"{syncs:.2f}"
        lines.append(f"  {name:<20} {spread(values):>22}   fsyncs per request {shown}")
    if f.syncs_note:
        lines.append(f"  (durable writes not counted: {f.syncs_note})")
    for tool in ("bench_echo", "bench_charge"):
        task, call = cpu.get(f"task {tool}", []), cpu.get(f"call {tool}", [])
        lines.append(f"  task/call {tool:<13} {spread(ratios(task, call), 2)}x")
        s_task, s_call = f.syncs_per_request.get(f"task {tool}"), f.syncs_per_request.get(f"call {tool}")
        if s_task is not None and s_call is not None:
            extra = s_task - s_call
            # A WAL checkpoint's fsync now and then lands in a batch: whole writes are compared.
            verdict = "met" if round(extra) <= EXTRA_DURABLE_TARGET else "MISSED"
            lines.append(f"    durable writes more than the call: {extra:.2f} (target at most 1: {verdict})")
    gets = cpu.get("tasks/get", [])
    if gets:
        verdict = "met" if statistics.median(gets) <= GET_TARGET_MS * 1000 / 2 else "MISSED"
        median = statistics.median(gets)
        lines.append(f"  tasks/get {median:.0f} µs (target well under 1 ms, at most 0.5: {verdict})")
        lines.append(f"  tasks/get / call bench_echo {spread(ratios(gets, cpu['call bench_echo']), 2)}x")
    if f.plain_p99_ms:
        lines.append(
            f"  many tasks: {f.finished} finished kept, then {f.in_flight} in flight (bodies waiting);"
            f" created in {f.load_s.get('finished tasks created', 0):.0f} s and"
            f" {f.load_s.get('waiting tasks created', 0):.0f} s"
        )
        for name in ("idle", "loaded"):
            lines.append(
                f"  plain call, {name:<6} p50 {spread(f.plain_p50_ms[name], 2)} ms"
                f"  p99 {spread(f.plain_p99_ms[name], 2)} ms  CPU {spread(f.plain_cpu_us[name])} µs"
            )
        p99 = ratios(f.plain_p99_ms["loaded"], f.plain_p99_ms["idle"])
        lines.append(
            f"  p99 loaded/idle {spread(p99, 2)}x; CPU loaded/idle"
            f" {spread(ratios(f.plain_cpu_us['loaded'], f.plain_cpu_us['idle']), 2)}x"
        )
        rss = f.rss_mb
        per_finished = 1e6 * (rss["loaded, finished kept"] - rss["loaded, at start"]) / max(1, f.finished)
        per_flight = 1e6 * (rss["loaded, in flight too"] - rss["loaded, finished kept"]) / max(1, f.in_flight)
        lines.append(
            "  RSS MB: "
            + ", ".join(f"{name} {value:.1f}" for name, value in rss.items())
            + f"; per finished task kept {per_finished / 1e3:.2f} kB,"
            f" per task in flight {per_flight / 1e3:.1f} kB"
        )
        lines.append(
            "  at rest, CPU ms per s: " + ", ".join(f"{n} {v:.2f}" for n, v in f.quiet_cpu_ms_per_s.items())
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    default_backend = "both" if IDEMPOTENCY_BACKEND == "postgres" else "sqlite"
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "both"],
        default=default_backend,
        help=f"store(s) to measure (default here: {default_backend}; both in a PostgreSQL project)",
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds per comparison (default: 6)")
    parser.add_argument("--batch", type=int, default=200, help="requests per kind and round (default: 200)")
    parser.add_argument("--in-flight", type=int, default=1000, help="tasks whose bodies wait (default: 1000)")
    parser.add_argument("--finished", type=int, default=10000, help="finished tasks kept (default: 10000)")
    parser.add_argument("--skip-many", action="store_true", help="only the creation and tasks/get rounds")
    dsn = os.environ.get(f"{ENV_PREFIX}DATABASE_URL")
    parser.add_argument("--dsn", default=dsn, help="PostgreSQL to use (default: a throwaway pgserver)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures to FILE as JSON")
    args = parser.parse_args(argv)
    backends: list[Backend] = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    load = os.getloadavg()
    sys.stdout.write(
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()};"
        f" load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start\n"
    )
    everything = []
    started = time.monotonic()
    for backend in backends:
        figures = Figures(backend, args.rounds, args.batch)
        creation(backend, args, figures)
        if not args.skip_many:
            many_tasks(backend, args, figures)
        sys.stdout.write(report(figures))
        sys.stdout.flush()
        everything.append(figures)
    load = os.getloadavg()
    sys.stdout.write(
        f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end;"
        f" wall {time.monotonic() - started:.0f} s\n"
    )
    if args.json is not None:
        args.json.write_text(json.dumps([vars(f) for f in everything], indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
