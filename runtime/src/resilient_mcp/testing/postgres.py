"""A real PostgreSQL for a project's tests, as a pytest plugin: one server a session, a schema a test.

`pytest_plugins = ["resilient_mcp.testing.postgres"]` in a conftest.py gives two fixtures:
`postgres_dsn` (the session's server) and `postgres_schema_dsn` (a fresh, empty schema of it
per test, as its search_path). The server is `<PREFIX>TEST_DATABASE_URL` when set (CI's service,
or `nox -s db`'s); else one is started here with pgserver or an installed PostgreSQL's binaries
(`local_postgres`). With none, the tests fail and say so: a postgres project never passes
without testing PostgreSQL. Needs psycopg (the `postgres` extra).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from resilient_mcp.project import this_project
from resilient_mcp.testing.local_postgres import (
    LocalPostgres,
    installed_binaries,
    pgserver_dir,
    reachable_by_others,
)


def dsn_variable() -> str:
    """The variable naming a PostgreSQL the tests use instead of starting one."""
    return f"{this_project().env_prefix}TEST_DATABASE_URL"


_GIVEN: dict[str, str] = {}  # the variable as the session found it


def pytest_sessionstart(session: pytest.Session) -> None:
    """Read the variable before any test runs: tests wipe the project's variables, and the server
    may first be asked for inside one."""
    _GIVEN[dsn_variable()] = os.environ.get(dsn_variable(), "")


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the whole session."""
    variable = dsn_variable()
    given = _GIVEN.get(variable) or os.environ.get(variable, "")
    if given:
        yield given
        return
    with contextlib.ExitStack() as stack:
        dsn = start_with_pgserver(stack) or start_with_pg_ctl(stack)
        if dsn is None:
            root = " in a folder other users can reach (as root, PostgreSQL runs as another user)"
            pytest.fail(
                f"no PostgreSQL to test with: set {variable}, install pgserver,"
                f" or install PostgreSQL (initdb and pg_ctl){root if os.geteuid() == 0 else ''}"
            )
        yield dsn


@pytest.fixture
def postgres_schema_dsn(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose search_path is a fresh, empty schema: the test's own database."""
    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    yield make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def start_with_pgserver(stack: contextlib.ExitStack) -> str | None:
    """pgserver's bundled PostgreSQL, stopped and deleted when `stack` closes; None without it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            from pgserver.postgres_server import get_server
        except ImportError:
            return None
    if os.geteuid() == 0 and not reachable_by_others(Path(pgserver_dir())):
        return None  # as root, pgserver runs PostgreSQL as another user, who cannot start it there
    # Not under pytest's private tmp: as root, pgserver runs PostgreSQL as another user.
    pgdata = Path(tempfile.mkdtemp(prefix="pgserver-"))
    stack.callback(shutil.rmtree, pgdata, ignore_errors=True)
    server = get_server(pgdata, cleanup_mode="delete")
    stack.callback(server.cleanup)
    uri: str = server.get_uri()
    return uri


def start_with_pg_ctl(stack: contextlib.ExitStack) -> str | None:
    """An installed PostgreSQL's binaries, on a private unix socket; None without them."""
    bin_dir = installed_binaries()
    if bin_dir is None:
        return None
    server = LocalPostgres(bin_dir)
    stack.callback(server.stop)
    server.start()
    return server.dsn
