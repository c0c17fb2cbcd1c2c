"""Checks of this repository: `nox` runs lint (the repository's, then the runtime library's), then
every test: the template's, the generated projects' and the library's own suite."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from pathlib import Path
from typing import Any

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "runtime_lint", "all"]

ROOT = Path(__file__).resolve().parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PYPROJECT, "test")
LINT_DEPS = nox.project.dependency_groups(PYPROJECT, "lint")
DOCS_DEPS = nox.project.dependency_groups(PYPROJECT, "docs")
# Material's banner about its successor, printed at every build: the choice is made in mkdocs.yml.
DOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}
# template/ holds Jinja: it is checked through rendered projects. docs/hooks: the site's reference pages.
OWN_PYTHON = ["tests", "noxfile.py", "docs/hooks"]
RUNTIME = ROOT / "runtime"
# Beside the library and its stand-in project, which nox installs editable by path.
RUNTIME_PYPROJECT = nox.project.load_toml(RUNTIME / "pyproject.toml")
RUNTIME_TEST_DEPS = nox.project.dependency_groups(RUNTIME_PYPROJECT, "test")
RUNTIME_LINT_DEPS = nox.project.dependency_groups(RUNTIME_PYPROJECT, "lint")
# The stand-in project's answers (tests/sample_project/.../project.py): the two sets the template's
# projects are generated with, the postgres one also testing the store on SQLite.
RUNTIME_VARIANTS = {
    "sqlite, strict": {"SAMPLE_PROJECT_BACKEND": "sqlite", "SAMPLE_PROJECT_STRICT": "true"},
    "postgres, lenient": {"SAMPLE_PROJECT_BACKEND": "postgres", "SAMPLE_PROJECT_STRICT": "false"},
}


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff (lint and format) and mypy --strict over the repository's own Python."""
    session.install(*LINT_DEPS, "-e", str(RUNTIME))  # the docs' hook imports the library
    session.run("ruff", "check", *OWN_PYTHON, *session.posargs)
    session.run("ruff", "format", "--check", *OWN_PYTHON)
    session.run("mypy")


