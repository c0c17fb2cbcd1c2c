"""The 2025-11-25 methods MCPServer leaves unserved: `logging/setLevel` and `resources/subscribe`.

2026-07-28 replaced both (a per-request log level in `_meta`, which the SDK honours, and
`subscriptions/listen`, which it serves). For clients of the handshake era the core accepts
and logs the level asked for (the SDK sends a handler's `ctx.log` lines unfiltered in that
era, with no hook to filter them), and keeps per connection the URIs followed. An owner
announces a change once, with `ctx.notify_resource_updated(uri)`: the SDK's subscription bus
carries it to `subscriptions/listen` streams, and the listener here sends
`notifications/resources/updated` to each handshake-era session that subscribed to the URI.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import ResourceUpdated, ServerEvent, SubscriptionBus
from mcp.types import (
    EmptyResult,
    ResourceUpdatedNotificationParams,
    SetLevelRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from resilient_mcp.sdk_fence import connection_of
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)
MAX_SUBSCRIPTIONS_PER_SESSION = 1024  # what one session may follow; a client sends URIs freely


class HandshakeEraMethods:
    """Per-connection resource subscriptions, gone with their connections."""

    def __init__(self, bus: SubscriptionBus) -> None:
        self.subscribed: weakref.WeakKeyDictionary[Connection, set[str]] = weakref.WeakKeyDictionary()
        self._sending: set[asyncio.Task[None]] = set()
        bus.subscribe(self._on_event)

    async def set_level(
        self, ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams
    ) -> EmptyResult:
        log.info("client_log_level", client_level=params.level)
        return EmptyResult()

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        uris = self.subscribed.setdefault(connection_of(ctx.session), set())
        if len(uris) < MAX_SUBSCRIPTIONS_PER_SESSION or str(params.uri) in uris:
            uris.add(str(params.uri))
        else:  # bounded: the oldest stays, the new one is refused in the log, not in memory
            log.warning("subscription_refused", reason="too many", limit=MAX_SUBSCRIPTIONS_PER_SESSION)
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        self.subscribed.get(connection_of(ctx.session), set()).discard(str(params.uri))
        return EmptyResult()

    def _on_event(self, event: ServerEvent) -> None:
        """Called by the bus on the event loop, for every event any `ctx.notify_*` published."""
        if not isinstance(event, ResourceUpdated):
            return
        for connection, uris in list(self.subscribed.items()):
            if event.uri in uris:
                task = asyncio.get_running_loop().create_task(self._send(connection, event.uri))
                self._sending.add(task)  # kept until done: the loop holds tasks weakly
                task.add_done_callback(self._sending.discard)

    @staticmethod
    async def _send(connection: Connection, uri: str) -> None:
        """On the connection's standalone stream, as `ServerSession.send_resource_updated` sends it."""
        params = ResourceUpdatedNotificationParams(uri=uri).model_dump(by_alias=True, mode="json")
        await connection.notify("notifications/resources/updated", params)  # best effort: never raises
