"""What the resilience layers cost: this server against the bare SDK and FastMCP.

    python benchmarks/bench_overhead.py [--rounds 15] [--batch 200] [--calls 5000] [--json PATH]
                                        [--fastmcp-path DIR]

The same ten tools (three described parameters each) are served by a bare `MCPServer`,
by the server `create_server` builds (strict validation, the call wrapper with its time
limit and retries, one JSON log line per call at the default level, info) and, when
FastMCP is installed in `--fastmcp-path` (`nox -s bench` puts it there) or here, by
FastMCP twice: plain (`fastmcp`), and with its error handling, retry, structured logging
and timing middlewares (`fastmcp_mw`, plain log lines, not Rich). FastMCP belongs in a
directory of its own: it brings Rich, which structlog loads whenever it is importable, so
in this environment it would make this server heavier than it is anywhere else.
Every comparison alternates between the servers within one run, so all see the same
machine, and reports ratios to the bare SDK:

- per call in memory, through the SDK's Client, in both protocol eras (targets: at most
  1.06x the bare SDK in 2026-07-28, 1.04x in 2025-11-25, the line kept); CPU is this
  whole process's, client included. The row `no-line` is this same server with its one
  line per call turned off (LOG_LEVEL=warning): what the line costs. Beside them, what one
  line's write costs on this machine: into a pipe whose reader sleeps until a line comes, as
  a host's does, and into the null device (the difference is the reader's wake-up);
- per call over real stdio, as an MCP host sees it, in both eras (target: at most 0.60x);
  CPU is the server process's alone. With the `otel` extra installed, the rows `metrics`
  (METRICS=true, scraped by nobody) and `otlp` (traces and metrics exported over OTLP/HTTP to a
  receiver in this process that answers 200) are this server with telemetry on: what it costs;
- tools/list: the bytes of the answer as compact JSON, the wire's form;
- memory: the server process's RSS after start-up and after `--calls` calls over stdio.

Each round runs one batch per server, in an order that flips every round. The verdict is one
statistic, CPU: the median over rounds of the round's CPU ratio to the bare SDK, with its range
(wall times move with whatever else the machine does; they are shown, as medians, beside it).
Over stdio a server's CPU is read from /proc/<pid>/task/*/schedstat (nanoseconds; Linux), so a
batch of a few milliseconds is measured, not rounded to the 10 ms ticks of /proc/<pid>/stat.
Start-up time has its own benchmark, bench_startup.py. `--json PATH` writes every figure, so
two commits can be compared. In memory, the log lines go to a pipe on stderr that another
process reads and drops, as a host reads a server's stderr (serving's own stderr writer on
it); --keep-stderr shows them. Over stdio they go to a pipe that is read and dropped.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp import Client

from resilient_mcp.commands.diagnose import (
    LEGACY,
    MODERN,
    Era,
    RawStdioSession,
    ServerClosed,
    open_session,
    unbuffered_free_env,
    with_envelope,
)
from sample_server.project import ENV_PREFIX, PACKAGE

# This server / the bare SDK, per call, CPU (median of the rounds); in memory with its line kept.
IN_MEMORY_TARGETS: dict[Era, float] = {MODERN: 1.06, LEGACY: 1.04}
OVER_STDIO_TARGETS: dict[Era, float] = {MODERN: 0.60, LEGACY: 0.60}
NO_LINE = "no-line"  # in memory: this server again, at a level that drops its per-call line
CLIENT_MODES: dict[Era, Literal["auto", "legacy"]] = {MODERN: "auto", LEGACY: "legacy"}
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
Figures = dict[str, dict[str, Any]]  # server -> figure -> value

# Ten tools with three described parameters each, written once; each server adds its decorator.
TOOL_BODIES = '''
async def add(
    a: Annotated[int, Field(description="The first number to add")],
    b: Annotated[int, Field(description="The second number to add")],
    c: Annotated[int, Field(description="A third number, zero when left out")] = 0,
) -> int:
    """Add two or three integers."""
    return a + b + c
''' + "".join(
    f'''

async def lookup_{n}(
    key: Annotated[str, Field(description="The record's key, as the catalogue spells it")],
    limit: Annotated[int, Field(description="How many matching records to return at most")] = 10,
    exact: Annotated[bool, Field(description="Match the key exactly rather than as a prefix")] = False,
) -> str:
    """Look records up in catalogue {n} by key."""
    return key + ":" + str(limit) + ":" + str(exact)
'''
    for n in range(1, 10)
)
IMPORTS = "from typing import Annotated\n\nfrom pydantic import Field\n"
SDK_DECORATOR = "@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))"
SERVERS = {
    "bare": f"""{IMPORTS}from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("bare")
