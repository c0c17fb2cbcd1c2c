"""Scope step-up (2026-07-28, `AUTH=oauth`): a call to a tool whose scopes the token lacks gets 403.

The challenge, `WWW-Authenticate: Bearer error="insufficient_scope", scope="..."` (RFC 6750 §3),
names every scope the call needs, the server's required ones and the tool's: in the 2026-07-28
flow the server names what the operation needs and the client adds what it was granted before,
so the new token serves this call and every other. The body is the SDK's own for its 403 (an
OAuth error object, not JSON-RPC), so a client sees one shape whichever scope was missing.

Only a 2026-07-28 request names its tool in headers (`Mcp-Name`), so it is refused here, before
its body is read or the tool begins; the rate-limit gate (`http.refusals`) asks this first,
as the core checks scopes before limits. A 2025-11-25 request names its tool only in its body,
read after this layer and its bounds; the core answers it `forbidden` in the tool result, which
every client shows, whether it can step up or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mcp.server.auth.routes import build_resource_metadata_url
from starlette.types import Send

from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.callers import missing_scopes
from resilient_mcp.http.asgi_json import send_json

if TYPE_CHECKING:
    from resilient_mcp.server.resilient_server import ResilientServer


class ScopeStepUp:
    """Answers a `tools/call` named in headers with 403 when its tool needs a scope the token lacks."""

    def __init__(
        self,
        *,
        required: Sequence[str],
        resource_metadata_url: str | None,
        tools: Callable[[str], ToolSpec | None],
    ) -> None:
        self.required = tuple(required)
        self.resource_metadata_url = resource_metadata_url
        self.tools = tools

    def needed(self, name: str) -> list[str] | None:
        """Every scope a call of `name` needs, when the caller's token lacks one of its tool's; else None."""
        spec = self.tools(name)
        if spec is None or not spec.scopes or not missing_scopes(spec.scopes):
            return None
        return list(dict.fromkeys([*self.required, *spec.scopes]))

    async def refused(self, name: str, send: Send) -> bool:
        """Send the 403 challenge for a call of `name` if its tool needs more scopes; whether it did."""
        needed = self.needed(name)
        if needed is None:
            return False
        scopes = " ".join(needed)  # RFC 6750: space-separated; scope tokens hold no quote or space
        description = f"calling {name} needs the scopes {scopes}"
        challenge = f'Bearer error="insufficient_scope", scope="{scopes}"'
        if self.resource_metadata_url is not None:
            challenge += f', resource_metadata="{self.resource_metadata_url}"'
        challenge += f', error_description="{description}"'
        body = {"error": "insufficient_scope", "error_description": description}
        await send_json(send, 403, body, [(b"www-authenticate", challenge.encode())])
        return True


def scope_step_up(server: ResilientServer) -> ScopeStepUp | None:
    """The step-up check for this server's HTTP app; None unless tools' scopes are enforced (oauth)."""
    auth = server.settings.auth
    if not server.scopes_enforced or auth is None:
        return None
    metadata_url = build_resource_metadata_url(auth.resource_server_url) if auth.resource_server_url else None

    def spec(name: str) -> ToolSpec | None:
        served = server.served.get(name)
        return served.spec if served is not None else None

    return ScopeStepUp(
        required=auth.required_scopes or (),
        resource_metadata_url=str(metadata_url) if metadata_url is not None else None,
        tools=spec,
    )