@nox.session
def runtime_lint(session: nox.Session) -> None:
    """The runtime library (runtime/): ruff, mypy --strict, and its layers (import-linter)."""
    install_runtime_suite(session)
    session.install(*RUNTIME_LINT_DEPS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("lint-imports")  # the rooms layered, no circles


@nox.session(default=False)
def runtime(session: nox.Session) -> None:
    """The runtime library's suite in both variants (`nox` runs them in `all`, beside the others:
    tests/test_runtime_suite.py); arguments go to pytest."""
    install_runtime_suite(session)
    for variant, env in RUNTIME_VARIANTS.items():
        session.log(f"The library's suite, {variant}")
        session.run("pytest", "-n", "2", "--durations=10", *session.posargs, env=env)


def install_runtime_suite(session: nox.Session) -> None:
    """The library and its stand-in project, editable, with what the suite and its checks need."""
    session.install("-e", f"{RUNTIME}[postgres,otel]", "-e", str(RUNTIME / "tests" / "sample_project"))
    session.install(*RUNTIME_TEST_DEPS)
    session.chdir(RUNTIME)


# pytest-xdist workers, one per core of the 2-core machines this runs on: the generated tests keep
# both cores busy (each is a rendered project's suite, starting hundreds of server processes), and
# a third worker made the whole run longer (12 min against 11). Tests are sent one at a time
# (--maxschedchunk=1), the longest first, so that no worker queues a long test behind another
# (tests/conftest.py).
WORKERS = ["-n", "2", "--maxschedchunk=1"]


@nox.session(name="all")
def all_tests(session: nox.Session) -> None:
    """Every test in one run: the generated ones start first, the fast ones fill the gaps."""
    session.install(*TEST_DEPS)
    session.run("pytest", *WORKERS, "--durations=15", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The template's fast tests: questions, rendering, ruff on rendered projects, updates."""
    session.install(*TEST_DEPS)
    session.run("pytest", "-m", "not generated", "--durations=15", *session.posargs)


@nox.session
def generated(session: nox.Session) -> None:
    """The slow tests: rendered projects' mypy --strict, own tests and own `nox` sessions."""
    session.install(*TEST_DEPS)
    session.run("pytest", "-m", "generated", *WORKERS, "--durations=15", *session.posargs)


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml, docs/) built --strict, into a temporary folder or `-- DIR`.

    Its reference pages are read from the runtime library, installed here from runtime/; `nox`
    builds it too, and browses it, in tests/test_docs_site.py."""
    session.install("-e", str(RUNTIME), *DOCS_DEPS)
    site = Path(session.posargs[0]) if session.posargs else Path(session.create_tmp()) / "site"
    config = str(ROOT / "mkdocs.yml")
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        config,
        "--site-dir",
        str(site.resolve()),
        env=DOCS_ENV,
    )
    session.log(f"The site is in {site}; to read it: python3 -m http.server -d {site}")


@nox.session
def demo(session: nox.Session) -> None:
    """Create a server from this checkout and show it answering over stdio (`-- DIR` keeps it)."""
    session.install("copier>=9.19,<10")
    target = Path(session.posargs[0]) if session.posargs else Path(session.create_tmp()) / "demo-server"
    project = render_entry(session, "defaults", target.resolve())
    answers = matrix_answers("defaults")
    slug, prefix = answers["project_slug"], answers["env_prefix"]
    # Keep the demo's idempotency table out of the user's own state directory, and the
    # server's JSON log lines (one per call) out of the way of what the client shows.
    data_dir = project.parent / "demo-data"
    env = {f"{prefix}DATA_DIR": str(data_dir), f"{prefix}LOG_LEVEL": "warning"}
    # The project depends on resilient-mcp at this checkout's version, which PyPI may not have yet:
    # its wheel, built from the work tree, is where the install finds it first.
    wheels = library_wheel(session, Path(session.create_tmp()) / "wheels")
    # uv keeps a wheel by version: the one just built replaces any cached one of the same version.
    fresh = ["--reinstall-package", "resilient-mcp"] if session.venv_backend == "uv" else []
    session.install(*fresh, "-e", str(project), env=wheels)
    command = Path(session.bin) / slug
    session.run(slug, "check", env=env)
    # One JSON report: handshake in both protocol eras, tools/list size, health_check.
    session.run(slug, "diagnose", "--timeout", "60", env=env)  # a busy machine starts slowly
    # The SDK's client: tools, health_check, a bad input, an idempotent retry replayed.
    session.run("python", str(ROOT / "tests" / "stdio_client.py"), str(command), "serve", env=env)
    setting, executable = f"{prefix}DATA_DIR={shlex.quote(str(data_dir))}", shlex.quote(str(command))
    print(f"\nThe server is in {project}. With Node.js, the MCP Inspector in a browser:")
    print(f"  npx {inspector_pin().INSPECTOR} -e {setting} {executable}")
    print("Its handshake report again, from any directory:")
    print(f"{setting} {executable} diagnose")


def library_wheel(session: nox.Session, folder: Path) -> dict[str, str]:
    """The runtime library's wheel built into `folder`; the environment that installs from it."""
    module = load_tests_module("library_wheel")
    shutil.rmtree(folder, ignore_errors=True)
    session.log(f"Building the resilient-mcp wheel from {ROOT / 'runtime'}")
    found: dict[str, str] = module.find_links_environ(module.build_wheel_folder(folder))
    return found


def inspector_pin() -> Any:
    """The library's one pinned MCP Inspector (a module of constants), loaded as a file."""
    return load_module_file(
        "inspector_pin", RUNTIME / "src" / "resilient_mcp" / "commands" / "inspector_pin.py"
    )


def load_tests_module(name: str) -> Any:
    """A module of tests/ that imports nothing of the tests' (plain helpers), loaded as a file."""
    return load_module_file(f"template_test_{name}", ROOT / "tests" / f"{name}.py")


def load_module_file(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def matrix_answers(entry: str) -> dict[str, Any]:
    """The tests' answers for a MATRIX entry (tests/answers.py is plain data: load it as a file)."""
    module = load_tests_module("answers")
    found: dict[str, Any] = module.answers(**module.MATRIX[entry])
    return found


def render_entry(session: nox.Session, entry: str, destination: Path) -> Path:
    """`copier copy` of the work tree (uncommitted edits included) with a MATRIX entry's answers."""
    if destination.exists():
        shutil.rmtree(destination)
    data = [f"--data={key}={value}" for key, value in matrix_answers(entry).items()]
    session.run(
        "copier", "copy", "--quiet", "--defaults", "--vcs-ref=HEAD", *data, str(ROOT), str(destination)
    )
    return destination


# --- The runtime library's conformance runner, benchmarks and soak (runtime/) -----------------
# They serve the library's stand-in project, runtime/tests/sample_project (package sample_server);
# SAMPLE_PROJECT_BACKEND=postgres in the environment makes it a PostgreSQL project.

RUNTIME = ROOT / "runtime"
SAMPLE_PROJECT = RUNTIME / "tests" / "sample_project"
PGSERVER = "pgserver>=0.1.4; python_version < '3.13'"  # a throwaway PostgreSQL for the postgres runs


def install_runtime(session: nox.Session, *more: str) -> None:
    """The library from this work tree (editable, every extra) and its stand-in project."""
    session.install("-e", f"{RUNTIME}[postgres,otel]", "-e", str(SAMPLE_PROJECT), *more)


@nox.session(default=False)
def runtime_conformance(session: nox.Session) -> None:
    """The MCP conformance suite against the stand-in project, both eras (npm installs it and Node 22)."""
    install_runtime(session, "pyyaml>=6")
    session.run("python", str(RUNTIME / "conformance" / "run.py"), *session.posargs)


@nox.session(default=False)
def runtime_bench(session: nox.Session) -> None:
    """Every runtime/benchmarks/bench_*.py, or one with its options: `-- overhead --rounds 10`."""
    install_runtime(session, PGSERVER)
    benchmarks = RUNTIME / "benchmarks"
    # bench_project.py finds the project for the others: it measures nothing.
    scripts = sorted(path for path in benchmarks.glob("bench_*.py") if path.name != "bench_project.py")
    if session.posargs:
        names = [path.stem.removeprefix("bench_") for path in scripts]
        if session.posargs[0] not in names:
            session.error(f"no benchmark {session.posargs[0]!r}: pick one of {', '.join(names)}")
        scripts = [benchmarks / f"bench_{session.posargs[0]}.py"]
    for script in scripts:
        options = ["--fastmcp-path", fastmcp_beside(session)] if script.name == "bench_overhead.py" else []
        session.run("python", str(script), *options, *session.posargs[1:])


@nox.session(default=False)
def runtime_soak(session: nox.Session) -> None:
    """Side effects while the stand-in server is killed at random; fails on one lost or doubled."""
    install_runtime(session, PGSERVER)
    session.run("python", str(RUNTIME / "benchmarks" / "soak.py"), *session.posargs)


# Every distribution installed in the session as `name==version`, but the work tree's own.
PINS = """
import importlib.metadata, re
own = {"resilient-mcp", "sample-server"}
for dist in importlib.metadata.distributions():
    if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in own:
        print(f"{dist.metadata['Name']}=={dist.version}")
"""


def fastmcp_beside(session: nox.Session) -> str:
    """FastMCP in a directory of its own, at the versions of everything the session has.

    FastMCP is bench_overhead.py's point of comparison, never a dependency. Installed into
    the session, it would bring Rich, which structlog loads whenever it is importable: the
    server measured would no longer be the library's as it runs anywhere else.
    """
    target = Path(session.create_tmp()) / "fastmcp"
    constraints = target.with_name("fastmcp-constraints.txt")
    pins = session.run("python", "-c", PINS, silent=True)
    constraints.write_text(str(pins), encoding="utf-8")
    session.install("--target", str(target), "--constraint", str(constraints), "fastmcp>=4")
    return str(target)
