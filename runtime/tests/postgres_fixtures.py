"""A real PostgreSQL for the tests: one server per session and a fresh schema per test, as the
library gives every project (`resilient_mcp.testing.postgres`: `SAMPLE_SERVER_TEST_DATABASE_URL`,
else pgserver or an installed PostgreSQL), and servers of a module's own that a test may crash.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest

from resilient_mcp.testing.local_postgres import LocalPostgres, installed_binaries
from resilient_mcp.testing.postgres import postgres_dsn, postgres_schema_dsn

__all__ = ["PostgresServer", "crashable_postgres", "postgres_dsn", "postgres_schema_dsn"]


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
