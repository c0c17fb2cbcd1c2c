# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Finds the tools: every module in the tools/ package is imported, every `@tool` served."""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from types import ModuleType

from ._errors import FatalError
from ._tool import ToolSpec, spec_of


def discover_tools(package: ModuleType) -> list[ToolSpec]:
    """The `@tool` functions defined in the package's modules, by module name, then in file order.

    Raises FatalError when a module fails to import or two tools share a name: both
    would otherwise surface as a server that starts and then misbehaves.
    """
    specs: list[ToolSpec] = []
    origin: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module_name = f"{package.__name__}.{info.name}"
        module = _import(module_name)
        for value in vars(module).values():
            spec = spec_of(value)
            # A tool imported from another module is served where it is defined.
            if spec is None or getattr(spec.fn, "__module__", None) != module_name:
                continue
            if spec.name in origin:
                raise FatalError(
                    f"two tools are named {spec.name!r} (in {origin[spec.name]} and {module_name})",
                    "rename one of them with @tool(name=...)",
                )
            origin[spec.name] = module_name
            specs.append(spec)
    return specs


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise FatalError(
            f"cannot import tools module {module_name}: {type(exc).__name__}: {exc} "
            f"(at {where.filename}:{where.lineno})",
            "fix the module or move it out of the tools/ package",
        ) from None
