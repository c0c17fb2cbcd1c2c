"""Checks of this repository: `nox` runs lint, the runtime library's checks and suite, then the
template's tests and the generated ones."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from pathlib import Path
from typing import Any

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "runtime", "all"]

ROOT = Path(__file__).resolve().parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PYPROJECT, "test")
LINT_DEPS = nox.project.dependency_groups(PYPROJECT, "lint")
OWN_PYTHON = ["tests", "noxfile.py"]  # template/ holds Jinja: it is checked through rendered projects
RUNTIME = ROOT / "runtime"
# The library's suite serves a stand-in project, installed editable beside the library: the dev
# group names both, which only `uv sync` resolves (tool.uv.sources); nox installs them by path.
LOCAL_DISTRIBUTIONS = ("resilient-mcp", "sample-server")
RUNTIME_TEST_DEPS = [
    requirement
    for requirement in nox.project.dependency_groups(nox.project.load_toml(RUNTIME / "pyproject.toml"), "dev")
    if not requirement.startswith(LOCAL_DISTRIBUTIONS)
]
# The stand-in project's answers (tests/sample_project/.../project.py): the two sets the template's
# projects are generated with, the postgres one also testing the store on SQLite.
RUNTIME_VARIANTS = {
    "sqlite, strict": {"SAMPLE_PROJECT_BACKEND": "sqlite", "SAMPLE_PROJECT_STRICT": "true"},
    "postgres, lenient": {"SAMPLE_PROJECT_BACKEND": "postgres", "SAMPLE_PROJECT_STRICT": "false"},
}


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff (lint and format) and mypy --strict over the repository's own Python."""
    session.install(*LINT_DEPS)
    session.run("ruff", "check", *OWN_PYTHON, *session.posargs)
    session.run("ruff", "format", "--check", *OWN_PYTHON)
    session.run("mypy")


@nox.session
def runtime(session: nox.Session) -> None:
    """The runtime library (runtime/): ruff, mypy --strict, and its suite in both variants."""
    session.install("-e", f"{RUNTIME}[postgres,otel]", "-e", str(RUNTIME / "tests" / "sample_project"))
    session.install(*RUNTIME_TEST_DEPS)
    session.chdir(RUNTIME)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    for variant, env in RUNTIME_VARIANTS.items():
        session.log(f"The library's suite, {variant}")
        session.run("pytest", "-n", "2", "--durations=10", *session.posargs, env=env)


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
    session.install("-e", str(project))
    command = Path(session.bin) / slug
    session.run(slug, "check", env=env)
    # One JSON report: handshake in both protocol eras, tools/list size, health_check.
    session.run(slug, "diagnose", "--timeout", "60", env=env)  # a busy machine starts slowly
    # The SDK's client: tools, health_check, a bad input, an idempotent retry replayed.
    session.run("python", str(ROOT / "tests" / "stdio_client.py"), str(command), "serve", env=env)
    setting, executable = f"{prefix}DATA_DIR={shlex.quote(str(data_dir))}", shlex.quote(str(command))
    print(f"\nThe server is in {project}. With Node.js, the MCP Inspector in a browser:")
    print(f"  npx @modelcontextprotocol/inspector -e {setting} {executable}")
    print("Its handshake report again, from any directory:")
    print(f"{setting} {executable} diagnose")


def matrix_answers(entry: str) -> dict[str, Any]:
    """The tests' answers for a MATRIX entry (tests/answers.py is plain data: load it as a file)."""
    spec = importlib.util.spec_from_file_location("template_test_answers", ROOT / "tests" / "answers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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
