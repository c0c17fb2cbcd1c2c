"""The public API is what `<package>.core` exports; everything else in core/ is private by name."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import resilient_mcp as core
from resilient_mcp.server.app import create_server
from resilient_mcp.server.startup import load_settings
from sample_server import tools as project_tools
from sample_server.settings import Settings

# Modules of the package outside core/ that core/ may import: template-owned, written at copy time.
TEMPLATE_MODULES_BESIDE_CORE = {"project"}

# A change here is a change owners see: say it in the CHANGELOG's Upgrading notes.
PUBLIC_API = {
    "Check",
    "Context",
    "CoreSettings",
    "FatalError",
    "Part",
    "PartialResult",
    "Reconciled",
    "ResilientServer",
    "ServerError",
    "TerminalError",
    "ToolInputError",
    "TransientError",
    "cancelled",
    "completion",
    "current_settings",
    "dependency",
    "lifespan",
    "prompt",
    "resource",
    "shared",
    "tool",
}
# Modules kept so that code written against template 0.2 and older still imports.
COMPATIBILITY_MODULES = {"server", "settings"}


@pytest.mark.smoke
def test_the_public_api_is_exactly_the_pinned_names() -> None:
    assert set(core.__all__) == PUBLIC_API
    for name in PUBLIC_API:
        assert getattr(core, name) is not None


def test_every_other_module_of_core_is_private_by_name() -> None:
    public = {info.name for info in pkgutil.iter_modules(core.__path__) if not info.name.startswith("_")}
    assert public == COMPATIBILITY_MODULES


def test_the_compatibility_modules_export_the_public_objects() -> None:
    from resilient_mcp import server, settings

    assert server.ResilientServer is core.ResilientServer
    assert settings.CoreSettings is core.CoreSettings


def test_the_core_imports_no_owner_module() -> None:
    """settings.py and tools/ are the owner's: the entry point hands them in, so the core has no
    import circle through them and an owner's edit there cannot break its import order."""
    core_dir = Path(core.__file__).parent
    reached: set[str] = set()
    for path in core_dir.rglob("*.py"):
        depth = len(path.relative_to(core_dir).parts)  # core/x.py is 1, core/_idempotency/x.py is 2
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > depth:  # above core/
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                reached.update(f"{path.name}: {name}" for name in names)
    outside = {entry for entry in reached if entry.split(": ")[1] not in TEMPLATE_MODULES_BESIDE_CORE}
    assert not outside, f"core/ imports owner modules: {sorted(outside)}"


def core_imports() -> dict[str, set[str]]:
    """Each core module (`_server`, `_idempotency.sql`, ...) and the core modules it imports, at
    any place in the file: inside functions and under `if TYPE_CHECKING:` too."""
    core_dir = Path(core.__file__).parent
    modules = {
        ".".join(path.relative_to(core_dir).with_suffix("").parts).removesuffix(".__init__"): path
        for path in core_dir.rglob("*.py")
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            targets = [node.module] if node.module else [alias.name for alias in node.names]
            for target in targets:
                imported = ".".join([*base, *target.split(".")]).removeprefix(".")
                if imported in graph and imported != name:
                    graph[name].add(imported)
    return graph


def test_no_two_core_modules_import_each_other_even_for_types() -> None:
    """The core's modules stand in layers (docs/architecture.md): a module that imports one above
    it, even for a type only, makes a circle, and the route of a call harder to follow."""
    graph = core_imports()
    assert "_tool_call" in graph["_server"], "the scan reads the imports"

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(graph[name])
        return False

    circles = sorted(f"{a} -> {b} -> ... -> {a}" for a in graph for b in graph[a] if reaches(b, a))
    assert circles == [], circles


@pytest.mark.anyio
async def test_a_tool_reads_the_settings_the_server_was_built_with() -> None:
    class OtherSettings(core.CoreSettings):
        pass

    server = create_server(load_settings(Settings), project_tools)
    try:
        assert core.current_settings(Settings) is server.app_settings
        assert core.current_settings() is server.app_settings
        with pytest.raises(TypeError, match="built with Settings, not OtherSettings"):
            core.current_settings(OtherSettings)
    finally:
        await server.store.close()
