"""A project's server built in memory, as its tests use it: the settings of this test's
environment, the tools of its `tools` package, its task runs stopped and the idempotency table
closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType

from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.server.app import create_server
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.server.startup import load_settings


@asynccontextmanager
async def built_server(
    settings_class: type[CoreSettings], tools: ModuleType
) -> AsyncIterator[ResilientServer]:
    """The server `<slug> serve` would build here, without serving it (`Client(server)` talks to it)."""
    server = create_server(load_settings(settings_class), tools)
    try:
        yield server
    finally:
        await server.tasks.close()  # task runs still going stay in the table, as at a shutdown
        await server.store.close()
