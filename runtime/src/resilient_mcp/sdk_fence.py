"""Every private name of the SDK, uvicorn, sse-starlette, anyio and asyncio that the library relies
on, each behind one name here.

None of them is public API, so a release may rename one without notice (`mcp>=2.3,<3`). Kept in
this one module, each is touched by tests/test_sdk_names.py, which then fails by the name
that moved instead of in some behaviour far away. Use public API wherever the SDK has one; add a
name here (and to that test) only where it has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import mcp.server.mcpserver.server as mcpserver_module
import mcp.server.streamable_http as session_transport
import mcp.server.streamable_http_manager as session_manager_module
import uvicorn
from mcp.server import _streamable_http_modern as modern_entry
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.mcpserver.utilities.func_metadata import _convert_to_content as convert_to_content
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import SubscriptionBus
from mcp.shared._context_streams import create_context_streams
from pydantic import TypeAdapter
from sse_starlette import EventSourceResponse
from sse_starlette._utils import collapse_excgroups

__all__ = [
    "EVENT_SOURCE_ATTRIBUTES",
    "H11_PROTOCOL_ATTRIBUTES",
    "MODERN_ENTRY_NAMES",
    "answer_posts_with",
    "build_session_transports_with",
    "claim_anyio_worker_thread",
    "collapse_excgroups",
    "connection_of",
    "context_input_params",
    "context_subscriptions",
    "convert_to_content",
    "create_context_streams",
    "discard_session",
    "drop_sdk_spans",
    "forget_captured_signals",
    "loop_has_ready_callbacks",
    "lowlevel_server_of",
    "modern_entry",
    "output_adapter",
    "request_context_of",
    "sdk_logging_left_alone",
    "session_manager_state",
    "session_transports",
    "set_token_verifier",
    "subscriptions_of",
]

# What BoundedH11Protocol (_http_limits) reads on uvicorn's H11Protocol, and on its request cycle.
H11_PROTOCOL_ATTRIBUTES = ("app", "connections", "cycle", "loop", "transport")
H11_CYCLE_ATTRIBUTES = ("response_complete",)
# What ModernExchange (_modern_exchange) takes from the SDK's private 2026-07-28 HTTP entry.
MODERN_ENTRY_NAMES = (
    "_INVALID_BODY",
    "_SSE_HEADERS",
    "_SSE_PING_INTERVAL",
    "_SingleExchangeDispatchContext",
    "_acknowledge_notification",
    "_is_notification_shaped",
    "_mcp_param_rejection",
    "_sse_event",
    "_to_jsonrpc_response",
    "_write",
    "_write_rejection",
)
# What AnswerStream (_answer_stream) uses of sse-starlette's EventSourceResponse, methods and
# attributes its __init__ sets, beyond the public API.
EVENT_SOURCE_ATTRIBUTES = (
    "_client_disconnected",
    "_listen_for_disconnect",
    "_listen_for_exit_signal_with_grace",
    "_ping",
    "_ping_interval",
    "_response_complete",
    "_response_started",
    "_send_interrupted",
    "_send_with_timeout",
    "_stream_response",
)


def output_adapter(metadata: FuncMetadata, model: Any) -> TypeAdapter[Any]:
    """The TypeAdapter `FuncMetadata.convert_result` validates a structured result with."""
    adapter: TypeAdapter[Any] = metadata._output_adapter(model)
    return adapter


def subscriptions_of(server: MCPServer) -> SubscriptionBus:
    """The server's resource-update bus (`MCPServer(subscriptions=...)` keeps it private)."""
    bus: SubscriptionBus = server._subscriptions
    return bus


def lowlevel_server_of(server: MCPServer) -> Server[Any]:
    """The low-level Server that `MCPServer` wraps: its public `add_request_handler` and `run`."""
    lowlevel: Server[Any] = server._lowlevel_server
    return lowlevel


def set_token_verifier(server: MCPServer, verifier: Any) -> None:
    """What `MCPServer(token_verifier=...)` sets: read when the HTTP app is built, after start-up."""
    server._token_verifier = verifier


def connection_of(session: ServerSession) -> Connection:
    """A session's connection: a ServerSession lives for one request, its Connection as long as
    the client stays (the SDK gives the session no public way to it)."""
    connection: Connection = session._connection
    return connection


