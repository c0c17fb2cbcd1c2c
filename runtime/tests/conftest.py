"""Fixtures for every test: an isolated environment per test, and servers built in memory.

Each test gets its own data directory (and, when the project's backend is PostgreSQL, its own
schema), and no settings leak in from the developer's environment or a `.env` file.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import ModuleType

import mcp.client.session
import pytest

from resilient_mcp.server.app import create_server
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.server.startup import load_settings
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND
from sample_server.settings import Settings
from support import ANSWER_TIMEOUT_S, server_env

# A real PostgreSQL for the session, a schema per test; started only when a test asks for it
# (the postgres store's tests, in either variant; every test when the project's backend is postgres).
pytest_plugins = ["postgres_fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "network: serves HTTP on loopback to real clients; slower (-m 'not network' skips)"
    )
    config.addinivalue_line("markers", "smoke: a few quick tests across the library (-m smoke runs them)")
    config.addinivalue_line(
        "markers",
        "both_backends: runs on SQLite and on PostgreSQL whatever the project's backend, so its outcome "
        "does not depend on the suite's answers (-m 'not both_backends' skips it in all but one run)",
    )
    config.addinivalue_line(
        "markers",
        "answers_independent: its outcome does not depend on the suite's answers (backend, strict), so "
        "one of the CI's two runs is enough (-m 'not answers_independent' skips it)",
    )
    config.addinivalue_line(
        "markers",
        "answers_independent_postgres: as answers_independent, but the CI runs it in its other run, the "
        "PostgreSQL one, so that both take about as long (-m 'not answers_independent_postgres' skips it)",
    )


# Modules that test a transport, auth or a command with tools whose outcome neither answer (the
# backend, strict arguments) changes: none calls a side-effecting tool or sends a bad argument.
ANSWERS_INDEPENDENT = {
    "test_bearer",
    "test_dev",
    "test_diagnose",
    "test_http_exposure",
    "test_http_lockout",
    "test_json_bounds",
    "test_oauth",
    "test_oauth_keys",
    "test_owner_extensions",
    "test_records",
    "test_redaction",
    "test_request_state",
    "test_stdio_lines",
    "test_stdio_transport",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of the store on each backend (the `backend` fixture) is marked `both_backends`;
    a test of a module in ANSWERS_INDEPENDENT, `answers_independent`."""
    for item in items:
        if "backend" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.both_backends)
        if item.path.stem in ANSWERS_INDEPENDENT:
            item.add_marker(pytest.mark.answers_independent)


@pytest.fixture(scope="session", autouse=True)
def patient_discover() -> Iterator[None]:
    """The SDK's Client waits 10 s for `server/discover`, then silently falls back to the
    2025-11-25 handshake: a server slowed by a loaded machine must not change a test's era."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mcp.client.session, "DISCOVER_TIMEOUT_SECONDS", ANSWER_TIMEOUT_S)
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own data directory and no settings leaking in from outside."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env from the project directory
    directory = tmp_path / "data"
    monkeypatch.setenv(f"{ENV_PREFIX}DATA_DIR", str(directory))
    return directory


@pytest.fixture(autouse=True)
def database_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """With the postgres backend, each test's idempotency table lives in a fresh schema of the
    session's PostgreSQL; with sqlite, in the test's data directory (nothing to set)."""
    if IDEMPOTENCY_BACKEND != "postgres":
        return None
    dsn: str = request.getfixturevalue("postgres_schema_dsn")
    monkeypatch.setenv(f"{ENV_PREFIX}DATABASE_URL", dsn)
    return dsn


@pytest.fixture
def subprocess_env(data_dir: Path) -> dict[str, str]:
    """The environment for a server subprocess: this test's data directory, no PYTHONUNBUFFERED."""
    return server_env(data_dir=str(data_dir))


@pytest.fixture
def sample_tools() -> ModuleType:
    return importlib.import_module("sample_tools")


@pytest.fixture
async def make_server(sample_tools: ModuleType) -> AsyncIterator[Callable[..., ResilientServer]]:
    """Build servers from the environment's settings, with the sample tools beside health_check."""
    made: list[ResilientServer] = []

    def make(*, strict: bool | None = None, tools: ModuleType = sample_tools) -> ResilientServer:
        made.append(create_server(load_settings(Settings), tools, strict=strict))
        return made[-1]

    yield make
    for server in made:
        await server.tasks.close()
        await server.store.close()


@pytest.fixture
def server(make_server: Callable[..., ResilientServer]) -> ResilientServer:
    """A server with the sample tools (tests/sample_tools) beside health_check."""
    return make_server()


@pytest.fixture
def project_server(make_server: Callable[..., ResilientServer]) -> ResilientServer:
    """This project's own server: health_check and the tools in tools/."""
    return make_server(tools=importlib.import_module("sample_server.tools"))
