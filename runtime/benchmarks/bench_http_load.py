"""Load over Streamable HTTP: this server against a bare SDK server, round by round.

    python benchmarks/bench_http_load.py [--rounds 5] [--clients 32] [--calls 1500]
                                         [--sdk-calls 300] [--era both|2026-07-28|2025-11-25]

Both servers serve the same trivial async tool on loopback and run side by side for the
whole of an era; each round loads one, then the other (the order flips every round), so
both see the same machine. Two kinds of client, in turn:

- raw: `--clients` keep-alive HTTP/1.1 connections on asyncio streams, each POSTing
  JSON-RPC tools/call requests one after the other (2025-11-25: after the initialize
  handshake, with the session header); cheap, so the servers are what is measured;
- sdk: as many of the SDK's `Client`, sharing `--sdk-calls` calls (0: skip them).

Per round and server: calls per second, p50 and p99 latency, the server's CPU seconds per
1,000 calls (/proc), and what it logged per call. The verdict takes, for each figure, the
median over rounds with its range, and the median of the rounds' ratios rendered/bare;
the targets (raw clients, both eras) are printed beside them. Both servers log as they do
by default, into a file each (see HTTP_LOAD.md). Errors (an exception, a status other than
200, an `isError` result) must be 0: the exit code is 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp import Client

from resilient_mcp.commands.diagnose import ERAS, LEGACY, MODERN, Era, with_envelope
from sample_server.project import ENV_PREFIX, PACKAGE

# rendered/bare, raw clients, both eras: throughput at least, p99 at most.
TARGETS = {"calls_per_s": (">=", 1.2), "p99_ms": ("<=", 0.6)}
CLIENT_MODES: dict[Era, Literal["auto", "legacy"]] = {MODERN: "auto", LEGACY: "legacy"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 60.0
CLIENT_INFO = {"name": "bench", "version": "1"}

TOOLS_MODULE = '''
from resilient_mcp import tool


@tool(read_only=True)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''
BARE_SERVER = """
import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bare")


@mcp.tool()
async def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""
# `python -m sample_server serve --transport http` with the benchmark's tool beside the project's own.
LAUNCHER = """
import sys

import sample_server.tools
from sample_server.cli import main

sample_server.tools.__path__.append(sys.argv[1])
raise SystemExit(main(["serve", "--transport", "http", "--port", sys.argv[2]]))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """A server process on loopback; all it writes (stdout and stderr) goes to one file."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def cpu_s(self) -> float:
        """User and system CPU seconds so far (Linux /proc)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def logged(self) -> tuple[int, int]:
        """Lines and bytes written so far."""
        data = self.log.read_bytes()
        return data.count(b"\n"), len(data)


@contextmanager
def running(name: str, argv: list[str], env: dict[str, str], log: Path) -> Iterator[Server]:
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen([*argv, str(port)], env=env, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-2000:]
                    raise SystemExit(f"{name} did not start (exit {process.poll()}):\n{tail}") from None
                time.sleep(0.1)
        yield Server(name, process, port, log)
    finally:
        process.terminate()
        process.wait(timeout=60)


# --- the raw client -----------------------------------------------------------


class CallFailed(Exception):
    pass


class RawConnection:
    """One keep-alive HTTP/1.1 connection speaking JSON-RPC to /mcp, in one era."""

    def __init__(self, port: int, era: Era) -> None:
        self.port = port
        self.era = era
        self.ids = itertools.count(1)
        self.session: str | None = None
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def _head(self, method: str, name: str | None) -> str:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
        )
        if self.era == MODERN:  # every request says its version and method (and tool) in headers
            head += f"MCP-Protocol-Version: {MODERN}\r\nMcp-Method: {method}\r\n"
            head += f"Mcp-Name: {name}\r\n" if name else ""
        elif self.session is not None:
            head += f"MCP-Protocol-Version: {LEGACY}\r\nMcp-Session-Id: {self.session}\r\n"
        return head

    async def open(self) -> None:
        self.streams = await asyncio.open_connection("127.0.0.1", self.port)
        if self.era == LEGACY:
            self.session = None
            params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO}
            status, headers, _ = await self.post("initialize", params, answer=True)
            self.session = headers.get("mcp-session-id")
            if status != 200 or self.session is None:
                raise CallFailed(f"initialize answered {status} without a session")
            await self.post("notifications/initialized", None, answer=False)

    async def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None

    async def post(
        self, method: str, params: dict[str, Any] | None, *, answer: bool, name: str | None = None
    ) -> tuple[int, dict[str, str], Any]:
        """POST one message; the status, the headers and (`answer`) the JSON-RPC response."""
        assert self.streams is not None
        reader, writer = self.streams
        request_id = next(self.ids) if answer else None
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if request_id is not None:
            message["id"] = request_id
        body = json.dumps(message, separators=(",", ":")).encode()
        writer.write(f"{self._head(method, name)}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        status, headers, payload = await read_response(reader)
        if not answer:
            return status, headers, None
        return status, headers, response_in(payload, headers.get("content-type", ""), request_id)

    async def call_add(self, n: int) -> None:
        params = with_envelope(self.era, {"name": "add", "arguments": {"a": n, "b": 1}})
        status, _, response = await self.post("tools/call", params, answer=True, name="add")
        result = response.get("result") if isinstance(response, dict) else None
        if status != 200 or not isinstance(result, dict) or result.get("isError") is not False:
            raise CallFailed(f"{status}: {response}")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, lower-cased headers, the body (Content-Length or chunked)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    headers = {}
    for line in head[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() != "chunked":
        return status, headers, b""
    chunks: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers come from uvicorn: just the blank line
            return status, headers, b"".join(chunks)
        chunks.append((await reader.readexactly(size + 2))[:-2])


def response_in(payload: bytes, content_type: str, request_id: int | None) -> Any:
    """The JSON-RPC response to `request_id`, from a JSON body or an event stream's data lines."""
    if content_type.startswith("application/json"):
        return json.loads(payload)
    for line in payload.split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip():  # not the priming event's empty data
            message = json.loads(line[5:])
            if isinstance(message, dict) and message.get("id") == request_id:
                return message
    return None


