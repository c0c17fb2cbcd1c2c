"""Probes for orchestrators, served over HTTP beside /mcp and without authentication.

`GET /livez` answers 200 while the process serves. It touches no dependency: a slow
database must not get a healthy process restarted (readiness is the other probe's job).
`GET /readyz` gives the verdict of the dependency checks health_check reports, which run in
the background (see `server.readiness`): 200 when none is failing, 503 with the failing ones
otherwise, 503 `starting` before the first verdict, and 503 while the server drains after
SIGTERM. It answers within `READYZ_WAIT_S`.

Both check the Host header as /mcp does (421), so a page that rebinds its name to this server
reads nothing of it. They also accept the address the request reached, as `address:port`: what
a kubelet's `httpGet` (the pod's IP) and a container's HEALTHCHECK (127.0.0.1) send. A
rebinding page sends its own name, never this address, so that costs nothing in safety.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from resilient_mcp.http.bind import url_host
from resilient_mcp.server.readiness import Readiness

LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
PROBE_PATHS = frozenset({LIVEZ_PATH, READYZ_PATH})

Probe = Callable[[Request], Awaitable[Response]]


def add_probes(
    server: MCPServer[Any],
    readiness: Readiness,
    draining: Callable[[], bool],
    security: TransportSecuritySettings,
) -> None:
    """Register the probe routes on the server's HTTP app (call before building it)."""
    checks = TransportSecurityMiddleware(security)

    def host_checked(probe: Probe) -> Probe:
        async def checked(request: Request) -> Response:
            if not _names_own_address(request):
                refused = await checks.validate_request(request)
                if refused is not None:
                    return refused
            return await probe(request)

        return checked

    async def livez(request: Request) -> Response:
        """200 for as long as the process can answer at all."""
        return JSONResponse({"status": "live"})

    async def readyz(request: Request) -> Response:
        if draining():
            return JSONResponse({"status": "draining", "failing": {}}, status_code=503)
        results = await readiness.verdict()
        if results is None:
            return JSONResponse({"status": "starting", "failing": {}}, status_code=503)
        failing = {name: asdict(result) for name, result in results.items() if result.status == "failing"}
        if failing:
            return JSONResponse({"status": "failing", "failing": failing}, status_code=503)
        degraded = any(result.status == "degraded" for result in results.values())
        return JSONResponse({"status": "degraded" if degraded else "ok", "failing": {}})

    server.custom_route(LIVEZ_PATH, methods=["GET"], include_in_schema=False)(host_checked(livez))
    server.custom_route(READYZ_PATH, methods=["GET"], include_in_schema=False)(host_checked(readyz))


def _names_own_address(request: Request) -> bool:
    """Whether the Host header is the address and port the request reached (the port alone if 80)."""
    reached = request.scope.get("server")
    if not reached or reached[1] is None:
        return False
    address, port = url_host(reached[0]), reached[1]
    host = request.headers.get("host")
    return host == f"{address}:{port}" or (port == 80 and host == address)
