"""tools/list is the same on every replica and every start, whatever the import order.

health_check first, then tools/ by module name, then file order: a client that caches the list
(`ttlMs`) or diffs it (`<slug> contract`) sees no reshuffle.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest
from mcp import Client

from resilient_mcp.authoring.tool import spec_of
from resilient_mcp.server.resilient_server import ResilientServer

pytestmark = pytest.mark.anyio


def declared_in_file_order(package: ModuleType) -> list[str]:
    names: list[str] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        defined = [v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__]
        specs = [spec for spec in map(spec_of, defined) if spec is not None]
        specs.sort(key=lambda spec: spec.fn.__code__.co_firstlineno)
        names.extend(spec.name for spec in specs)
    return names


async def test_tools_are_listed_health_check_first_then_by_module_then_in_file_order(
    server: ResilientServer, sample_tools: ModuleType
) -> None:
    async with Client(server) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
    assert listed == ["health_check", *declared_in_file_order(sample_tools)]
