"""HTTP 429 with `Retry-After` for a call that a limit refuses, before its body is read.

A 2026-07-28 request names its method and tool in headers (`Mcp-Method`, `Mcp-Name`; the SDK
refuses a request whose body says otherwise), so a `tools/call` can be told from the rest
without parsing. A `resources/read`, `prompts/get` or `completion/complete` meets the same
server-wide limits as a tool call (`calls.primitive_bounds`), so it is refused here alike. The gate
sits inside the SDK's auth middleware, where the caller is known, and asks the same limits
the core enforces, without taking anything: the core takes the call's share when it runs the
call. A 2025-11-25 request carries no such headers; it reaches the core, which answers
`rate_limited` in the tool result (a JSON-RPC error for the other primitives), as it does for
a call that passed the gate but lost a race for the last slot. With `AUTH=oauth` the gate first
asks the scope step-up check (`http.scope_step_up`): a call the token may not make gets 403, not 429.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, decode_header_value
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from resilient_mcp.authoring.outcomes import RATE_LIMITED_CODE
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.callers import caller
from resilient_mcp.calls.primitive_bounds import BOUNDED_METHODS
from resilient_mcp.calls.rate_limits import CallLimits
from resilient_mcp.http.asgi_json import send_json
from resilient_mcp.http.scope_step_up import ScopeStepUp


class RateLimitGate:
    """ASGI middleware around the /mcp route: a call POST over a limit gets 429 at once.

    One needing a scope the token lacks gets the step-up 403 first, as the core checks scopes first.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: CallLimits,
        tools: Callable[[str], ToolSpec | None],
        step_up: ScopeStepUp | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.tools = tools
        self.step_up = step_up

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")  # set by the auth middleware when auth is on
        turned_away = user is not None and not user.is_authenticated  # its 401 comes next, not a 429
        if scope["type"] == "http" and scope["method"] == "POST" and not turned_away:
            headers = Headers(scope=scope)
            method = headers.get(MCP_METHOD_HEADER)
            refused = None
            if method == "tools/call":
                name = decode_header_value(headers.get(MCP_NAME_HEADER))
                if name is not None and self.step_up is not None and await self.step_up.refused(name, send):
                    return
                spec = self.tools(name) if name is not None else None
                refused = self.limits.refusal(spec, caller()) if spec is not None else None
            elif method in BOUNDED_METHODS:
                refused = self.limits.refusal(None, caller())
            if refused is not None:
                await _too_many_requests(send, refused.message, refused.retry_after_s)
                return
        await self.app(scope, receive, send)


async def _too_many_requests(send: Send, message: str, retry_after_s: float) -> None:
    error = {
        "code": RATE_LIMITED_CODE,
        "message": f"rate_limited: {message}",
        "data": {"category": "rate_limited", "retryable": True, "retry_after_s": round(retry_after_s, 3)},
    }
    retry_after = (b"retry-after", str(max(1, math.ceil(retry_after_s))).encode())
    await send_json(send, 429, {"jsonrpc": "2.0", "id": None, "error": error}, [retry_after])


def gate_tool_calls(
    app: Starlette,
    *,
    path: str,
    limits: CallLimits,
    tools: Callable[[str], ToolSpec | None],
    step_up: ScopeStepUp | None = None,
) -> None:
    """Wrap the route of `path` in the gate: inside the SDK's auth middleware, which names the caller.

    Call it last of the route's wrappers, so a refused call's body is not even read.
    """
    for route in app.routes:
        if isinstance(route, Route) and route.path == path:
            route.app = RateLimitGate(route.app, limits=limits, tools=tools, step_up=step_up)
            return
    raise LookupError(f"the SDK's HTTP app has no route {path}")  # the SDK changed: fail loudly
