"""The private names of the SDK, uvicorn, sse-starlette and anyio that the library uses
(resilient_mcp/sdk_fence.py), each touched on a real object of the installed release.

A release that renames one fails here by that name: mend resilient_mcp/sdk_fence.py, and only it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.from_thread
import mcp.server.mcpserver.server as mcpserver_module
import pytest
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp.server.session import ServerSession
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel
from starlette.testclient import TestClient
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

from resilient_mcp import sdk_fence as _sdk


class Reading(BaseModel):
    celsius: float


def reading() -> Reading:
    return Reading(celsius=21.5)


def test_a_structured_result_is_validated_by_the_adapter_the_sdk_itself_uses() -> None:
    metadata = func_metadata(reading, structured_output=True)
    adapter = _sdk.output_adapter(metadata, metadata.output_model)
    by_the_sdk = metadata.convert_result(reading())
    assert isinstance(by_the_sdk, CallToolResult)
    structured = adapter.dump_python(adapter.validate_python(reading()), mode="json")
    assert structured == by_the_sdk.structured_content
    assert _sdk.convert_to_content("plain text") == [TextContent(type="text", text="plain text")]


def test_the_server_hands_over_its_subscription_bus_and_its_low_level_server() -> None:
    server = MCPServer("names")
    assert callable(_sdk.subscriptions_of(server).subscribe)  # what HandshakeEraMethods calls
    lowlevel = _sdk.lowlevel_server_of(server)
    assert isinstance(lowlevel, Server)
    assert lowlevel.name == "names"


def test_the_sdks_logging_set_up_is_skipped_only_over_logging_already_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MCPServer still sets its logging up by the name the fence replaces while one is built."""
    levels: list[str] = []
    monkeypatch.setattr(mcpserver_module, _sdk.SDK_LOGGING_SETUP, levels.append)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    with _sdk.sdk_logging_left_alone():
        MCPServer("names")
    assert levels == ["INFO"]  # no handler yet: the SDK's own set-up runs
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])
    with _sdk.sdk_logging_left_alone():
        MCPServer("names")
    assert levels == ["INFO"]  # skipped: basicConfig would have dropped its handler
    assert getattr(mcpserver_module, _sdk.SDK_LOGGING_SETUP) == levels.append  # put back
    MCPServer("names")
    assert levels == ["INFO", "INFO"]


def test_the_sdks_span_middleware_can_be_dropped_from_the_chain() -> None:
    server = MCPServer("names")
    kinds = [type(middleware).__name__ for middleware in server.middleware]
    assert "OpenTelemetryMiddleware" in kinds  # on by default: a span per request
    _sdk.drop_sdk_spans(server)
    assert [type(middleware).__name__ for middleware in server.middleware] == [
        kind for kind in kinds if kind != "OpenTelemetryMiddleware"
    ]


class RefuseEveryToken:
    async def verify_token(self, token: str) -> Any:
        return None


def test_a_token_verifier_set_after_construction_guards_the_http_app() -> None:
    from mcp.server.auth.settings import AuthSettings

    server = MCPServer("names")
    server.settings.auth = AuthSettings(
        issuer_url="https://issuer.example",
        resource_server_url="http://127.0.0.1:8000/mcp",
        validate_token_resource=False,
    )
    _sdk.set_token_verifier(server, RefuseEveryToken())
    with TestClient(server.streamable_http_app()) as client:
        answer = client.post("/mcp", json={}, headers={"Host": "127.0.0.1:8000"})
    assert answer.status_code == 401, answer.text


def test_a_session_leads_to_its_connection() -> None:
    connection = SimpleNamespace(protocol_version="2025-11-25")
    session = ServerSession(None, connection)  # type: ignore[arg-type]
    assert _sdk.connection_of(session) is connection  # type: ignore[comparison-overlap]


def test_a_context_gives_back_what_it_was_built_with() -> None:
    server = MCPServer("names")
    bus = _sdk.subscriptions_of(server)
    context: Context[Any, Any] = Context(mcp_server=server, subscriptions=bus)
    assert _sdk.request_context_of(context) is None
    assert _sdk.context_input_params(context) is None
    assert _sdk.context_subscriptions(context) is bus
    with pytest.raises(ValueError, match="outside of a request"):  # the public property agrees
        _ = context.request_context


def test_uvicorn_forgets_the_signals_it_caught() -> None:
    server = uvicorn.Server(uvicorn.Config(app=None))  # type: ignore[arg-type]
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit
    _sdk.forget_captured_signals(server)
    assert server._captured_signals == []  # nothing for uvicorn to raise again after its shutdown


