# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`ResilientServer`: the SDK's MCPServer with one seam that sees every tool call."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult

from .health import CallStats
from .settings import CoreSettings
from .stdio_guard import ProtocolPipes
from .tool import ToolSpec


class ResilientServer(MCPServer[Any]):
    """MCPServer whose `call_tool` counts every call; serves stdio over private pipes."""

    def __init__(
        self, name: str, *, version: str, stats: CallStats, app_settings: CoreSettings, **kwargs: Any
    ) -> None:
        super().__init__(name, version=version, **kwargs)
        self.stats = stats
        self.app_settings = app_settings
        self.specs: dict[str, ToolSpec] = {}

    def register(self, spec: ToolSpec) -> None:
        """Serve one `@tool` function with its description and annotations."""
        self.specs[spec.name] = spec
        self.add_tool(
            spec.fn,
            name=spec.name,
            title=spec.title,
            description=spec.description,
            annotations=spec.annotations(),
        )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        self.stats.in_flight += 1
        try:
            return await super().call_tool(name, arguments, context)
        finally:
            self.stats.in_flight -= 1
            self.stats.calls += 1

    async def serve_stdio(self, pipes: ProtocolPipes) -> None:
        """Serve JSON-RPC on the pipes `claim_stdio` set aside (the SDK's stdio loop, explicit streams)."""
        reader = anyio.wrap_file(pipes.reader())
        writer = anyio.wrap_file(pipes.writer())
        async with stdio_server(reader, writer) as (read_stream, write_stream):
            # MCPServer.run_stdio_async does the same, on fds 0/1 it would restore at exit.
            lowlevel = self._lowlevel_server
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
