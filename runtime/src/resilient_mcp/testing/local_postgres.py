"""A PostgreSQL of this machine's own: the tests' (`postgres`) and `nox -s db`'s.

Its binaries are an installed PostgreSQL's (`initdb` and `pg_ctl` on the PATH, or Debian's)
or the ones pgserver bundles. It listens on a unix socket in its own directory only, with
no TCP port, and trusts whoever reaches that socket. Started as root, it runs as another
user: PostgreSQL refuses root.

`python -m resilient_mcp.testing.local_postgres [start|stop] [--dir DIR]`, which a project's
`nox -s db` runs in its folder, keeps one in DIR (default .nox/postgres) between runs and prints
the `export` lines that point the server (`<PREFIX>DATABASE_URL`) and its tests
(`<PREFIX>TEST_DATABASE_URL`) at it; the prefix is the project's (`--env-prefix`, else read from
the installed project whose command pyproject.toml names). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from resilient_mcp.project import Project

DEFAULT_DIR = Path(".nox") / "postgres"
ENV_FILE = "env.sh"  # the export lines, for `source`
# sun_path holds 104 bytes on macOS, 108 on Linux; the socket's name takes 14 of them.
MAX_SOCKET_DIR = 104 - len("/.s.PGSQL.5432") - 1


def installed_binaries() -> Path | None:
    """A directory with initdb and pg_ctl: on PATH, Debian's, or the ones pgserver bundles.

    As root, only one that the user PostgreSQL then runs as can reach (see `reachable_by_others`).
    """
    candidates = [
        shutil.which("pg_ctl"),
        *sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True),
        *glob.glob(str(Path(pgserver_dir()) / "pginstall" / "bin" / "pg_ctl")),
    ]
    found = [Path(c).parent for c in candidates if c and (Path(c).parent / "initdb").exists()]
    if os.geteuid() == 0:
        found = [directory for directory in found if reachable_by_others(directory)]
    return found[0] if found else None


def reachable_by_others(path: Path) -> bool:
    """Whether every folder on the way to `path` lets other users through (mode o+x).

    PostgreSQL refuses to run as root, so as root it runs as another user, who cannot start
    binaries in a private folder: a project under /root, or under pytest's temporary folders.
    """
    return all(os.stat(folder).st_mode & 0o001 for folder in [path.resolve(), *path.resolve().parents])


def pgserver_dir() -> str:
    spec = importlib.util.find_spec("pgserver")
    return str(Path(spec.origin).parent) if spec is not None and spec.origin else "/nonexistent"


class LocalPostgres:
    """One PostgreSQL cluster in `directory` (a fresh temporary one by default), on its socket there."""

    def __init__(self, bin_dir: Path, *settings: str, directory: Path | None = None) -> None:
        self.bin_dir = bin_dir
        self.settings = settings
        self.pgdata = directory if directory is not None else Path(tempfile.mkdtemp(prefix="pgtest-"))
        self.data = self.pgdata / "data"
        self.run_as: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            account = pwd.getpwnam("postgres") if _has_user("postgres") else pwd.getpwnam("nobody")
            self.run_as = {"user": account.pw_uid, "group": account.pw_gid}
        self.dsn = f"postgresql://postgres@/postgres?host={quote(str(self.pgdata), safe='/')}"

    def start(self) -> None:
        """initdb on first use, then start and wait until it accepts connections."""
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            os.chown(self.pgdata, self.run_as["user"], self.run_as["group"])
        if not self.data.exists():
            initdb = [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"]
            subprocess.run([*initdb, "-E", "UTF8"], check=True, capture_output=True, **self.run_as)
        options = " ".join(
            [f"-k {self.pgdata} -c listen_addresses='' -c max_connections=200 -c fsync=off", *self.settings]
        )
        self._pg_ctl("-l", str(self.pgdata / "log"), "-o", options, "-w", "start")

    def running(self) -> bool:
        status = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "status"]
        return subprocess.run(status, capture_output=True, check=False, **self.run_as).returncode == 0

    def shut_down(self) -> None:
        """Stop it cleanly; its data stays for the next start."""
        self._pg_ctl("-m", "fast", "-w", "stop")

    def stop(self) -> None:
        """Stop it at once and delete its directory (a temporary server's end)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(self.pgdata, ignore_errors=True)

    def stop_immediately(self) -> None:
        """Stop every process at once, without a shutdown checkpoint: the next start recovers."""
        self._pg_ctl("-m", "immediate", "stop")

    def _pg_ctl(self, *args: str) -> None:
        pg_ctl = str(self.bin_dir / "pg_ctl")
        subprocess.run([pg_ctl, "-D", str(self.data), *args], check=True, capture_output=True, **self.run_as)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nox -s db --", description="A local PostgreSQL for this server, kept in DIR between runs."
    )
    parser.add_argument("action", nargs="?", choices=["start", "stop"], default="start")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"its data (default: {DEFAULT_DIR})")
    parser.add_argument(
        "--env-prefix", help="the settings prefix (default: the project's in pyproject.toml, installed)"
    )
    args = parser.parse_args(argv)
    env_prefix: str | None = args.env_prefix or project_env_prefix(Path("pyproject.toml"))
    if env_prefix is None:
        return refuse(
            "no project here to name the settings for: run it in the project's folder with the project "
            "installed (`nox -s db` does), or give --env-prefix (e.g. --env-prefix WEATHER_TOOLS_)"
        )
    directory: Path = args.dir.absolute()
    if len(str(directory)) > MAX_SOCKET_DIR:
        return refuse(f"{directory} is too long for a unix socket's path: give a shorter --dir")
    bin_dir = installed_binaries()
    if bin_dir is None:
        return refuse(
            "no PostgreSQL binaries: install pgserver (`pip install pgserver`, where it has wheels) "
            "or PostgreSQL (initdb and pg_ctl on the PATH)"
        )
    server = LocalPostgres(bin_dir, "-c fsync=on", directory=directory)  # data kept between runs
    # The directory itself is handed to that user; the folders above it must let it through.
    above = next(folder for folder in directory.parents if folder.exists())
    if server.run_as and not reachable_by_others(above):
        return refuse(
            f"as root, PostgreSQL runs as another user (uid {server.run_as['user']}), who cannot reach "
            f"{directory}: a folder on the way is private. Give it one others can traverse: "
            f"`nox -s db -- --dir /tmp/postgres-data`"
        )
    try:
        if args.action == "stop":
            if server.running():
                server.shut_down()
            say(f"PostgreSQL is stopped; its data stays in {directory} (delete it to start afresh).")
            return 0
        if not server.running():
            server.start()
    except subprocess.CalledProcessError as exc:
        as_user = f" (as root, PostgreSQL runs as uid {server.run_as['user']}, who must reach it)"
        return refuse(
            f"{Path(exc.cmd[0]).name} failed in {directory}{as_user if server.run_as else ''}:\n"
            f"{(exc.stderr or b'').decode(errors='replace').strip()}\n"
            f"see {directory / 'log'}, or give another --dir"
        )
    exports = [
        f"export {env_prefix}DATABASE_URL={shlex.quote(server.dsn)}",  # the server's
        f"export {env_prefix}TEST_DATABASE_URL={shlex.quote(server.dsn)}",  # the tests': a schema each
    ]
    (directory / ENV_FILE).write_text("\n".join(exports) + "\n", encoding="utf-8")
    elsewhere = f" --dir {shlex.quote(str(args.dir))}" if args.dir != DEFAULT_DIR else ""
    say(f"PostgreSQL ({bin_dir}) is running, its data in {directory}. For the server and the tests:")
    say(f"source {shlex.quote(str(args.dir / ENV_FILE))}   # {'; '.join(exports)}")
    say(f"Stop it with: nox -s db -- stop{elsewhere}")
    return 0


def project_env_prefix(pyproject: Path) -> str | None:
    """The settings prefix of the project `pyproject` describes: its command's package's `PROJECT`."""
    if not pyproject.is_file():
        return None
    scripts = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("scripts", {})
    for target in scripts.values():
        package = str(target).split(":")[0].split(".")[0]
        try:
            project = getattr(importlib.import_module(f"{package}.project"), "PROJECT", None)
        except ImportError:
            continue
        if isinstance(project, Project):
            return project.env_prefix
    return None


def say(line: str) -> None:
    """A line for the person at the terminal (a command of its own: stdout is no protocol here)."""
    sys.stdout.write(f"{line}\n")


def refuse(message: str) -> int:
    sys.stderr.write(f"local_postgres: {message}\n")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
