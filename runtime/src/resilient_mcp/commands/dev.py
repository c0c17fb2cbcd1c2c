"""`<command> dev [--http] [--no-inspector] [--port N] [--data-dir DIR]`: try the server while you edit it.

With `--http` it serves Streamable HTTP on loopback (`serve --transport http`, a child process),
restarts that child when a file of the source tree changes, and starts the MCP Inspector (npx) on
its URL. Without `--http` the Inspector starts `serve` over stdio itself: there is no reload then
(reconnect in the Inspector after an edit). Ctrl+C or SIGTERM stops both children, exit 0.

Standard library only, like `client-config`: the children load the SDK, so a tool file that does
not import yet is reported as the child's exit and retried at the next change. Changes are found
by polling modification times every half second, not with `watchfiles`: it is not a dependency,
and a scan of a project's sources takes milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from resilient_mcp.commands.inspector_pin import INSPECTOR
from resilient_mcp.project import this_project

POLL_S = 0.5
QUIET_S = 0.3  # an editor's save is several writes: restart once they have stopped
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
PROGRESS_EVERY_S = 10.0
EXIT_USAGE = 2
# The Inspector's line with the address to open (its token in the query string).
INSPECTOR_URL = re.compile(r"https?://\S*MCP_INSPECTOR_API_TOKEN=\S+")

_print_lock = threading.Lock()


def say(message: str) -> None:
    """One line of this command's own on stdout (the children's logs go to stderr)."""
    with _print_lock:
        sys.stdout.write(f"{this_project().slug} dev: {message}\n")
        sys.stdout.flush()


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} dev",
        description="Serve this project with the MCP Inspector. --http: Streamable HTTP on loopback, "
        "restarted when a file under the source tree changes. Without --http the Inspector starts "
        "the server over stdio itself (no reload). Ctrl+C stops everything.",
    )
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP with reload")
    parser.add_argument("--no-inspector", action="store_true", help="do not start the MCP Inspector")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port on 127.0.0.1 (default: 8000)")
    parser.add_argument(
        "--data-dir", type=Path, help=f"sets {this_project().env_prefix}DATA_DIR for the server"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    if not options.http and options.no_inspector:
        sys.stderr.write(
            f"{this_project().slug} dev: over stdio the Inspector is the client that starts the server; "
            "pass --http to serve without it\n"
        )
        return EXIT_USAGE
    env = dict(os.environ)
    if options.data_dir is not None:
        env[f"{this_project().env_prefix}DATA_DIR"] = str(options.data_dir.resolve())
    if not options.no_inspector and shutil.which("npx") is None:
        sys.stderr.write(
            f"{this_project().slug} dev: npx is not on the PATH: the MCP Inspector needs Node.js "
            "(https://nodejs.org); or pass --http --no-inspector\n"
        )
        return EXIT_USAGE
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    if options.http:
        if not port_is_free(options.port):
            sys.stderr.write(
                f"{this_project().slug} dev: port {options.port} is in use: pick another with --port\n"
            )
            return EXIT_USAGE
        return serve_with_reload(options.port, env, stop, inspector=not options.no_inspector)
    return inspect_stdio(env, stop)


def serve_with_reload(port: int, env: dict[str, str], stop: threading.Event, *, inspector: bool) -> int:
    url = f"http://127.0.0.1:{port}/mcp"
    tree = SourceTree(watched_root())
    seen = tree.scan()
    argv = [sys.executable, "-m", this_project().package, "serve", "--transport", "http", "--port", str(port)]
    began = time.monotonic()
    server = start_server(argv, env, port, stop)
    say(f"MCP server at {url} (Streamable HTTP); restarted when a file under {shown(tree.root)} changes")
    if server is not None:
        say(f"server pid {server.pid} up in {time.monotonic() - began:.2f} s")
    viewer = Inspector(["--transport", "http", "--server-url", url], env) if inspector else None
    try:
        while not stop.wait(POLL_S):
            if viewer is not None:
                viewer.report_progress()
            if server is not None and server.poll() is not None:
                say(f"the server exited with code {server.returncode}; it restarts at the next change")
                server = None
            changed, seen = tree.changes(seen)
            if not changed:
                continue
            changed, seen = settle(tree, changed, seen, stop)
            if stop.is_set():
                break
            began = time.monotonic()
            if server is not None:
                stop_group(server)
            server = start_server(argv, env, port, stop)
            if server is not None:
                more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
                say(
                    f"reloaded: {shown(changed[0])} changed{more}; server pid {server.pid} "
                    f"up in {time.monotonic() - began:.2f} s"
                )
    finally:
        for child in (server, viewer.process if viewer else None):
            if child is not None:
                stop_group(child)
    say("stopped")
    return 0


def inspect_stdio(env: dict[str, str], stop: threading.Event) -> int:
    # The Inspector gives a stdio server only a few variables of its own environment: pass ours on.
    passed = {name: value for name, value in env.items() if name.startswith(this_project().env_prefix)}
    if "PYTHONPATH" in env:
        passed["PYTHONPATH"] = env["PYTHONPATH"]
    settings = [arg for name, value in sorted(passed.items()) for arg in ("-e", f"{name}={value}")]
    say(
        "stdio: the Inspector starts the server itself, so there is no reload "
        "(reconnect in the Inspector after an edit, or use --http)"
    )
    viewer = Inspector([*settings, "--", sys.executable, "-m", this_project().package, "serve"], env)
    try:
        while not stop.wait(POLL_S):
            viewer.report_progress()
            if viewer.process.poll() is not None:
                return 1
    finally:
        stop_group(viewer.process)
    say("stopped")
    return 0


class SourceTree:
    """The files under a directory, by modification time and size, to find what an edit changed."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def scan(self) -> dict[Path, tuple[int, int]]:
        found = {}
        for directory, subdirectories, files in os.walk(self.root):
            subdirectories[:] = [name for name in subdirectories if not skipped(name)]
            for name in files:
                if skipped(name) or name.endswith((".pyc", ".pyo")):
                    continue
                path = Path(directory, name)
                try:
                    status = path.stat()
                except OSError:  # deleted while we walked
                    continue
                found[path] = (status.st_mtime_ns, status.st_size)
        return found

    def changes(self, seen: dict[Path, tuple[int, int]]) -> tuple[list[Path], dict[Path, tuple[int, int]]]:
        """The files added, changed or removed since `seen`, and the new scan."""
        now = self.scan()
        changed = sorted(path for path in seen.keys() | now.keys() if seen.get(path) != now.get(path))
        return changed, now


def skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__" or name.endswith("~")


def settle(
    tree: SourceTree, changed: list[Path], seen: dict[Path, tuple[int, int]], stop: threading.Event
) -> tuple[list[Path], dict[Path, tuple[int, int]]]:
    """Wait until the files stop changing (one quiet period); every file changed meanwhile."""
    everything = list(changed)
    while not stop.wait(QUIET_S):
        more, seen = tree.changes(seen)
        if not more:
            break
        everything += [path for path in more if path not in everything]
    return everything, seen


def watched_root() -> Path:
    """`src/` of the project's checkout (its package and its neighbours), else its package's directory."""
    package = project_directory()
    return package.parent if package.parent.name == "src" else package


def project_directory() -> Path:
    """The served project's package directory, found without importing it."""
    spec = importlib.util.find_spec(this_project().package)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"package {this_project().package} is not installed")
    return Path(spec.origin).resolve().parent


def shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_server(
    argv: list[str], env: Mapping[str, str], port: int, stop: threading.Event
) -> subprocess.Popen[bytes] | None:
    """The server, up and accepting on the port; None when it exited first (its stderr says why)."""
    process = spawn(argv, env, stdout=None)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not stop.is_set() and time.monotonic() < deadline:
        if process.poll() is not None:
            say(f"the server exited with code {process.returncode}; it restarts at the next change")
            return None
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            time.sleep(0.05)
    if not stop.is_set():
        say(f"the server did not listen on port {port} within {START_TIMEOUT_S:g} s")
    return process


def spawn(argv: list[str], env: Mapping[str, str], stdout: int | None) -> subprocess.Popen[bytes]:
    """A child in a process group of its own: Ctrl+C reaches this command, which stops it in order."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is not None else None,
        start_new_session=os.name != "nt",
        creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
    )


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's whole group (npx starts node, node starts more); SIGKILL what lingers."""
    if os.name == "nt":
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return
    signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_TIMEOUT_S)
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    signal_group(process.pid, signal.SIGKILL)
    process.wait()


def signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(group, signum)


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class Inspector:
    """`npx -y <pinned Inspector> ARGS`, its lines relayed with a prefix; the URL to open called out."""

    def __init__(self, args: list[str], env: Mapping[str, str]) -> None:
        say(f"starting the MCP Inspector ({INSPECTOR}; npx downloads it on the first run, about a minute)")
        self.started = time.monotonic()
        self.last_progress = self.started
        self.url: str | None = None
        self.exit_reported = False
        self.process = spawn(["npx", "-y", INSPECTOR, *args], env, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        threading.Thread(target=self._relay, args=(self.process.stdout,), daemon=True).start()

    def _relay(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if not line.strip():
                continue
            with _print_lock:
                sys.stdout.write(f"  inspector| {line}\n")
                sys.stdout.flush()
            found = INSPECTOR_URL.search(line)
            if found and self.url is None:
                self.url = found[0]
                say(f"MCP Inspector at {self.url} (open it in a browser)")

    def report_progress(self) -> None:
        """A line every few seconds until the Inspector is up (the first npx download is slow); its exit."""
        now = time.monotonic()
        if self.process.poll() is not None:
            if not self.exit_reported:
                self.exit_reported = True
                say(f"the MCP Inspector exited with code {self.process.returncode} (its lines above)")
            return
        if self.url is not None:
            return
        if now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            say(f"still waiting for the MCP Inspector ({now - self.started:.0f} s; npx may be installing it)")