def request_context_of(context: Context[Any, Any]) -> Any:
    """`context.request_context`, or None outside a request, without the property's cost.

    The property reads a pydantic private attribute twice, and pydantic raises and catches an
    AttributeError on each read; the model's private values are read directly instead.
    """
    private = getattr(context, "__pydantic_private__", None)
    if isinstance(private, dict) and "_request_context" in private:
        return private["_request_context"]
    try:  # a Context that is no longer a pydantic model: its public property
        return context.request_context
    except ValueError:
        return None


def context_input_params(context: Context[Any, Any]) -> Any:
    """The input-response parameters a Context was built with (`Context(input_params=...)`)."""
    return context._input_params


def context_subscriptions(context: Context[Any, Any]) -> SubscriptionBus | None:
    """The subscription bus a Context was built with (`Context(subscriptions=...)`)."""
    bus: SubscriptionBus | None = context._subscriptions
    return bus


def drop_sdk_spans(server: MCPServer) -> None:
    """Take the SDK's span-per-request middleware out of the server's (public) middleware chain,
    as the SDK's own comment on it says to opt out; its class is private."""
    chain = server.middleware
    chain[:] = [middleware for middleware in chain if not isinstance(middleware, OpenTelemetryMiddleware)]


def session_manager_state(manager: StreamableHTTPSessionManager) -> tuple[bool, Any]:
    """Whether the session manager runs (its task group is up), and the lifespan state it hands
    to every request's handler."""
    return manager._task_group is not None, manager._lifespan_state


def answer_posts_with(response_class: type[EventSourceResponse]) -> None:
    """The class the SDK's session transport builds its SSE streams with (the name it imported)."""
    setattr(session_transport, "EventSourceResponse", response_class)  # noqa: B010


def build_session_transports_with(
    transport_class: type[session_transport.StreamableHTTPServerTransport],
) -> None:
    """The class the SDK's session manager builds each session's transport with (the name it
    imported); a subclass, called as the manager calls it."""
    setattr(session_manager_module, "StreamableHTTPServerTransport", transport_class)  # noqa: B010


def forget_captured_signals(server: uvicorn.Server) -> None:
    """Keep uvicorn from re-raising the signals it caught once it has shut down."""
    server._captured_signals.clear()


def session_transports(manager: StreamableHTTPSessionManager) -> dict[str, Any]:
    """The session manager's open sessions: session ID to transport (it keeps the table private)."""
    transports: dict[str, Any] = manager._server_instances
    return transports


async def discard_session(manager: StreamableHTTPSessionManager, session_id: str, transport: Any) -> None:
    """Forget a session at once, then terminate it, so its ID answers 404."""
    await manager._discard_session(session_id, transport)


try:  # what anyio's own worker threads run under; private, so its absence is survived
    from anyio._backends._asyncio import AsyncIOBackend
    from anyio._core._eventloop import claim_worker_thread
except ImportError:  # pragma: no cover - a future anyio: from_thread then needs a token
    claim_worker_thread = None  # type: ignore[assignment]


@contextlib.contextmanager
def claim_anyio_worker_thread(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Make this thread an AnyIO worker thread of `loop`, as `to_thread`'s are, so that
    `anyio.from_thread.run` works in it; nothing when a future anyio lacks the private hook."""
    if claim_worker_thread is None:
        yield None
        return
    with claim_worker_thread(AsyncIOBackend, loop):
        yield None


# The name MCPServer.__init__ calls its logging set-up by, in its own module.
SDK_LOGGING_SETUP = "configure_logging"


def _logging_already_set_up(level: str = "INFO") -> None:
    """What the SDK's `configure_logging` comes to once the root logger has a handler."""


@contextlib.contextmanager
def sdk_logging_left_alone() -> Iterator[None]:
    """While an MCPServer is built over logging already set up: its `configure_logging` is skipped.

    It builds a Rich handler (importing Rich, when installed: tens of milliseconds of start-up)
    for `logging.basicConfig`, which drops it when the root logger already has a handler, as it
    has once the core set up its own. Without a handler there, the SDK's set-up runs as written.
    """
    if not logging.getLogger().handlers:
        yield
        return
    sdk_setup = getattr(mcpserver_module, SDK_LOGGING_SETUP)
    setattr(mcpserver_module, SDK_LOGGING_SETUP, _logging_already_set_up)
    try:
        yield
    finally:
        setattr(mcpserver_module, SDK_LOGGING_SETUP, sdk_setup)


def loop_has_ready_callbacks(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether callbacks wait to run in this turn of the loop: asyncio's own loop keeps them in
    `_ready`; another loop (uvloop) shows none, and a caller then goes on at once."""
    return bool(getattr(loop, "_ready", None))
