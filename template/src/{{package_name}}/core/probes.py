# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Probes for orchestrators, served over HTTP beside /mcp and without authentication.

`GET /livez` answers 200 while the process serves. It touches no dependency: a slow
database must not get a healthy process restarted (readiness is another probe's job).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

LIVEZ_PATH = "/livez"


async def livez(request: Request) -> Response:
    """200 for as long as the process can answer at all."""
    return JSONResponse({"status": "live"})


def add_probes(server: MCPServer[Any]) -> None:
    """Register the probe routes on the server's HTTP app (call before serving HTTP)."""
    server.custom_route(LIVEZ_PATH, methods=["GET"], include_in_schema=False)(livez)
