"""`nox -s db`: a local PostgreSQL kept between runs, and the exact line that points the server at it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sample_server.project import ENV_PREFIX

LOCAL_POSTGRES = [sys.executable, "-m", "resilient_mcp.testing.local_postgres"]  # what `nox -s db` runs
SAMPLE_PROJECT = Path(__file__).with_name("sample_project")  # `nox -s db` runs in the project's folder


def local_postgres(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOCAL_POSTGRES, *args], cwd=SAMPLE_PROJECT, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def directory() -> Iterator[Path]:
    # Not under pytest's private tmp: as root, PostgreSQL runs as another user, who must reach it.
    directory = Path(tempfile.mkdtemp(prefix="pgdb-"))
    yield directory
    local_postgres("stop", "--dir", str(directory))
    shutil.rmtree(directory, ignore_errors=True)


def exported(stdout: str, name: str) -> str:
    """NAME as a shell has it after the `source` line the command printed (the README's next step)."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("source ")]
    sourced = shlex.split(line, comments=True)
    shown = subprocess.run(
        ["bash", "-c", f'source {shlex.quote(sourced[1])} && printf %s "${name}"'],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return shown.stdout


def test_db_prints_the_url_to_connect_with_and_keeps_the_data_when_stopped(directory: Path) -> None:
    started = local_postgres("start", "--dir", str(directory))

    assert started.returncode == 0, started.stderr
    url = exported(started.stdout, f"{ENV_PREFIX}DATABASE_URL")
    assert exported(started.stdout, f"{ENV_PREFIX}TEST_DATABASE_URL") == url
    assert f"nox -s db -- stop --dir {directory}" in started.stdout
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (n integer)")
        conn.execute("INSERT INTO kept VALUES (1)")
    assert local_postgres("start", "--dir", str(directory)).stdout == started.stdout  # already running

    stopped = local_postgres("stop", "--dir", str(directory))

    assert stopped.returncode == 0, stopped.stderr
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5).close()
    restarted = local_postgres("start", "--dir", str(directory))
    assert restarted.returncode == 0, restarted.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(1,)]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root has PostgreSQL run as another user")
def test_as_root_a_private_directory_is_refused_with_one_others_can_reach() -> None:
    # mkdtemp's folder is private (0o700) and its path short whatever pytest's own tmp is called:
    # under a long one, the socket-path check would answer first.
    private = Path(tempfile.mkdtemp(prefix="pgprivate-"))
    assert private.stat().st_mode & 0o077 == 0  # others cannot reach into it
    try:
        refused = local_postgres("start", "--dir", str(private / "postgres"))
    finally:
        shutil.rmtree(private, ignore_errors=True)

    assert refused.returncode == 1
    assert "cannot reach" in refused.stderr
    assert "nox -s db -- --dir /tmp/" in refused.stderr


def test_a_directory_too_long_for_its_socket_is_refused_with_what_to_do(directory: Path) -> None:
    deep = directory / ("d" * 120)

    refused = local_postgres("start", "--dir", str(deep))

    assert refused.returncode == 1
    assert "give a shorter --dir" in refused.stderr
    assert not deep.exists()