def test_uvicorns_h11_protocol_still_has_what_the_bounded_protocol_reads() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    loop = asyncio.new_event_loop()
    try:
        protocol = H11Protocol(uvicorn.Config(app=app), ServerState(), {}, _loop=loop)
    finally:
        loop.close()
    missing = [name for name in _sdk.H11_PROTOCOL_ATTRIBUTES if not hasattr(protocol, name)]
    assert not missing, f"uvicorn's H11Protocol lost {missing}"
    set_by_a_cycle = RequestResponseCycle.__init__.__code__.co_names
    missing = [name for name in _sdk.H11_CYCLE_ATTRIBUTES if name not in set_by_a_cycle]
    assert not missing, f"uvicorn's RequestResponseCycle lost {missing}"


def test_the_sdks_2026_entry_still_has_what_the_core_exchange_takes_from_it() -> None:
    missing = [name for name in _sdk.MODERN_ENTRY_NAMES if not hasattr(_sdk.modern_entry, name)]
    assert not missing, f"the SDK's 2026-07-28 HTTP entry lost {missing}"


@pytest.mark.anyio
async def test_the_session_manager_says_whether_it_runs_and_hands_over_its_lifespan_state() -> None:
    server = MCPServer("names")
    server.streamable_http_app()
    manager = server.session_manager
    assert _sdk.session_manager_state(manager) == (False, None)
    async with manager.run():
        running, state = _sdk.session_manager_state(manager)
        assert running
        assert state is not None  # what the server's lifespan yielded, handed to every request
    assert _sdk.session_manager_state(manager) == (False, None)


def test_the_session_manager_lists_its_sessions_and_forgets_one_at_once() -> None:
    server = MCPServer("names")
    app = server.streamable_http_app(host="127.0.0.1")
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        opened = client.post("/mcp", json=hello, headers=headers)
        session_id = opened.headers["mcp-session-id"]
        transports = _sdk.session_transports(server.session_manager)
        assert session_id in transports
        assert client.portal is not None
        client.portal.call(_sdk.discard_session, server.session_manager, session_id, transports[session_id])
        assert session_id not in _sdk.session_transports(server.session_manager)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        gone = client.post("/mcp", json=ping, headers={**headers, "mcp-session-id": session_id})
        assert gone.status_code == 404


@pytest.mark.anyio
async def test_a_thread_claimed_as_an_anyio_worker_can_call_back_into_the_loop() -> None:
    loop = asyncio.get_running_loop()

    async def on_the_loop() -> str:
        return "from the loop"

    def in_a_thread() -> str:
        with _sdk.claim_anyio_worker_thread(loop):
            return anyio.from_thread.run(on_the_loop)

    assert await loop.run_in_executor(None, in_a_thread) == "from the loop"


def test_sse_starlette_still_has_what_the_answer_stream_uses_and_the_sdk_still_answers_with_it() -> None:
    from mcp.server import streamable_http
    from sse_starlette import EventSourceResponse

    async def no_events() -> Any:
        yield {"data": "x"}

    stream = EventSourceResponse(no_events())
    missing = [name for name in _sdk.EVENT_SOURCE_ATTRIBUTES if not hasattr(stream, name)]
    assert not missing, f"sse-starlette's EventSourceResponse lost {missing}"
    assert vars(streamable_http)["EventSourceResponse"] is EventSourceResponse  # what the SDK answers with

    class Mine(EventSourceResponse):
        pass

    _sdk.answer_posts_with(Mine)
    try:
        assert vars(streamable_http)["EventSourceResponse"] is Mine
    finally:
        _sdk.answer_posts_with(EventSourceResponse)


def test_the_session_manager_still_builds_its_transports_by_the_name_it_imported() -> None:
    from mcp.server import streamable_http_manager
    from mcp.server.streamable_http import StreamableHTTPServerTransport

    assert vars(streamable_http_manager)["StreamableHTTPServerTransport"] is StreamableHTTPServerTransport

    class Mine(StreamableHTTPServerTransport):
        pass

    _sdk.build_session_transports_with(Mine)
    try:
        manager = streamable_http_manager.StreamableHTTPSessionManager(
            _sdk.lowlevel_server_of(MCPServer("names"))
        )
        assert isinstance(manager._admit_session(None), Mine)  # how it opens a session
        assert all(isinstance(transport, Mine) for transport in _sdk.session_transports(manager).values())
    finally:
        _sdk.build_session_transports_with(StreamableHTTPServerTransport)


@pytest.mark.anyio
async def test_asyncios_loop_shows_the_callbacks_ready_to_run() -> None:
    """What a PostgreSQL batch reads before it hands the next one over (`store/batches.py`)."""
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: None)
    assert _sdk.loop_has_ready_callbacks(loop)
    idle = asyncio.new_event_loop()
    try:
        assert not _sdk.loop_has_ready_callbacks(idle)
    finally:
        idle.close()
