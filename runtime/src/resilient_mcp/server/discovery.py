"""Finds the tools: every module in the tools/ package is imported, every `@tool` served.

The same modules hold the owner's `@resource`, `@prompt` and `@completion` functions, and
the owner's `@lifespan` resources and `@dependency` checks.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.primitives import (
    CompletionSpec,
    Primitives,
    PromptSpec,
    ResourceSpec,
    primitive_of,
)
from resilient_mcp.authoring.resources import DependencySpec, LifespanFunction, dependency_of, is_lifespan
from resilient_mcp.authoring.tool import ToolSpec, spec_of


def discover_tools(package: ModuleType) -> list[ToolSpec]:
    """The `@tool` functions defined in the package's modules, by module name, then in file order.

    Raises FatalError when a module fails to import or two tools share a name: both
    would otherwise surface as a server that starts and then misbehaves.
    """
    specs: list[ToolSpec] = []
    origin: dict[str, str] = {}
    for module_name, value in _defined(package):
        spec = spec_of(value)
        if spec is None:
            continue
        if spec.name in origin:
            raise FatalError(
                f"two tools are named {spec.name!r} (in {origin[spec.name]} and {module_name})",
                "rename one of them with @tool(name=...)",
            )
        origin[spec.name] = module_name
        specs.append(spec)
    return specs


def discover_primitives(package: ModuleType) -> Primitives:
    """The `@resource`, `@prompt` and `@completion` functions, by module name, then in file order.

    Raises FatalError for two resources at one URI, two prompts of one name, two completers of
    one target, or a completer whose target is neither a prompt nor a resource template.
    """
    found: dict[type, list[Any]] = {ResourceSpec: [], PromptSpec: [], CompletionSpec: []}
    origin: dict[tuple[type, str], str] = {}
    for module_name, value in _defined(package):
        spec = primitive_of(value)
        if spec is None:
            continue
        key = _identity(spec)
        if (type(spec), key) in origin:
            raise FatalError(
                f"two {_KINDS[type(spec)]} are {key!r} (in {origin[type(spec), key]} and {module_name})",
                "rename one of them",
            )
        origin[type(spec), key] = module_name
        found[type(spec)].append(spec)
    primitives = Primitives(
        tuple(found[ResourceSpec]), tuple(found[PromptSpec]), tuple(found[CompletionSpec])
    )
    targets = {p.name for p in primitives.prompts} | {r.uri for r in primitives.resources if r.is_template}
    for completer in primitives.completions:
        if completer.target not in targets:
            raise FatalError(
                f"@completion({completer.target!r}) on {completer.name} completes nothing: "
                f"no prompt and no resource template has that name or URI",
                "name a prompt or a resource template URI declared in tools/",
            )
    return primitives


_KINDS: dict[type, str] = {
    ResourceSpec: "resources at the URI",
    PromptSpec: "prompts named",
    CompletionSpec: "completers for",
}


def _identity(spec: ResourceSpec | PromptSpec | CompletionSpec) -> str:
    if isinstance(spec, ResourceSpec):
        return spec.uri
    if isinstance(spec, PromptSpec):
        return spec.name
    return spec.target


def discover_resources(package: ModuleType) -> tuple[list[LifespanFunction], list[DependencySpec]]:
    """The `@lifespan` and `@dependency` functions defined in the package's modules, in the same order."""
    lifespans: list[LifespanFunction] = []
    dependencies: list[DependencySpec] = []
    for _, value in _defined(package):
        if is_lifespan(value):
            lifespans.append(value)
        spec = dependency_of(value)
        if spec is not None:
            dependencies.append(spec)
    return lifespans, dependencies


def _defined(package: ModuleType) -> Iterator[tuple[str, Any]]:
    """(module name, value) for what each module of the package defines, by module name, then in
    file order. What a module imports from another is served, opened or checked where it is defined."""
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module_name = f"{package.__name__}.{info.name}"
        for value in vars(_import(module_name)).values():
            if getattr(value, "__module__", None) == module_name:
                yield module_name, value


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except FatalError:
        raise  # the module's own verdict (a missing secret, say) says what to fix
    except Exception as exc:
        raise FatalError(
            f"cannot import tools module {module_name}: {type(exc).__name__}: {_reason(exc)} "
            f"(at {_where(exc)})",
            "fix the module or move it out of the tools/ package",
        ) from None


def _reason(exc: Exception) -> str:
    # A SyntaxError's text repeats its file and line, given once by `_where`.
    return str(exc.msg) if isinstance(exc, SyntaxError) else str(exc)


def _where(exc: Exception) -> str:
    """The owner's file and line: a SyntaxError's own, else the deepest frame that is not the
    import machinery's (`<frozen importlib._bootstrap>`)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    frame = ([frame for frame in frames if not frame.filename.startswith("<")] or frames)[-1]
    return f"{frame.filename}:{frame.lineno}"
