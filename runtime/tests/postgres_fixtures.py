"""A real PostgreSQL for the tests: one server per session, a fresh schema per test.

The server is `SAMPLE_SERVER_TEST_DATABASE_URL` when set; else it is started here with
`pgserver` (a dev dependency) or, where pgserver does not install, the `initdb` and
`pg_ctl` of an installed PostgreSQL. With none of them the tests fail, saying so: a
postgres project never passes without testing postgres.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from idempotency_support import TEST_DSN, TEST_DSN_VARIABLE
from resilient_mcp.testing.local_postgres import (
    LocalPostgres,
    installed_binaries,
    pgserver_dir,
    reachable_by_others,
)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the whole session."""
    if TEST_DSN:
        yield TEST_DSN
        return
    with contextlib.ExitStack() as stack:
        dsn = _start_with_pgserver(stack) or _start_with_pg_ctl(stack)
        if dsn is None:
            root = " in a folder other users can reach (as root, PostgreSQL runs as another user)"
            pytest.fail(
                f"no PostgreSQL to test with: set {TEST_DSN_VARIABLE}, install pgserver,"
                f" or install PostgreSQL (initdb and pg_ctl){root if os.geteuid() == 0 else ''}"
            )
        yield dsn


def _start_with_pgserver(stack: contextlib.ExitStack) -> str | None:
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


def _start_with_pg_ctl(stack: contextlib.ExitStack) -> str | None:
    """An installed PostgreSQL's binaries, on a private unix socket; never as root."""
    bin_dir = installed_binaries()
    if bin_dir is None:
        return None
    server = PostgresServer(bin_dir)
    stack.callback(server.stop)
    server.start()
    return server.dsn


class PostgresServer(LocalPostgres):
    """A PostgreSQL of the tests' own, on a private unix socket, that a test may crash.

    `crash_a_backend` SIGKILLs one backend, as the kernel's OOM killer does: the postmaster
    then ends every backend and replays its log, and any commit not yet written is gone.
    `crash_and_restart` stops the whole server without a shutdown checkpoint and starts it.
    """

    def crash_a_backend(self) -> int:
        """SIGKILL one client backend (the oldest); returns its pid."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND pid <> pg_backend_pid() ORDER BY backend_start LIMIT 1"
            ).fetchone()
        assert row is not None, "no backend to crash: nothing is connected"
        os.kill(int(row[0]), signal.SIGKILL)
        self.wait_until_up()
        return int(row[0])

    def crash_and_restart(self) -> None:
        self.stop_immediately()
        self.start()

    def wait_until_up(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, f"PostgreSQL not back after {timeout_s:g} s"
                time.sleep(0.1)


@pytest.fixture(scope="module")
def crashable_postgres() -> Iterator[PostgresServer]:
    """A server of this module's own (crashing it must not disturb other tests), on which
    commits not forced to disk stay unwritten for up to 10 s: a crash loses them for sure.
    Its default is not to force them (`synchronous_commit=off`, as an operator tuning for
    speed may set): the store must force its own."""
    bin_dir = installed_binaries()
    if bin_dir is None:
        pytest.fail("no PostgreSQL binaries (initdb, pg_ctl) to crash: install PostgreSQL or pgserver")
    server = PostgresServer(
        bin_dir, "-c wal_writer_delay=10000ms", "-c wal_writer_flush_after=0", "-c synchronous_commit=off"
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_schema_dsn(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose search_path is a fresh, empty schema: the test's own database."""
    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    yield make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
