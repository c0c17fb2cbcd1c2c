"""Serving a `ResilientServer` over stdio or Streamable HTTP, until stdin ends or a signal has
drained the calls in flight (`calls.shutdown`), with telemetry and the dependencies around it.

It sits above `server.resilient_server`: it serves one, and the server imports none of what
serving needs (the HTTP stack, the telemetry SDK), so the import graph has no circle, and a
stdio server never loads the HTTP modules (`http.app` is imported only when HTTP is served).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.calls.fatal_exit import FatalExit
from resilient_mcp.calls.shutdown import STOP_SIGNALS
from resilient_mcp.sdk_fence import lowlevel_server_of
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.server.startup import exit_fatal
from resilient_mcp.server.telemetry_plan import Transport, telemetry_plan
from resilient_mcp.stdio.guard import ProtocolPipes
from resilient_mcp.stdio.transport import open_stdio

if TYPE_CHECKING:
    from resilient_mcp.server.otel import Telemetry


async def serve_stdio(server: ResilientServer, pipes: ProtocolPipes, *, handle_sigint: bool = True) -> None:
    """Serve JSON-RPC on the pipes `claim_stdio` set aside, driven from the event loop.

    `handle_sigint=False` leaves SIGINT to the caller (in a terminal, Ctrl+C exits at once).
    """
    telemetry = _start_telemetry(server, "pipe")
    await server.open_dependencies()
    server.fatal_exit = fatal_exit = FatalExit()
    shutdown = server.shutdown
    try:
        async with anyio.create_task_group() as group:
            stop = functools.partial(_stop_on_signal, server, group)
            with _stopped_by_signals(stop, sigint=handle_sigint):
                end_of_input = functools.partial(_end_of_input, server)
                # What was read before stdin ended is answered within the drain's grace.
                within_s = shutdown.grace_s
                async with open_stdio(pipes, fatal_exit, end_of_input, answer_within_s=within_s) as streams:
                    # MCPServer.run_stdio_async does the same, on fds 0/1 it would restore at exit.
                    lowlevel = lowlevel_server_of(server)
                    await lowlevel.run(*streams, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()  # a drain still waiting has nothing left to wait for
    finally:
        _stop_telemetry(telemetry)
        await server.close_dependencies()
    shutdown.finished()


async def serve_http(server: ResilientServer, host: str, port: int) -> None:
    """Streamable HTTP on /mcp; a fatal call is answered, then the process exits."""
    from resilient_mcp.http.app import check_http_settings
    from resilient_mcp.http.app import serve_http as serve_http_app

    check_http_settings(server, host, port)  # before any dependency opens: exit 78
    telemetry = _start_telemetry(server, "tcp")
    await server.open_dependencies()
    server.fatal_exit = FatalExit(grace_s=1.0)
    try:
        await serve_http_app(server, host, port)
    finally:
        _stop_telemetry(telemetry)
        await server.close_dependencies()
    server.shutdown.finished()


def _start_telemetry(server: ResilientServer, transport: Transport) -> Telemetry | None:
    """Exporters and the metrics listener, when configured; exit 78 if they cannot start."""
    settings = server.app_settings
    try:
        plan = telemetry_plan(settings.metrics, settings.metrics_address)
        if not plan.wanted:
            return None  # nothing exported: the OpenTelemetry module is not even loaded
        from resilient_mcp.server.otel import start_telemetry

        telemetry = start_telemetry(server, plan, transport)
    except FatalError as exc:
        exit_fatal(exc)
    server.telemetry = telemetry
    return telemetry


def _stop_telemetry(telemetry: Telemetry | None) -> None:
    if telemetry is not None:
        telemetry.stop()


def _stop_on_signal(server: ResilientServer, group: anyio.abc.TaskGroup, name: str) -> None:
    if server.shutdown.begin(name):
        group.start_soon(_drain_then_stop, server, group.cancel_scope)


async def _drain_then_stop(server: ResilientServer, serving: anyio.CancelScope) -> None:
    await server.shutdown.drain()
    serving.cancel()


async def _end_of_input(server: ResilientServer) -> None:
    """stdin ended: the client sends nothing more, but may still read the answers in flight."""
    if server.shutdown.begin("end of input"):
        await server.shutdown.drain()
    else:
        await server.shutdown.drained.wait()


@contextlib.contextmanager
def _stopped_by_signals(stop: Callable[[str], None], *, sigint: bool) -> Iterator[None]:
    """SIGTERM, SIGHUP (and SIGINT) call `stop` on the event loop (`http.app` does this for HTTP)."""
    loop = asyncio.get_running_loop()
    handled = [signum for signum in STOP_SIGNALS if sigint or signum != signal.SIGINT]
    for signum in handled:
        loop.add_signal_handler(signum, stop, signum.name)
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
