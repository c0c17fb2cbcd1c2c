"""`serve --transport http`: the SDK's Streamable HTTP app, made fit for a network.

Host/Origin checks on every bind, bearer or OAuth through the SDK's auth hooks, the probes,
bounded bodies, sessions and slow clients, uvicorn's lines through the JSON log, and a
drain on SIGTERM/SIGINT/SIGHUP: stop accepting, let calls in flight finish within
`SHUTDOWN_GRACE_S`, cut and answer what is left (`calls.shutdown`), exit 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from sse_starlette.sse import AppStatus, EventSourceResponse
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.calls.request_state import check_shared_request_state
from resilient_mcp.calls.shutdown import STOP_SIGNALS
from resilient_mcp.http.answer_stream import AnswerStream
from resilient_mcp.http.bearer import bearer_verifier
from resilient_mcp.http.bind import bind_address, check_bind, url_host
from resilient_mcp.http.exposure import check_exposure, is_loopback, transport_security
from resilient_mcp.http.json_bounds import count_members_after_auth
from resilient_mcp.http.modern_exchange import ModernExchange
from resilient_mcp.http.oauth import oauth_verifier
from resilient_mcp.http.probes import add_probes
from resilient_mcp.http.refusals import gate_tool_calls
from resilient_mcp.http.resumption import RETRY_MS, EventLog, ReplayFromTable, ResumableTransport
from resilient_mcp.http.scope_step_up import scope_step_up
from resilient_mcp.http.sessions import SdkSessions, SessionAdmission
from resilient_mcp.http.slow_clients import BodyReadTimeout, allow_descriptors, bounded_h11
from resilient_mcp.project import this_project
from resilient_mcp.sdk_fence import (
    answer_posts_with,
    build_session_transports_with,
    forget_captured_signals,
    set_token_verifier,
)
from resilient_mcp.server.readiness import Readiness
from resilient_mcp.server.startup import exit_fatal
from resilient_mcp.telemetry.logs import get_logger

if TYPE_CHECKING:
    from resilient_mcp.server.resilient_server import ResilientServer
    from resilient_mcp.store.event_table import EventTable

log = get_logger(__name__)
MCP_PATH = "/mcp"
_FLUSH_S = 1  # after the last call ends, time for its answer to be written


def auth_for(settings: CoreSettings, host: str, port: int) -> tuple[AuthSettings, TokenVerifier] | None:
    """The SDK's auth settings and token verifier for `AUTH`; None for `none`."""
    if settings.auth == "none":
        return None
    if settings.auth == "bearer":
        # AuthSettings needs an issuer; a static token has none, and no metadata is served.
        own_url = f"http://{url_host(host)}:{port}"
        return AuthSettings(issuer_url=own_url, resource_server_url=None), bearer_verifier(settings)
    verifier = oauth_verifier(settings)
    auth = AuthSettings(
        issuer_url=verifier.issuer,
        resource_server_url=verifier.audience,
        required_scopes=settings.oauth_required_scopes or None,
        validate_token_resource=False,  # the verifier checks the audience itself
    )
    return auth, verifier


class DrainingServer(uvicorn.Server):
    """uvicorn's server, draining tool calls before it closes connections."""

    def __init__(self, config: uvicorn.Config, mcp: ResilientServer) -> None:
        super().__init__(config)
        self.mcp = mcp
        self.draining = False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's SIGTERM and SIGINT, and the other stop signals (SIGHUP) handled alike."""
        others = [signum for signum in STOP_SIGNALS if signum not in (signal.SIGTERM, signal.SIGINT)]
        if threading.current_thread() is not threading.main_thread():  # as uvicorn: none there
            others = []
        previous = {signum: signal.signal(signum, self.handle_exit) for signum in others}
        try:
            with super().capture_signals():
                yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A second signal is only logged: uvicorn's would force an exit that loses the answers.
        if not self.mcp.shutdown.begin(signal.Signals(sig).name):
            return
        self.draining = True
        super().handle_exit(sig, frame)
        # uvicorn re-raises the signal after shutting down; a drained server exits 0 instead.
        forget_captured_signals(self)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting; open connections still see /readyz say 503
        await self.mcp.shutdown.drain()  # the calls cut at the grace are answered, not dropped
        AppStatus.should_exit = True  # now the SSE streams may end (standing GET streams too)
        # Then uvicorn closes connections (standing streams too) once the answers are written.
        self.config.timeout_graceful_shutdown = _FLUSH_S
        await super().shutdown(sockets)


