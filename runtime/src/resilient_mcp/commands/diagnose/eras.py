"""The two ways an MCP connection starts: the 2026-07-28 era and the 2025-11-25 handshake.

The first request fixes a connection's era. 2026-07-28: `server/discover`, and every
request carries the `_meta` envelope. 2025-11-25: `initialize`, then `initialized`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

Era = Literal["2026-07-28", "2025-11-25"]
MODERN: Era = "2026-07-28"
LEGACY: Era = "2025-11-25"
ERAS: tuple[Era, ...] = (MODERN, LEGACY)
CLIENT_INFO = {"name": "diagnose", "version": "1"}


class JsonRpcSession(Protocol):
    """What the probes need from a connection: requests with a time limit, and notifications."""

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = 10.0
    ) -> dict[str, Any]: ...

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None: ...


def envelope(era: Era) -> dict[str, Any]:
    """The `_meta` a 2026-07-28 request carries; empty for the handshake era."""
    if era != MODERN:
        return {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


def with_envelope(era: Era, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Request params for this era: the 2026-07-28 envelope rides in `_meta`."""
    merged = dict(params or {})
    if era == MODERN:
        merged["_meta"] = {**envelope(era), **merged.get("_meta", {})}
    return merged


def open_session(session: JsonRpcSession, era: Era, *, timeout: float = 10.0) -> dict[str, Any]:
    """Start the protocol in one era: `server/discover`, or `initialize` then `initialized`."""
    if era == MODERN:
        return session.request("server/discover", with_envelope(era), timeout=timeout)
    response = session.request(
        "initialize",
        {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
        timeout=timeout,
    )
    if "result" in response:
        session.notify("notifications/initialized")
    return response
