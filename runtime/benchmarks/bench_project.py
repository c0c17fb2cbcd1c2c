"""The project the benchmarks measure and the runtime modules that serve it, in either layout.

from bench_project import core, project_module
store = core("store")              # resilient_mcp.store, or <package>.core._idempotency
project = project_module("project")

By default the project is the library's stand-in, tests/sample_project (package sample_server),
served by the library in this environment. `BENCH_PROJECT_ROOT` names another checkout to measure
instead (a bench run as a worker in that project's environment, e.g. by `bench_idempotent_calls.py
--against DIR`): a project on resilient-mcp, or one rendered before the move whose core is vendored
in `<package>/core/` (`core._app`; release 0.2.0: `core.app`).
"""

from __future__ import annotations

import importlib
import os
import tomllib
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

SAMPLE_PROJECT = Path(__file__).resolve().parent.parent / "tests" / "sample_project"
ROOT = Path(os.environ.get("BENCH_PROJECT_ROOT") or SAMPLE_PROJECT).resolve()
# Where a project that vendored its core kept the library's modules the benchmarks use.
VENDORED = {
    "store": "idempotency",
    "store.sqlite": "idempotency.sqlite",
    "store.postgres": "idempotency.postgres",
    "server.app": "app",
    "server.startup": "startup",
}


@cache
def package_name() -> str:
    """The import name of the project's package: the one folder the wheel packages from src/."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        pyproject = tomllib.load(file)
    packages = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return str(Path(packages[0]).name)


def project_module(module: str = "") -> ModuleType:
    """The project's package, or one of its own modules (`module` relative to it, e.g. "settings")."""
    name = f"{package_name()}.{module}" if module else package_name()
    try:
        found = importlib.import_module(name)
    except ImportError as exc:
        raise SystemExit(
            f"{name} cannot be imported ({exc}); run the benchmark with the project's environment,"
            " e.g. `cd runtime && uv sync && .venv/bin/python benchmarks/...`"
        ) from None
    source = Path(found.__file__ or ROOT).resolve()
    # Told to measure another checkout: a package imported from elsewhere would mislabel the figures.
    if os.environ.get("BENCH_PROJECT_ROOT") and not source.is_relative_to(ROOT):
        raise SystemExit(f"{name} is imported from {source}, not from {ROOT}; use that project's environment")
    return found


def core(module: str) -> Any:
    """A runtime module by its library name (e.g. "server.app"): the library's, or where the
    project's vendored core kept it (Any: the two layouts' modules differ in their details)."""
    vendored = VENDORED.get(module)
    if vendored is not None and uses_vendored_core():
        package = package_name()
        for name in (f"{package}.core._{vendored}", f"{package}.core.{vendored}"):
            try:
                return importlib.import_module(name)
            except ImportError:
                continue
        raise SystemExit(f"{package}.core has no module {vendored}: is {ROOT} a project of this template?")
    return importlib.import_module(f"resilient_mcp.{module}")


@cache
def uses_vendored_core() -> bool:
    """Whether the project keeps its own copy of the core (rendered before resilient-mcp)."""
    return (ROOT / "src" / package_name() / "core" / "_app.py").exists() or (
        ROOT / "src" / package_name() / "core" / "app.py"
    ).exists()