TOOLS

if __name__ == "__main__":
    mcp.run()
""",
    "fastmcp": f"""{IMPORTS}from fastmcp import FastMCP
from mcp.types import ToolAnnotations

mcp = FastMCP("fastmcp")
TOOLS

if __name__ == "__main__":
    mcp.run(show_banner=False)
""",
    "fastmcp_mw": f"""{IMPORTS}from fastmcp import FastMCP
from fastmcp.server.middleware.error_handling import ErrorHandlingMiddleware, RetryMiddleware
from fastmcp.server.middleware.logging import StructuredLoggingMiddleware
from fastmcp.server.middleware.timing import TimingMiddleware
from mcp.types import ToolAnnotations

mcp = FastMCP("fastmcp")
mcp.add_middleware(ErrorHandlingMiddleware())
mcp.add_middleware(RetryMiddleware())
mcp.add_middleware(StructuredLoggingMiddleware())
mcp.add_middleware(TimingMiddleware())
TOOLS

if __name__ == "__main__":
    mcp.run(show_banner=False)
""",
}
RENDERED_TOOLS = f"{IMPORTS}\nfrom {PACKAGE}.core import tool\nTOOLS"
# `python -m <package>` serving the benchmark's tools in place of the project's own.
LAUNCHER = f"""import sys

import {PACKAGE}.tools
from {PACKAGE}.cli import main

{PACKAGE}.tools.__path__[:] = [sys.argv[1]]
raise SystemExit(main([]))
"""


def is_fastmcp(name: str) -> bool:
    return name.startswith("fastmcp")


def with_decorator(template: str, decorator: str) -> str:
    return template.replace("TOOLS", TOOL_BODIES.replace("\nasync def ", f"\n{decorator}\nasync def "))


def fastmcp_version(path: Path | None) -> str | None:
    """FastMCP's version in `path`, or in this environment when `path` is None; None if absent."""
    found = importlib.metadata.distributions(name="fastmcp", path=[str(path)] if path else sys.path)
    return next((dist.version for dist in found), None)


class Workdir:
    """The temporary files the servers are built from, and their stdio commands.

    FastMCP's server appends `fastmcp_path` to its own `sys.path`, last, so that what the
    environment has (the SDK, pydantic) still comes from the environment.
    """

    def __init__(self, root: Path, *, fastmcp: bool, fastmcp_path: Path | None = None) -> None:
        self.root = root
        self.tools = root / "bench_tools"
        self.tools.mkdir()
        (self.tools / "__init__.py").write_text("")
        (self.tools / "catalogue.py").write_text(with_decorator(RENDERED_TOOLS, "@tool(read_only=True)"))
        self.subjects = ["bare", "rendered", *(["fastmcp", "fastmcp_mw"] if fastmcp else [])]
        for name, template in SERVERS.items():
            if name in self.subjects:
                if is_fastmcp(name) and fastmcp_path is not None:
                    template = f"import sys\n\nsys.path.append({str(fastmcp_path)!r})\n{template}"
                (root / f"{name}_server.py").write_text(with_decorator(template, SDK_DECORATOR))
        self.launcher = root / "launch.py"
        self.launcher.write_text(LAUNCHER)
        # A copy of the rendered server may join under another name (e.g. another commit's).
        self.commands: dict[str, list[str]] = {
            name: [sys.executable, str(root / f"{name}_server.py")] for name in self.subjects
        }
        self.commands["rendered"] = [sys.executable, str(self.launcher), str(self.tools)]

    def import_module(self, name: str) -> Any:
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        return importlib.import_module(name)


