"""What the HTTP body's member count costs beside the SDK's parse, and what /livez sees meanwhile.

    python benchmarks/bench_request_bounds.py [--rounds 7] [--probes 200] [--skip-livez]

For bodies of many object keys (what the count bounds) and of many numbers (what it lets
through), the median time of `object_members` and of the SDK's own parse
(`pydantic_core.from_json`, then JSON-RPC validation), and their ratio. A body refused by
the count is never parsed: the ratio is what such a body costs the event loop now.

Then, against a real `serve --transport http`: the latency of `--probes` /livez probes
(p50, p99, max) while one client sends huge tools/call requests back to back (a 200 KB
argument name; as many argument names as a body may hold, parsed and refused; 300,000,
counted and refused unparsed), beside the same probes of the idle server. A probe is a
new connection each time, as a kubelet's is.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pydantic_core
from mcp.types import jsonrpc_message_adapter

from resilient_mcp.commands.diagnose import MODERN, with_envelope
from resilient_mcp.http.json_bounds import MAX_OBJECT_MEMBERS, object_members
from resilient_mcp.http.probes import LIVEZ_PATH
from sample_server.project import ENV_PREFIX, PACKAGE

TIMEOUT_S = 60.0
PROBE_PAUSE_S = 0.005  # between probes: a probe every few ms, not a flood
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # room for the 300,000 names (about 5 MB)


def call_body(arguments: dict[str, Any]) -> bytes:
    params = {"name": "score", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()


def median_ms(work: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def parse(body: bytes) -> None:
    """What the SDK does with a POSTed body before any code of ours sees the request."""
    jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)


# --- /livez while huge requests are read --------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def http_server(data_dir: str) -> Iterator[int]:
    """`serve --transport http` on a free loopback port, at its defaults but the body size: the port."""
    port = free_port()
    env = {
        **os.environ,
        f"{ENV_PREFIX}DATA_DIR": data_dir,
        f"{ENV_PREFIX}MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
        f"{ENV_PREFIX}LOG_LEVEL": "info",
    }
    argv = [sys.executable, "-m", PACKAGE, "serve", "--transport", "http", "--port", str(port)]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start (exit {process.poll()})") from None
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT_S)


def request(port: int, method: str, path: str, body: bytes | None = None) -> int:
    """One request on a new connection; its status, once the whole answer is read."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    headers = {}
    if body is not None:  # a 2026-07-28 tools/call: its method and tool ride in headers too
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "health_check",
        }
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def modern_call_body(arguments: dict[str, Any]) -> bytes:
    params = with_envelope(MODERN, {"name": "health_check", "arguments": arguments})
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()


def probe_latencies(port: int, probes: int) -> list[float]:
    """`probes` /livez answers, in seconds; each must be 200."""
    latencies = []
    for _ in range(probes):
        started = time.perf_counter()
        status = request(port, "GET", LIVEZ_PATH)
        latencies.append(time.perf_counter() - started)
        if status != 200:
            raise SystemExit(f"/livez answered {status}")
        time.sleep(PROBE_PAUSE_S)
    return latencies


def probes_during(port: int, body: bytes, probes: int) -> tuple[list[float], int]:
    """/livez latencies while another thread POSTs `body` back to back; and how many it sent."""
    stop = threading.Event()
    sent: list[int] = []

    def send_forever() -> None:
        while not stop.is_set():
            sent.append(request(port, "POST", "/mcp", body))

    sender = threading.Thread(target=send_forever, daemon=True)
    sender.start()
    while not sent and sender.is_alive():  # the first huge request is on its way or answered
        time.sleep(0.001)
    try:
        return probe_latencies(port, probes), len(sent)
    finally:
        stop.set()
        sender.join(TIMEOUT_S)


def livez_report(probes: int) -> None:
    # Built before any probe: encoding them holds this process's GIL, and the probes' clock.
    bodies = {
        "200 KB argument name": modern_call_body({"k" * 200_000: 1}),
        f"{MAX_OBJECT_MEMBERS - 10:,} names (parsed)": modern_call_body(
            {f"k{i}": i for i in range(MAX_OBJECT_MEMBERS - 10)}
        ),
        "300,000 names (counted)": modern_call_body({f"k{i}": i for i in range(300_000)}),
    }
    sys.stdout.write(f"\n/livez while one client sends huge requests back to back: {probes} probes each\n")
    sys.stdout.write(f"{'while':<26} {'MB':>5} {'sent':>5} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}\n")
    with tempfile.TemporaryDirectory() as data_dir, http_server(data_dir) as port:
        probe_latencies(port, 20)  # warm up
        rows = {"nothing (idle server)": (0.0, 0, probe_latencies(port, probes))}
        for name, body in bodies.items():
            latencies, sent = probes_during(port, body, probes)
            rows[name] = (len(body) / 1e6, sent, latencies)
    for name, (size_mb, sent, latencies) in rows.items():
        ordered = sorted(latencies)
        p50, p99 = statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.99) - 1)]
        figures = " ".join(f"{seconds * 1000:>7.2f}" for seconds in (p50, p99, ordered[-1]))
        sys.stdout.write(f"{name:<26} {size_mb:>5.1f} {sent:>5} {figures}\n")


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--rounds", type=int, default=7, help="timings per body and way (default 7)")
    parser.add_argument("--probes", type=int, default=200, help="/livez probes per row (default 200)")
    parser.add_argument("--skip-livez", action="store_true", help="only the count against the parse")
    args = parser.parse_args()
    rounds = args.rounds
    bodies = {
        "10,000 keys": call_body({f"k{i}": i for i in range(10_000)}),
        "300,000 keys": call_body({f"k{i}": i for i in range(300_000)}),
        "1,000,000 numbers": call_body({"xs": list(range(1_000_000))}),
    }
    sys.stdout.write(f"{'body':<20} {'MB':>6} {'count ms':>9} {'parse ms':>9} {'parse/count':>12}\n")
    for name, body in bodies.items():
        count = median_ms(functools.partial(object_members, body), rounds)
        parsed = median_ms(functools.partial(parse, body), rounds)
        size_mb = len(body) / 1e6
        ratio = parsed / count
        sys.stdout.write(f"{name:<20} {size_mb:>6.1f} {count:>9.2f} {parsed:>9.1f} {ratio:>11.1f}x\n")
    if not args.skip_livez:
        livez_report(args.probes)


if __name__ == "__main__":
    main()
