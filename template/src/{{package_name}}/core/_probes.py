# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Probes for orchestrators, served over HTTP beside /mcp and without authentication.

`GET /livez` answers 200 while the process serves. It touches no dependency: a slow
database must not get a healthy process restarted (readiness is the other probe's job).
`GET /readyz` gives the verdict of the dependency checks health_check reports, which run in
the background (see `_readiness`): 200 when none is failing, 503 with the failing ones
otherwise, 503 `starting` before the first verdict, and 503 while the server drains after
SIGTERM. It answers within `READYZ_WAIT_S`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ._readiness import Readiness

LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"


async def livez(request: Request) -> Response:
    """200 for as long as the process can answer at all."""
    return JSONResponse({"status": "live"})


def add_probes(server: MCPServer[Any], readiness: Readiness, draining: Callable[[], bool]) -> None:
    """Register the probe routes on the server's HTTP app (call before building it)."""

    async def readyz(request: Request) -> Response:
        if draining():
            return JSONResponse({"status": "draining", "failing": {}}, status_code=503)
        results = await readiness.verdict()
        if results is None:
            return JSONResponse({"status": "starting", "failing": {}}, status_code=503)
        failing = {
            name: result.model_dump() for name, result in results.items() if result.status == "failing"
        }
        if failing:
            return JSONResponse({"status": "failing", "failing": failing}, status_code=503)
        degraded = any(result.status == "degraded" for result in results.values())
        return JSONResponse({"status": "degraded" if degraded else "ok", "failing": {}})

    server.custom_route(LIVEZ_PATH, methods=["GET"], include_in_schema=False)(livez)
    server.custom_route(READYZ_PATH, methods=["GET"], include_in_schema=False)(readyz)