@dataclass
class Samples:
    """Wall and CPU microseconds per call of each round's batch, in round order."""

    wall_us: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)

    def add(self, wall_s: float, cpu_s: float, calls: int) -> None:
        self.wall_us.append(wall_s / calls * 1e6)
        self.cpu_us.append(cpu_s / calls * 1e6)

    def figures(self) -> dict[str, Any]:
        return {
            "wall_us": statistics.median(self.wall_us),
            "cpu_us": statistics.median(self.cpu_us),
            "cpu_us_rounds": self.cpu_us,
        }


# --- in memory ----------------------------------------------------------------


def build_servers(workdir: Workdir) -> dict[str, Any]:
    from resilient_mcp.server.app import create_server
    from resilient_mcp.server.startup import load_settings
    from sample_server.settings import Settings

    # This server first: structlog, which it imports, would load Rich once FastMCP's is importable.
    tools = workdir.import_module(workdir.tools.name)
    rendered = create_server(load_settings(Settings), tools)
    servers = {
        name: workdir.import_module(f"{name}_server").mcp for name in workdir.subjects if name != "rendered"
    }
    return {**servers, "rendered": rendered}


@asynccontextmanager
async def connect(name: str, server: Any, mode: Literal["auto", "legacy"]) -> AsyncIterator[Any]:
    """The SDK's Client connected in-process to one server."""
    if not is_fastmcp(name):
        async with Client(server, mode=mode) as client:
            yield client
        return
    # FastMCP serves through the SDK's low-level Server, inside its own lifespan.
    async with server._lifespan_manager(), Client(server._mcp_server, mode=mode) as client:
        yield client


async def memory_batch(client: Any, calls: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process) of one batch of calls."""
    cpu, started = time.process_time(), time.perf_counter()
    for n in range(calls):
        result = await client.call_tool("add", {"a": n, "b": 1})
        if result.is_error:
            raise RuntimeError(f"the benchmark tool failed: {result.content}")
    return time.perf_counter() - started, time.process_time() - cpu


@contextmanager
def log_level_of(name: str) -> Iterator[None]:
    """The `NO_LINE` batches run at level warning, as LOG_LEVEL=warning would serve."""
    if name != NO_LINE:
        yield
        return
    from resilient_mcp.telemetry.logs import configure_logging

    configure_logging("warning")
    try:
        yield
    finally:
        configure_logging("info")


# The host's side of the pipe, in a process of its own as under a real host: a reader thread in
# this process would take the GIL from the server at every line it reads.
PIPE_READER = """
import os, sys
keep, lines = sys.argv[1] == "keep", 0
while chunk := os.read(0, 1 << 16):
    lines += chunk.count(b"\\n")
    if keep:
        os.write(2, chunk)
