# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Probes for orchestrators, served over HTTP beside /mcp and without authentication.

`GET /livez` answers 200 while the process serves. It touches no dependency: a slow
database must not get a healthy process restarted (readiness is the other probe's job).
`GET /readyz` runs the dependency checks health_check reports: 200 when none is failing,
503 with the failing ones otherwise, and 503 while the server drains after SIGTERM.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"


async def livez(request: Request) -> Response:
    """200 for as long as the process can answer at all."""
    return JSONResponse({"status": "live"})


def add_probes(
    server: MCPServer[Any],
    health: Callable[[], Awaitable[BaseModel]],
    draining: Callable[[], bool],
) -> None:
    """Register the probe routes on the server's HTTP app (call before building it)."""

    async def readyz(request: Request) -> Response:
        if draining():
            return JSONResponse({"status": "draining", "failing": {}}, status_code=503)
        report = (await health()).model_dump(mode="json")
        failing = {name: check for name, check in report["checks"].items() if check["status"] == "failing"}
        if failing:
            return JSONResponse({"status": "failing", "failing": failing}, status_code=503)
        return JSONResponse({"status": report["status"], "failing": {}})

    server.custom_route(LIVEZ_PATH, methods=["GET"], include_in_schema=False)(livez)
    server.custom_route(READYZ_PATH, methods=["GET"], include_in_schema=False)(readyz)
