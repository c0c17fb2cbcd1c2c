"""The public API is `resilient_mcp.__all__` (a project re-exports it from `<package>.core`);
every other module of the library is internal, and the library imports no project's module."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import resilient_mcp
import sample_server.core
from resilient_mcp.server.app import create_server
from resilient_mcp.server.startup import load_settings
from sample_server import tools as project_tools
from sample_server.project import PACKAGE
from sample_server.settings import Settings

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
# What a project's own `project.py` builds and hands to the library: the library's, not the tools'.
PROJECT_API = {"Project"}
# The library's rooms, lowest first (resilient_mcp/__init__.py): a new one is a decision, made here.
ROOMS = {
    "records",
    "project",
    "sdk_fence",
    "sdk_models",
    "telemetry",
    "authoring",
    "store",
    "calls",
    "tasks",
    "skills",
    "stdio",
    "http",
    "server",
    "commands",
    "testing",
}
LIBRARY_DIR = Path(resilient_mcp.__file__).parent


@pytest.mark.smoke
def test_the_public_api_is_exactly_the_pinned_names() -> None:
    assert set(resilient_mcp.__all__) == PUBLIC_API | PROJECT_API
    for name in PUBLIC_API | PROJECT_API:
        assert getattr(resilient_mcp, name) is not None


def test_a_projects_core_re_exports_the_same_objects() -> None:
    assert set(sample_server.core.__all__) == PUBLIC_API
    for name in PUBLIC_API:
        assert getattr(sample_server.core, name) is getattr(resilient_mcp, name), name


def test_the_library_is_the_pinned_rooms() -> None:
    assert {info.name for info in pkgutil.iter_modules(resilient_mcp.__path__)} == ROOMS


def test_the_library_imports_no_project_module() -> None:
    """A project's settings.py and tools/ are handed in by its command (`run(PROJECT, argv)`) or
    loaded by the name in its `Project`: the library names no project, so no owner's edit can
    break its import order."""
    reached: set[str] = set()
    for path in LIBRARY_DIR.rglob("*.py"):
        depth = len(path.relative_to(LIBRARY_DIR).parts)  # x.py is 1, store/x.py is 2
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > depth:  # above resilient_mcp/
                reached.add(f"{path.name}: {'.' * node.level}{node.module or ''}")
            absolute = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            reached.update(f"{path.name}: {name}" for name in absolute if name.split(".")[0] == PACKAGE)
    assert not reached, f"the library imports project modules: {sorted(reached)}"


def library_imports() -> dict[str, set[str]]:
    """Each module of the library (`server.app`, `store.sql`, `store` for its `__init__`, ...) and
    the library's modules it imports, at any place in the file: inside functions and under
    `if TYPE_CHECKING:` too. `from resilient_mcp.store import sql` imports `store.sql`."""
    modules = {
        ".".join(path.relative_to(LIBRARY_DIR).with_suffix("").parts).removesuffix(".__init__"): path
        for path in LIBRARY_DIR.rglob("*.py")
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name.removeprefix("resilient_mcp.") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module != "resilient_mcp" and not node.module.startswith("resilient_mcp."):
                    continue
                base = node.module.removeprefix("resilient_mcp").removeprefix(".")
                targets = [".".join(filter(None, [base, alias.name])) for alias in node.names]
                targets = [target if target in graph else base for target in targets]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - (node.level - 1)])
                targets = [".".join(filter(None, [base, node.module]))] if node.module else []
                targets += [".".join(filter(None, [base, alias.name])) for alias in node.names]
            else:
                continue
            graph[name].update(target for target in targets if target in graph and target != name)
    return graph


def test_no_two_library_modules_import_each_other_even_for_types() -> None:
    """The library's modules stand in layers (docs/architecture.md): a module that imports one above
    it, even for a type only, makes a circle, and the route of a call harder to follow."""
    graph = library_imports()
    assert "calls.tool_call" in graph["server.resilient_server"], "the scan reads the imports"
    assert "store" in graph["server.app"], "the scan reads a package's own imports"

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
    class OtherSettings(resilient_mcp.CoreSettings):
        pass

    server = create_server(load_settings(Settings), project_tools)
    try:
        assert resilient_mcp.current_settings(Settings) is server.app_settings
        assert resilient_mcp.current_settings() is server.app_settings
        with pytest.raises(TypeError, match="built with Settings, not OtherSettings"):
            resilient_mcp.current_settings(OtherSettings)
    finally:
        await server.store.close()