print(lines, flush=True)
"""


@contextmanager
def stderr_into_pipe(keep: bool) -> Iterator[list[int]]:
    """fd 2 becomes a pipe that another process reads (and drops, unless `keep`), as an MCP host does.

    sys.stderr is then what serving makes it (`protect_stderr`), so
    the in-memory line costs what it costs a served call: formatted, then written to a pipe.
    Yields the number of lines read, known once the block ends.
    """
    from resilient_mcp.telemetry.stderr_writer import protect_stderr

    read_end, write_end = os.pipe()
    real_stderr, real_stream = os.dup(2), sys.stderr
    lines = [0]
    reader = subprocess.Popen(
        [sys.executable, "-c", PIPE_READER, "keep" if keep else "drop"],
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=real_stderr,
    )
    os.close(read_end)
    real_stream.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    protect_stderr()
    try:
        yield lines
    finally:
        sys.stderr.flush()
        os.dup2(real_stderr, 2)  # the pipe's last write end closes: the reader sees its end
        output, _ = reader.communicate(timeout=30)
        lines[0] = int(output or 0)
        os.close(real_stderr)
        sys.stderr = real_stream


def line_write_cost(lines: int = 1000, busy_s: float = 0.0002) -> dict[str, float]:
    """CPU of this process, in us, to write one line of a call's size (190 bytes) while it is busy,
    as a serving loop is: into a pipe whose reader, another process, sleeps until a line comes (as
    an MCP host's does), and into the null device. The difference is the reader's wake-up, which
    each call's line pays on this machine whatever the server does.

    The line's own cost, as serving writes it: through the stderr writer's fast path (one
    non-blocking write, `line_fast_us`) and through its plain twin (a lock, a poll for room, a
    write: `line_plain_us`, what every line cost before the fast path), each into a pipe of its
    own whose reader sleeps.
    """
    from resilient_mcp.telemetry.stderr_writer import NonBlockingStderr

    line = b"x" * 189 + b"\n"
    null = os.open(os.devnull, os.O_WRONLY)
    readers, pipes = [], []
    for _ in range(3):
        read_end, write_end = os.pipe()
        readers.append(
            subprocess.Popen(
                [sys.executable, "-c", PIPE_READER, "drop"], stdin=read_end, stdout=subprocess.PIPE
            )
        )
        os.close(read_end)
        pipes.append(write_end)
    fast, plain = NonBlockingStderr(pipes[1]), NonBlockingStderr(pipes[2], nowait=False)
    writes: dict[str, Callable[[bytes], object]] = {
        "pipe_reader_asleep_us": functools.partial(os.write, pipes[0]),
        "null_device_us": functools.partial(os.write, null),
        "line_fast_us": fast.write_bytes,
        "line_plain_us": plain.write_bytes,
    }
    spent = dict.fromkeys(writes, 0)
    try:
        for _ in range(lines):
            for name, write in writes.items():
                busy_until = time.perf_counter() + busy_s  # busy meanwhile: the reader reads, then sleeps
                while time.perf_counter() < busy_until:
                    pass
                started = time.thread_time_ns()
                write(line)
                spent[name] += time.thread_time_ns() - started
    finally:
        fast.flush()
        plain.flush()
        for fd in (*pipes, null):
            os.close(fd)
        for reader in readers:
            reader.communicate(timeout=30)
    return {name: total / lines / 1e3 for name, total in spent.items()}


async def per_call_in_memory(rounds: int, batch: int, workdir: Workdir) -> dict[Era, Figures]:
    """Per-call figures by era and server, the servers measured in turn each round."""
    servers = build_servers(workdir)
    figures: dict[Era, Figures] = {}
    for era, mode in CLIENT_MODES.items():
        async with AsyncExitStack() as stack:
            clients = {
                name: await stack.enter_async_context(connect(name, s, mode)) for name, s in servers.items()
            }
            clients[NO_LINE] = clients["rendered"]
            for name, client in clients.items():  # warm up: imports, caches, first-call paths
                with log_level_of(name):
                    await memory_batch(client, batch)
            samples = {name: Samples() for name in clients}
            order = list(clients)
            for _ in range(rounds):
                order.reverse()  # no server always goes first
                for name in order:
                    with log_level_of(name):
                        samples[name].add(*await memory_batch(clients[name], batch), batch)
            figures[era] = {name: s.figures() for name, s in samples.items()}
    await servers["rendered"].store.close()
    return figures


# --- over stdio ---------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a running process's live threads, in nanoseconds (Linux schedstat); where
    that is missing, its user and system time in clock ticks (/proc/<pid>/stat)."""
    for _ in range(3):  # a thread may end between the listing and its read: list again
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
            return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_rss_mb(pid: int) -> float:
    resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return resident_pages * PAGE_SIZE / 1e6


def call_add(session: RawStdioSession, era: Era, n: int) -> None:
    params = with_envelope(era, {"name": "add", "arguments": {"a": n, "b": 1}})
    answer = session.request("tools/call", params, timeout=60)
    if answer.get("result", {}).get("isError") is not False:
        raise RuntimeError(f"the benchmark tool failed: {answer}")


def stdio_batch(session: RawStdioSession, era: Era, calls: int) -> tuple[float, float]:
    """Wall seconds of one batch of calls, and the server's CPU seconds in it."""
    cpu, started = process_cpu_s(session.process.pid), time.perf_counter()
    for n in range(calls):
        call_add(session, era, n)
    return time.perf_counter() - started, process_cpu_s(session.process.pid) - cpu


def tools_list_size(session: RawStdioSession, era: Era) -> dict[str, float]:
    """tools/list as compact JSON: tools, bytes, and the share of health_check (this server's own)."""
    result = session.request("tools/list", with_envelope(era), timeout=60)["result"]
    size = len(json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode())
    health = [json.dumps(t, separators=(",", ":")) for t in result["tools"] if t["name"] == "health_check"]
    own = len(health[0].encode()) + 1 if health else 0  # with its separating comma
    return {"tools": len(result["tools"]), "bytes": size, "health_check_bytes": own}


@dataclass
class StdioRun:
    per_call: dict[Era, Figures] = field(default_factory=dict)
    tools_list: Figures = field(default_factory=dict)
    memory: Figures = field(default_factory=dict)


class OtlpReceiver(BaseHTTPRequestHandler):
    """Takes every OTLP/HTTP export and answers 200, as a collector would, without decoding it."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@contextmanager
def telemetry_settings() -> Iterator[dict[str, dict[str, str]]]:
    """The environments of the `metrics` and `otlp` rows; none without the `otel` extra."""
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        report("the otel extra is not installed: no `metrics` and `otlp` rows")
        yield {}
        return
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), OtlpReceiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        yield {
            "metrics": {
                f"{ENV_PREFIX}METRICS": "true",
                f"{ENV_PREFIX}METRICS_ADDRESS": f"127.0.0.1:{free_port()}",
            },
            "otlp": {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
                "OTEL_SERVICE_NAME": "bench",
            },
        }
    finally:
        receiver.shutdown()


def over_stdio(
    rounds: int,
    batch: int,
    total_calls: int,
    commands: dict[str, list[str]],
    extra_env: dict[str, dict[str, str]] | None = None,
) -> StdioRun:
    """Per-call figures by era and server (each era in its own processes); in the first era,
    tools/list and memory too: RSS after start-up, then after `total_calls` calls in all.

    `extra_env`: more rows, each the `rendered` command with these variables set.
    """
    env = unbuffered_free_env()
    argvs = {name: (argv, env) for name, argv in commands.items()}
    for name, variables in (extra_env or {}).items():
        argvs[name] = (commands["rendered"], {**env, **variables})
    run = StdioRun()
    for era in CLIENT_MODES:
        with ExitStack() as stack:
            sessions = {
                name: stack.enter_context(RawStdioSession(argv, env=server_env))
                for name, (argv, server_env) in argvs.items()
            }
            for name, session in sessions.items():
                open_session(session, era, timeout=60)
                if era == MODERN:
                    run.tools_list[name] = tools_list_size(session, era)
                    run.memory[name] = {"rss_start_mb": process_rss_mb(session.process.pid)}
                stdio_batch(session, era, batch)  # warm up
            samples = {name: Samples() for name in sessions}
            order = list(sessions)
            for _ in range(rounds):
                order.reverse()
                for name in order:
                    samples[name].add(*stdio_batch(sessions[name], era, batch), batch)
            run.per_call[era] = {name: s.figures() for name, s in samples.items()}
            if era == MODERN:
                done = batch * (rounds + 1)
                while done < total_calls:  # in turns, so that all see the same machine
                    chunk = min(500, total_calls - done)
                    for session in sessions.values():
                        stdio_batch(session, era, chunk)
                    done += chunk
                for name, session in sessions.items():
                    run.memory[name].update(rss_after_mb=process_rss_mb(session.process.pid), calls=done)
    return run


# --- report -------------------------------------------------------------------


def report(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def ratio(value: float, bare: float) -> str:
    return f"{value / bare:>6.2f}x" if bare else "      -"


def cpu_ratios(figure: dict[str, Any], bare: dict[str, Any]) -> list[float]:
    """Each round's CPU per call over the bare SDK's in the same round."""
    pairs = zip(figure["cpu_us_rounds"], bare["cpu_us_rounds"], strict=True)
    return [ours / theirs for ours, theirs in pairs]


def report_per_call(by_era: dict[Era, Figures], targets: dict[Era, float]) -> None:
    report(f"{'era':<11} {'server':<10} {'wall us':>8} {'ratio':>7} {'cpu us':>8}  {'cpu ratio [range]':<20}")
    for era, figures in by_era.items():
        bare, target = figures["bare"], targets[era]
        for name, figure in figures.items():
            rounds = cpu_ratios(figure, bare)
            median = statistics.median(rounds)
            verdict = ""
            if name == "rendered":
                verdict = f"  target <= {target:.2f}x " + ("ok" if median <= target else "missed")
            spread = f"{median:.2f}x [{min(rounds):.2f}-{max(rounds):.2f}]"
            report(
                f"{era:<11} {name:<10} {figure['wall_us']:>8.1f} {ratio(figure['wall_us'], bare['wall_us'])} "
                f"{figure['cpu_us']:>8.1f}  {spread:<20}{verdict}"
            )


def report_tools_list(figures: Figures) -> None:
    report(f"{'server':<10} {'tools':>5} {'bytes':>7} {'ratio':>7} {'without health_check':>21}")
    bare = figures["bare"]["bytes"]
    for name, figure in figures.items():
        own = figure["bytes"] - figure["health_check_bytes"]
        report(
            f"{name:<10} {figure['tools']:>5.0f} {figure['bytes']:>7.0f} {ratio(figure['bytes'], bare)}"
            f" {own:>21.0f}"
        )


def report_memory(figures: Figures) -> None:
    report(f"{'server':<10} {'start-up MB':>11} {'after MB':>9} {'growth MB':>10}")
    for name, figure in figures.items():
        growth = figure["rss_after_mb"] - figure["rss_start_mb"]
        report(f"{name:<10} {figure['rss_start_mb']:>11.1f} {figure['rss_after_mb']:>9.1f} {growth:>10.1f}")


def machine(fastmcp: str | None) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "mcp": importlib.metadata.version("mcp"),
        "fastmcp": fastmcp,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def report_line_cost(written: dict[str, float]) -> None:
    asleep, null = written["pipe_reader_asleep_us"], written["null_device_us"]
    report(
        f"one line written by a busy process, on this machine: {asleep:.1f} us of its CPU into a pipe"
        f" whose reader sleeps until a line comes (as a host's does), {null:.1f} us into the null device"
    )
    fast, plain = written["line_fast_us"], written["line_plain_us"]
    report(
        f"the line's own cost, as serving writes it into such a pipe: {fast:.1f} us (one non-blocking"
        f" write), {plain:.1f} us by the plain path (lock, poll, write): {fast / plain:.2f}x"
    )
    # What the writer adds to the write any line costs (the reader's wake-up is the host's).
    own_fast, own_plain = fast - asleep, plain - asleep
    share = f"{own_fast / own_plain:.2f}x" if own_fast > 0 and own_plain > 0 else "within the noise"
    report(
        f"beyond a bare write of the same bytes into such a pipe: {own_fast:.1f} us against"
        f" {own_plain:.1f} us: {share}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15, help="batches per server and era (default: 15)")
    parser.add_argument(
        "--batch", type=int, default=200, help="calls per batch in memory, a quarter over stdio"
    )
    parser.add_argument(
        "--calls", type=int, default=5_000, help="calls before the second RSS reading (default: 5000)"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--skip-stdio", action="store_true", help="measure in memory only")
    parser.add_argument(
        "--line-only", action="store_true", help="measure only what one log line's write costs"
    )
    parser.add_argument("--keep-stderr", action="store_true", help="show the in-memory servers' log lines")
    parser.add_argument(
        "--fastmcp-path", type=Path, help="a directory FastMCP is installed in (pip install --target)"
    )
    args = parser.parse_args(argv)
    fastmcp_path = args.fastmcp_path.resolve() if args.fastmcp_path else None  # servers run elsewhere
    fastmcp = fastmcp_version(fastmcp_path)
    options = {name: str(value) for name, value in vars(args).items()}
    results: dict[str, Any] = {"machine": machine(fastmcp), "options": options}
    if fastmcp is None:
        where = f"in {args.fastmcp_path}" if args.fastmcp_path else "(`nox -s bench` installs it)"
        report(f"FastMCP is not installed {where}: comparing the bare SDK and this server")
    # FastMCP's own log lines, plainly formatted like this server's (Rich would cost it more).
    os.environ["FASTMCP_ENABLE_RICH_LOGGING"] = "false"

    if args.line_only:
        report_line_cost(line_write_cost())
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as directory:
        workdir = Workdir(Path(directory), fastmcp=fastmcp is not None, fastmcp_path=fastmcp_path)
        # This run's own data directory and the default log level, whatever the environment says.
        os.environ[f"{ENV_PREFIX}DATA_DIR"] = str(workdir.root / "data")
        os.environ[f"{ENV_PREFIX}LOG_LEVEL"] = "info"

        report(f"Per call in memory: {args.rounds} alternating batches of {args.batch} calls")
        with stderr_into_pipe(keep=args.keep_stderr) as piped:
            results["in_memory"] = anyio.run(per_call_in_memory, args.rounds, args.batch, workdir)
        report_per_call(results["in_memory"], IN_MEMORY_TARGETS)
        report(f"log lines read from the stderr pipe: {piped[0]}")
        report(f"{NO_LINE}: this server again, at LOG_LEVEL=warning (no line per call): what the line costs")
        results["line_write"] = written = line_write_cost()
        room = {
            era: (IN_MEMORY_TARGETS[era] - 1) * figures["bare"]["cpu_us"]
            for era, figures in results["in_memory"].items()
        }
        report_line_cost(written)
        leave = " and ".join(f"{us:.1f} us ({era})" for era, us in room.items())
        report(f"the in-memory targets leave {leave} for all this server adds to a call, its line included")
        if not args.skip_stdio:
            batch = max(1, args.batch // 4)
            report()
            report(f"Per call over stdio: {args.rounds} alternating batches of {batch} calls")
            try:
                with telemetry_settings() as telemetry:
                    stdio = over_stdio(args.rounds, batch, args.calls, workdir.commands, telemetry)
            except (ServerClosed, RuntimeError) as exc:
                report(
                    f"stopped: a server did not answer ({exc}); "
                    f"a postgres project needs {ENV_PREFIX}DATABASE_URL"
                )
                return 1
            report_per_call(stdio.per_call, OVER_STDIO_TARGETS)
            report()
            report("tools/list, the same 10 tools with 3 described parameters each (compact JSON)")
            report_tools_list(stdio.tools_list)
            report()
            report(f"Memory: the server process's RSS after start-up and after {args.calls} calls over stdio")
            report_memory(stdio.memory)
            results.update(over_stdio=stdio.per_call, tools_list=stdio.tools_list, memory=stdio.memory)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        report(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