def check_http_settings(server: ResilientServer, host: str, port: int) -> None:
    """Refuse an unsafe or unusable bind or auth setting (one FATAL line, exit 78); arm the auth."""
    settings = server.app_settings
    try:
        check_exposure(settings, host)
        check_shared_request_state(settings)
        check_bind(host, port)
        auth = auth_for(settings, host, port)
    except FatalError as exc:
        exit_fatal(exc)
    if auth is not None:
        # What MCPServer(auth=..., token_verifier=...) would set: read when the HTTP app is built.
        server.settings.auth, verifier = auth
        set_token_verifier(server, verifier)
    server.scopes_enforced = settings.auth == "oauth"
    if settings.auth == "none" and not is_loopback(host):
        log.warning("unauthenticated", host=host, detail="ALLOW_UNAUTHENTICATED=true: anyone who reaches it")


def build_app(server: ResilientServer, host: str, is_draining: Callable[[], bool]) -> ASGIApp:
    """The SDK's Streamable HTTP app with this server's limits and the probes beside it."""
    settings = server.app_settings
    readiness = Readiness(server.health_checks)
    security = transport_security(settings, host)
    add_probes(server, readiness, is_draining, security)
    # Sessions keep every answer's events, so a dropped stream resumes (stateless: the SDK has none).
    events = None if settings.http_stateless else resumable_answers(server)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=settings.http_stateless,
        event_store=events,
        retry_interval=RETRY_MS if events is not None else None,
        max_request_body_size=settings.max_request_bytes,
        session_idle_timeout=settings.session_idle_timeout_s,
        max_sessions=settings.max_sessions,
        transport_security=security,
        host=host,
    )
    manager = server.session_manager
    if events is not None:
        around_sdk_app(
            app,
            manager,
            lambda sdk_app: SessionAdmission(
                sdk_app,
                SdkSessions(manager),
                max_sessions=settings.max_sessions,
                per_caller=settings.max_sessions_per_caller,
                idle_s=settings.session_idle_timeout_s,
            ),
        )
        if events.shared:  # a stream of a session open on another replica, from the database
            around_sdk_app(
                app, manager, lambda sdk_app: ReplayFromTable(sdk_app, SdkSessions(manager), events)
            )
    if settings.http_exchange == "core":  # inside the sessions' bounds: it serves no session
        max_body = settings.max_request_bytes
        around_sdk_app(app, manager, lambda sdk_app: ModernExchange(sdk_app, manager, max_body))
    answer_posts_with(AnswerStream if settings.http_exchange == "core" else EventSourceResponse)
    count_members_after_auth(app, MCP_PATH, settings.max_request_bytes)
    gate_tool_calls(
        app, path=MCP_PATH, limits=server.limits, tools=server.limited_spec, step_up=scope_step_up(server)
    )
    return BodyReadTimeout(readiness.around(app), settings.http_read_timeout_s)


def resumable_answers(server: ResilientServer) -> EventLog:
    """The sessions' event store: in memory, and with postgres in the database too."""
    build_session_transports_with(ResumableTransport)
    if this_project().idempotency_backend != "postgres":
        return EventLog()

    async def table() -> EventTable:
        return (await server.store.get()).stream_events

    return EventLog(table)


def around_sdk_app(
    app: Starlette, manager: StreamableHTTPSessionManager, wrap: Callable[[ASGIApp], ASGIApp]
) -> None:
    """Put `wrap(the SDK's /mcp app)` in its place: inside its auth and every other wrapper."""
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        holder: object = route
        while hasattr(holder, "app"):
            inner = holder.app
            if isinstance(inner, StreamableHTTPASGIApp) and inner.session_manager is manager:
                setattr(holder, "app", wrap(inner))  # noqa: B010
                return
            holder = inner
    raise LookupError("the SDK's HTTP app has no Streamable HTTP route")  # the SDK changed: fail loudly


async def serve_http(server: ResilientServer, host: str, port: int) -> None:
    """Serve until a signal has drained the calls in flight (check_http_settings came first)."""
    settings = server.app_settings
    holder: list[DrainingServer] = []
    app = build_app(server, host, lambda: bool(holder) and holder[0].draining)
    allow_descriptors(settings.max_connections)
    config = uvicorn.Config(
        app,
        host=bind_address(host),
        port=port,
        http=bounded_h11(settings.http_read_timeout_s, settings.max_connections),  # not limit_concurrency
        log_config=None,  # uvicorn's loggers reach the root handler: JSON on stderr
        # Off unless it would write (LOG_LEVEL=debug): at warning it built its line's pieces for nothing.
        access_log=logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO),
        server_header=False,
        lifespan="on",
    )
    # sse-starlette would end every SSE stream at the signal, answers to calls in flight included.
    AppStatus.enable_automatic_graceful_drain = False
    uv = DrainingServer(config, server)
    holder.append(uv)
    await uv.serve()
