"""`sample-server dev --http`: serves on loopback, restarts after an edit, stops cleanly; real processes.

Each test runs the command on a copy of this package (PYTHONPATH first), so the edits it makes
never touch the real tree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import sample_server
from http_support import json_rpc_answer, post
from resilient_mcp.commands import dev
from resilient_mcp.commands.diagnose import MODERN, with_envelope
from resilient_mcp.commands.inspector_pin import INSPECTOR
from sample_server.project import PACKAGE
from support import ANSWER_TIMEOUT_S, free_port

pytestmark = pytest.mark.network

NEW_TOOL = '''
from ..core import tool


@tool(read_only=True, open_world=False)
def dev_probe() -> str:
    """Answer the reload test."""
    return "probe"
'''
BROKEN_TOOL = "raise RuntimeError('half-written tool')\n"


class DevCommand:
    """`python -m <package> dev ARGS` in a project directory, its stdout lines collected as they come."""

    def __init__(self, project: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.stderr_path = project / "dev-stderr.log"
        self.lines: list[str] = []
        self._changed = threading.Condition()
        python_path = os.pathsep.join(filter(None, [str(project / "src"), os.environ.get("PYTHONPATH")]))
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", PACKAGE, "dev", *args],
                cwd=project,
                env={**os.environ, **(env or {}), "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(
        self, pattern: str, *, after: int = 0, timeout: float = ANSWER_TIMEOUT_S
    ) -> tuple[int, re.Match[str]]:
        """The first line from index `after` on that matches: its index and the match."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for index in range(after, len(self.lines)):
                    if found := re.search(pattern, self.lines[index]):
                        return index, found
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():  # its stdout closed: nothing more comes
                    pytest.fail(f"no line matching {pattern!r}:\n{self.transcript()}")
                self._changed.wait(min(left, 0.5))

    def transcript(self) -> str:
        stderr = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(self.lines) + "\n--- stderr (tail) ---\n" + stderr[-3000:]

    def stop(self, signum: int) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=ANSWER_TIMEOUT_S)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of this package's sources, in a src/ of its own."""
    package = Path(sample_server.__file__).parent
    root = tmp_path / "project"
    shutil.copytree(package, root / "src" / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def running(project: Path) -> Iterator[DevCommand]:
    command = DevCommand(project, "--http", "--no-inspector", "--port", str(free_port()))
    try:
        yield command
    finally:
        if command.process.poll() is None:  # a failed test: stop its server too
            try:
                command.stop(signal.SIGTERM)
            except subprocess.TimeoutExpired:
                command.process.kill()


def tool_names(url: str) -> list[str]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": with_envelope(MODERN)}
    status, _, text = post(url, body, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert status == 200, text
    return [entry["name"] for entry in json_rpc_answer(text)["result"]["tools"]]


def is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def children_of(pid: int) -> list[int] | None:
    """The processes `pid` started and has not reaped; None where this system cannot tell."""
    listed = Path(f"/proc/{pid}/task/{pid}/children")
    if listed.exists():
        return [int(child) for child in listed.read_text().split()]
    if shutil.which("pgrep") is None:
        return None
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=60, check=False)
    return [int(child) for child in found.stdout.split()]


def server_pid(found: re.Match[str]) -> int:
    return int(found["pid"])


UP = r"server pid (?P<pid>\d+) up in [\d.]+ s"
RELOADED = r"reloaded: \S*{file} changed; server pid (?P<pid>\d+) up in [\d.]+ s"
EXITED = r"the server exited with code (?P<code>-?\d+); it restarts at the next change"


def test_serves_restarts_after_an_edit_reports_a_death_and_stops_on_ctrl_c(
    project: Path, running: DevCommand
) -> None:
    _, address = running.wait_for(r"MCP server at (?P<url>http://127\.0\.0\.1:\d+/mcp)")
    at, first = running.wait_for(UP)
    url = address["url"]
    assert "dev_probe" not in tool_names(url)

    (project / "src" / PACKAGE / "tools" / "dev_probe.py").write_text(NEW_TOOL, encoding="utf-8")
    at, reloaded = running.wait_for(RELOADED.format(file=r"tools/dev_probe\.py"), after=at + 1)

    assert "dev_probe" in tool_names(url)
    assert is_gone(server_pid(first)), "the server before the edit is still running"
    os.kill(server_pid(reloaded), signal.SIGKILL)
    at, _ = running.wait_for(EXITED, after=at + 1)
    time.sleep(3 * dev.POLL_S)
    assert children_of(running.process.pid) in ([], None), "restarted without a change"
    assert not [line for line in running.lines[at + 1 :] if "server pid" in line]
    assert running.stop(signal.SIGINT) == 0, running.transcript()  # Ctrl+C
    assert running.lines[-1].endswith("dev: stopped")


def test_a_server_that_cannot_start_restarts_at_the_next_change_and_sigterm_stops_it(project: Path) -> None:
    tool_file = project / "src" / PACKAGE / "tools" / "dev_probe.py"
    tool_file.write_text(BROKEN_TOOL, encoding="utf-8")
    command = DevCommand(project, "--http", "--no-inspector", "--port", str(free_port()))
    try:
        at, failed = command.wait_for(EXITED)
        assert int(failed["code"]) != 0

        tool_file.write_text(NEW_TOOL, encoding="utf-8")
        _, reloaded = command.wait_for(RELOADED.format(file=r"tools/dev_probe\.py"), after=at + 1)

        assert command.stop(signal.SIGTERM) == 0, command.transcript()
        assert is_gone(server_pid(reloaded)), "the server outlived the dev command"
    finally:
        if command.process.poll() is None:
            command.process.kill()


def test_stdio_without_the_inspector_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert dev.main(["--no-inspector"]) == dev.EXIT_USAGE
    assert "pass --http" in capsys.readouterr().err


def test_help_loads_no_sdk(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        f"from {PACKAGE}.cli import main\n"
        "code = main(['dev', '--help'])\n"
        "loaded = sorted(n for n in sys.modules if n.partition('.')[0] in ('mcp', 'pydantic', 'anyio'))\n"
        "sys.stderr.write(f'LOADED {loaded}\\n')\n"
        "raise SystemExit(code)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert "--no-inspector" in ran.stdout
    assert "LOADED []" in ran.stderr


def inspector_is_cached() -> str | None:
    """None when npx has the pinned Inspector already; else why the test would need npm."""
    if shutil.which("npx") is None:
        return "npx is not installed (the MCP Inspector needs Node.js)"
    probe = subprocess.run(
        ["npx", "--no", "--", INSPECTOR, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        return f"{INSPECTOR} is not in npx's cache: fetching it takes about a minute"
    return None


def inspector_api(base: str, token: str, path: str, body: object) -> dict[str, object]:
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "x-mcp-remote-auth": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as response:
        answer: dict[str, object] = json.load(response)
        return answer


def test_the_inspector_reaches_the_server_and_stops_with_it(project: Path) -> None:
    if (reason := inspector_is_cached()) is not None:
        pytest.skip(reason)
    ports = {"CLIENT_PORT": str(free_port()), "MCP_SANDBOX_PORT": str(free_port())}
    command = DevCommand(
        project, "--http", "--port", str(free_port()), env={"MCP_AUTO_OPEN_ENABLED": "false", **ports}
    )
    try:
        _, address = command.wait_for(r"MCP server at (?P<url>\S+) ")
        _, shown = command.wait_for(
            r"MCP Inspector at (?P<url>(?P<base>http://[^?/]+)\S*?TOKEN=(?P<token>\w+))"
        )
        connect = {"config": {"type": "streamable-http", "url": address["url"]}}
        session = inspector_api(shown["base"], shown["token"], "/api/mcp/connect", connect)
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        sent = inspector_api(
            shown["base"],
            shown["token"],
            "/api/mcp/send",
            {"sessionId": session["sessionId"], "message": initialize},
        )
        assert sent == {"ok": True}  # the Inspector had the server's answer

        assert command.stop(signal.SIGTERM) == 0, command.transcript()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(shown["base"], timeout=5)
    finally:
        if command.process.poll() is None:
            command.process.kill()