# --- load ---------------------------------------------------------------------


@dataclass
class Load:
    """One run: what the clients saw, and the CPU and log lines it cost (connecting left out)."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    elapsed_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    log_lines: int = 0
    log_bytes: int = 0


async def share_calls(server: Server, workers: Sequence[Callable[[], Any]], calls: int) -> Load:
    """Each worker makes calls until `calls` have been made in all; latency per call, errors."""
    load = Load()
    left = calls

    async def work(call: Callable[[], Any]) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            started = time.perf_counter()
            try:
                with anyio.fail_after(CALL_TIMEOUT_S):
                    await call()
            except Exception:
                load.errors += 1
            load.latencies.append(time.perf_counter() - started)

    server_cpu, (lines, size) = server.cpu_s(), server.logged()
    client_cpu, started = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as group:
        for worker in workers:
            group.start_soon(work, worker)
    load.elapsed_s = time.perf_counter() - started
    load.client_cpu_s = time.process_time() - client_cpu
    load.server_cpu_s = server.cpu_s() - server_cpu
    now_lines, now_size = server.logged()
    load.log_lines, load.log_bytes = now_lines - lines, now_size - size
    return load


Worker = Callable[[], Any]  # one client: makes one call when awaited


@dataclass
class Clients:
    workers: list[Worker]
    # Before each round, outside the clock: uvicorn closes a connection idle for 5 s.
    reconnect: Callable[[], Awaitable[None]]


async def nothing() -> None:
    pass


async def raw_clients(stack: AsyncExitStack, server: Server, era: Era, clients: int) -> Clients:
    """`clients` raw connections (2025-11-25: each through the handshake, with its session)."""
    connections = [RawConnection(server.port, era) for _ in range(clients)]
    for connection in connections:
        stack.push_async_callback(connection.close)

    async def reconnect() -> None:
        for connection in connections:
            await connection.close()
            await connection.open()

    def caller(connection: RawConnection) -> Worker:
        numbers = itertools.count()

        async def call() -> None:
            try:
                await connection.call_add(next(numbers))
            except (OSError, asyncio.IncompleteReadError, CallFailed):
                await connection.close()  # a broken connection is counted, then opened again
                await connection.open()
                raise

        return call

    return Clients([caller(c) for c in connections], reconnect)


async def sdk_clients(stack: AsyncExitStack, server: Server, era: Era, clients: int) -> Clients:
    """`clients` SDK clients, connected until `stack` closes (the SDK reconnects by itself)."""
    sessions = [
        await stack.enter_async_context(Client(server.url, mode=CLIENT_MODES[era])) for _ in range(clients)
    ]

    def caller(session: Any) -> Worker:
        async def call() -> None:
            result = await session.call_tool("add", {"a": 2, "b": 3})
            if result.is_error:
                raise CallFailed(str(result.content))

        return call

    return Clients([caller(s) for s in sessions], nothing)


def figures_of(load: Load) -> dict[str, float]:
    calls = len(load.latencies)
    ordered = sorted(load.latencies)
    return {
        "errors": load.errors,
        "calls_per_s": calls / load.elapsed_s,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000,
        "cpu_s_per_1000": load.server_cpu_s / calls * 1000,
        "client_cpu_s_per_1000": load.client_cpu_s / calls * 1000,
        "log_lines_per_call": load.log_lines / calls,
        "log_bytes_per_call": load.log_bytes / calls,
    }


Rounds = dict[str, dict[str, list[dict[str, float]]]]  # client kind -> server -> one figures per round


async def measure_era(era: Era, servers: list[Server], args: argparse.Namespace) -> Rounds:
    """Per client kind and server, one set of figures per round; the clients stay connected."""
    kinds = {"raw": (raw_clients, args.calls)}
    if args.sdk_calls:
        kinds["sdk"] = (sdk_clients, args.sdk_calls)
    async with AsyncExitStack() as stack:
        pools = {
            (kind, server.name): await connect(stack, server, era, args.clients)
            for kind, (connect, _) in kinds.items()
            for server in servers
        }

        async def load(kind: str, server: Server, calls: int) -> Load:
            pool = pools[kind, server.name]
            await pool.reconnect()
            return await share_calls(server, pool.workers, calls)

        for server in servers:  # warm up: imports, first-call paths, the sessions' caches
            for kind in kinds:
                await load(kind, server, 10 * args.clients)
        rounds: Rounds = {kind: {s.name: [] for s in servers} for kind in kinds}
        order = list(servers)
        for number in range(1, args.rounds + 1):
            order.reverse()  # no server always goes first
            for kind, (_, calls) in kinds.items():
                for server in order:
                    rounds[kind][server.name].append(figures_of(await load(kind, server, calls)))
            report(f"  round {number}/{args.rounds} done")
    return rounds


# --- report -------------------------------------------------------------------


def report(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def spread(values: Sequence[float], digits: int) -> str:
    """The median, with the range over rounds."""
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


FIGURES = {  # figure -> (label, digits)
    "calls_per_s": ("calls/s", 0),
    "p50_ms": ("p50 ms", 2),
    "p99_ms": ("p99 ms", 2),
    "cpu_s_per_1000": ("server CPU s/1000 calls", 3),
    "client_cpu_s_per_1000": ("client CPU s/1000 calls", 3),
    "log_lines_per_call": ("log lines/call", 2),
    "log_bytes_per_call": ("log bytes/call", 0),
}


def report_rounds(era: Era, kind: str, by_server: dict[str, list[dict[str, float]]]) -> list[str]:
    """The table of one era and client kind; returns the targets missed (raw clients only)."""
    bare, rendered = by_server["bare"], by_server["rendered"]
    missed = []
    report(f"{'figure':<24} {'bare':>24} {'rendered':>24} {'rendered/bare':>22}  target")
    for key, (label, digits) in FIGURES.items():
        ratios = [r[key] / b[key] for b, r in zip(bare, rendered, strict=True) if b[key]]
        verdict = ""
        if kind == "raw" and key in TARGETS:
            sense, bound = TARGETS[key]
            ratio = statistics.median(ratios)
            ok = ratio >= bound if sense == ">=" else ratio <= bound
            verdict = f"  {sense} {bound:.2f}x {'ok' if ok else 'missed'}"
            if not ok:
                missed.append(f"{era} {label} {ratio:.3f}x (target {sense} {bound:.2f}x)")
        ratio_text = spread(ratios, 2) + "x" if ratios else "-"
        report(
            f"{label:<24} {spread([b[key] for b in bare], digits):>24} "
            f"{spread([r[key] for r in rendered], digits):>24} {ratio_text:>22}{verdict}"
        )
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per era (default 5)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--calls", type=int, default=1500, help="raw clients' calls per round (default 1500)")
    parser.add_argument(
        "--sdk-calls", type=int, default=300, help="SDK clients' calls per round (default 300; 0: none)"
    )
    parser.add_argument("--era", choices=["both", *ERAS], default="both", help="protocol era (default both)")
    args = parser.parse_args(argv)
    eras = ERAS if args.era == "both" else tuple(e for e in ERAS if e == args.era)
    report(
        f"{PACKAGE} against the bare SDK over Streamable HTTP: {args.rounds} rounds per era, {args.clients} "
        f"clients; raw {args.calls} calls a round, sdk {args.sdk_calls}; median [range] over rounds"
    )
    errors = 0
    missed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        tools = root / "bench_tools"
        tools.mkdir()
        (tools / "__init__.py").write_text("")
        (tools / "arithmetic.py").write_text(textwrap.dedent(TOOLS_MODULE))
        (root / "bare.py").write_text(textwrap.dedent(BARE_SERVER))
        (root / "launch.py").write_text(textwrap.dedent(LAUNCHER))
        env = dict(os.environ)  # a PostgreSQL project's DATABASE_URL comes from here
        env[f"{ENV_PREFIX}DATA_DIR"] = str(root / "data")
        env[f"{ENV_PREFIX}LOG_LEVEL"] = "info"  # the default, whatever this environment says
        commands = {
            "bare": [sys.executable, str(root / "bare.py")],
            "rendered": [sys.executable, str(root / "launch.py"), str(tools)],
        }
        for era in eras:
            report(f"\nera {era}")
            with (
                running("bare", commands["bare"], env, root / "bare.log") as bare,
                running("rendered", commands["rendered"], env, root / "rendered.log") as rendered,
            ):
                rounds = anyio.run(measure_era, era, [bare, rendered], args)
            for kind, by_server in rounds.items():
                report(f"\n{era}, {kind} clients")
                missed += report_rounds(era, kind, by_server)
                errors += sum(int(r["errors"]) for figures in by_server.values() for r in figures)
    report()
    report(f"errors: {errors}" + ("" if not errors else " (the target is 0)"))
    report(
        "targets (raw clients, both eras): " + ("all met" if not missed else "missed " + "; ".join(missed))
    )
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
