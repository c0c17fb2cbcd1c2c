"""The project's package for the benchmarks, found from pyproject.toml, so that they need no rendering.

from bench_project import package
idempotency = package("core._idempotency")

`BENCH_PROJECT_ROOT` names another checkout to measure instead (a bench run as a worker in
that project's environment, e.g. by `bench_idempotent_calls.py --against DIR`).
"""

from __future__ import annotations

import importlib
import os
import tomllib
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(os.environ.get("BENCH_PROJECT_ROOT") or Path(__file__).resolve().parent.parent).resolve()


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
        found = importlib.import_module(name)
    except ImportError as exc:
        # Release 0.2.0 named the core's modules without the underscore (core.app, core.idempotency).
        released = name.replace(".core._", ".core.", 1)
        try:
            found = importlib.import_module(released)
        except ImportError:
            raise SystemExit(
                f"{name} cannot be imported ({exc}); run the benchmark with the project's environment,"
                " e.g. `.venv/bin/python benchmarks/...` after `pip install -e .[dev]`"
            ) from None
    source = Path(found.__file__ or ROOT).resolve()
    # Told to measure another checkout: a package imported from elsewhere would mislabel the figures.
    if os.environ.get("BENCH_PROJECT_ROOT") and not source.is_relative_to(ROOT):
        raise SystemExit(f"{name} is imported from {source}, not from {ROOT}; use that project's environment")
    return found
