# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The project's package for the benchmarks, found from pyproject.toml, so that they need no rendering.

from bench_project import package
idempotency = package("core._idempotency")
"""

from __future__ import annotations

import importlib
import tomllib
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


@cache
def package_name() -> str:
    """The import name of the project's package: the one folder the wheel packages from src/."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        pyproject = tomllib.load(file)
    packages = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return str(Path(packages[0]).name)


def package(module: str = "") -> ModuleType:
    """The project's package, or one of its modules (`module` relative to it, e.g. "project")."""
    name = f"{package_name()}.{module}" if module else package_name()
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise SystemExit(
            f"{name} cannot be imported ({exc}); run the benchmark with the project's environment,"
            " e.g. `.venv/bin/python benchmarks/...` after `pip install -e .[dev]`"
        ) from None
