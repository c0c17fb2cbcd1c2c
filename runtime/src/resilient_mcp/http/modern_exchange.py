"""2026-07-28 requests over HTTP, answered in the request's own task.

For a single-exchange POST the SDK's entry (`handle_modern_request`) runs the handler beside a
watcher of the connection, in a task group of its own, and passes its notifications through a
memory stream, so that it can still turn the answer into SSE: on every call, though few calls
ever send a notification (what that costs: benchmarks/HTTP_LOAD.md). `ModernExchange` answers
the same requests with the SDK's own checks, in the SDK's order, and the SDK's own dispatch
(`serve_one`), but runs the handler in the request's task:

- the first notification the handler sends commits the answer to `text/event-stream` and is
  written at once, as with the SDK; a handler that ends without one is answered with
  `application/json` and the SDK's status for its error, as with the SDK;
- a call still running after WATCH_AFTER_S gets a watcher task, as every call does with the
  SDK: the client closing the connection cancels the call, and a stretch of the SDK's ping
  interval without an event commits SSE and sends its keep-alive ping. A call that ends before
  that runs to its end whatever the client does, and its answer is written to nobody.

Anything else goes to the SDK's entry unchanged: a handshake-era request, one without an
`Mcp-Method` header, `subscriptions/listen` (a stream of notifications, not an exchange), a
session manager set to answer in JSON only, and every request when `<PREFIX>HTTP_EXCHANGE=sdk`.
tests/test_modern_exchange.py holds both entries to the same answers, request by request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecurityMiddleware
from mcp.shared.inbound import (
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import HEADER_MISMATCH, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCRequest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from resilient_mcp.sdk_fence import modern_entry as sdk
from resilient_mcp.sdk_fence import session_manager_state

WATCH_AFTER_S = 1.0  # how long a call runs before a watcher task looks after its connection
_VERSION_HEADER = b"mcp-protocol-version"
_METHOD_HEADER = b"mcp-method"
_STREAMS = b"subscriptions/listen"  # a stream of notifications, left to the SDK


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


class ModernExchange:
    """ASGI app: a 2026-07-28 request answered here (see the module docstring), anything else by `sdk_app`."""

    def __init__(self, sdk_app: ASGIApp, manager: StreamableHTTPSessionManager, max_body_bytes: int) -> None:
        self.sdk_app = sdk_app
        self.manager = manager
        # The SDK's own body limit (413), as its entry has it.
        self._limited = RequestBodyLimitMiddleware(self._exchange, max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._ours(scope):
            await self._limited(scope, receive, send)
        else:
            await self.sdk_app(scope, receive, send)

    def _ours(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST":
            return False
        version = _header(scope, _VERSION_HEADER)
        method = _header(scope, _METHOD_HEADER)
        if version is None or method is None or method == _STREAMS:
            return False
        running, _ = session_manager_state(self.manager)
        # JSON-only answers (`json_response`, which this server never sets) are the SDK's: its
        # entry already runs those calls in the request's task.
        modern = version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
        return running and modern and not self.manager.json_response

    async def _exchange(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The SDK's `handle_modern_request` up to the dispatch, step for step; then `_answer`."""
        manager = self.manager
        request = Request(scope, receive)
        security = TransportSecurityMiddleware(manager.security_settings)
        refused = await security.validate_request(request, is_post=True)
        if refused is not None:
            await refused(scope, receive, send)
            return
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):  # the SDK's check, its `json_response` being off here
            await Response(status_code=406)(scope, receive, send)
            return
        body = await request.body()
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            parse_error = ErrorData(code=PARSE_ERROR, message="Parse error")
            await sdk._write(JSONRPCError(jsonrpc="2.0", id=None, error=parse_error), scope, receive, send)
            return
        if sdk._is_notification_shaped(decoded):
            await sdk._acknowledge_notification(decoded, request, scope, receive, send)
            return
        try:
            req = JSONRPCRequest.model_validate(decoded)
        except ValidationError:
            await sdk._write(sdk._INVALID_BODY, scope, receive, send)
            return
        duplicated = find_duplicated_routing_header(request.headers.items())
        if duplicated is not None:
            message = f"{duplicated} header appears more than once"
            rejection = InboundLadderRejection(code=HEADER_MISMATCH, message=message)
            await sdk._write_rejection(rejection, req.id, scope, receive, send)
            return
        verdict = classify_inbound_request(decoded, headers=dict(request.headers))
        if isinstance(verdict, InboundLadderRejection):
            await sdk._write_rejection(verdict, req.id, scope, receive, send)
            return
        _, lifespan_state = session_manager_state(manager)
        param_rejection = await sdk._mcp_param_rejection(manager.app, request, req, verdict, lifespan_state)
        if param_rejection is not None:
            await sdk._write_rejection(param_rejection, req.id, scope, receive, send)
            return
        await self._answer(request, req, verdict, lifespan_state, scope, receive, send)

    async def _answer(
        self,
        request: Request,
        req: JSONRPCRequest,
        verdict: Any,
        lifespan_state: Any,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        manager = self.manager
        connection = Connection.from_envelope(
            verdict.protocol_version, verdict.client_info, verdict.client_capabilities
        )
        stream = _ResponseStream(send)
        transport = TransportContext(kind="streamable-http", can_send_request=False, headers=request.headers)
        context = sdk._SingleExchangeDispatchContext(
            transport=transport,
            request_id=req.id,
            message_metadata=ServerMessageMetadata(request_context=request),
            progress_token=progress_token_from_params(req.params),
            # It has what the context calls on the SDK's memory stream: send(), and its errors.
            sink=cast("MemoryObjectSendStream[bytes]", stream),
        )
        served = serve_one(
            manager.app, context, req.method, req.params, connection=connection, lifespan_state=lifespan_state
        )
        watch = _Watch(receive, stream)
        with watch.call:
            try:
                reply = await sdk._to_jsonrpc_response(req.id, served)
            finally:
                watch.stop()
        if watch.call.cancelled_caught:
            return  # the client closed the connection: nobody to answer
        if stream.committed:
            await stream.end(sdk._sse_event(reply))
        else:
            await sdk._write(reply, scope, receive, send)


class _ResponseStream:
    """The answer's body once it is SSE; stands where the SDK's entry puts its memory stream.

    The handler's notifications and the watcher's pings share it, one write at a time.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = anyio.Lock()
        self.committed = False
        self.last_event = anyio.current_time()  # the SDK's first ping waits as long from the start

    async def send(self, event: bytes) -> None:
        """Write one SSE event (the SDK's sink protocol), committing the answer to SSE first."""
        async with self._lock:
            await self._commit()
            await self._send({"type": "http.response.body", "body": event, "more_body": True})
            self.last_event = anyio.current_time()

    async def ping(self) -> None:
        await self.send(b": ping\r\n\r\n")

    async def end(self, event: bytes) -> None:
        async with self._lock:
            await self._send({"type": "http.response.body", "body": event, "more_body": False})

    async def _commit(self) -> None:
        if not self.committed:
            self.committed = True
            await self._send({"type": "http.response.start", "status": 200, "headers": sdk._SSE_HEADERS})


class _Watch:
    """A watcher task for a call that runs past WATCH_AFTER_S; a timer until then, which costs
    next to nothing."""

    def __init__(self, receive: Receive, stream: _ResponseStream) -> None:
        self.call = anyio.CancelScope()  # the call's scope, entered by the caller
        self._receive = receive
        self._stream = stream
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._start)

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    def stop(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        stream, ping_s = self._stream, sdk._SSE_PING_INTERVAL
        try:
            while True:
                with anyio.move_on_after(stream.last_event + ping_s - anyio.current_time()):
                    while (await self._receive())["type"] != "http.disconnect":
                        pass
                    self.call.cancel()
                    return
                if anyio.current_time() >= stream.last_event + ping_s:
                    await stream.ping()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self.call.cancel()  # the connection is gone
