"""The installed `sample-server` command: --version, client-config, and what runs without the SDK."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import sysconfig
import termios
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from resilient_mcp.commands.client_config import CLIENTS
from resilient_mcp.commands.diagnose import EXIT_NO_HANDSHAKE, MODERN, with_envelope
from resilient_mcp.commands.inspector_pin import INSPECTOR
from sample_server.project import ENV_PREFIX, PACKAGE, SLUG

SAMPLE_PROJECT = Path(__file__).resolve().parent / "sample_project"  # the served project's own root
COMMAND = Path(sysconfig.get_path("scripts")) / SLUG
# Where each client keeps its servers in the entry, and the file the entry goes in.
SERVERS_KEY = {
    "claude-desktop": "mcpServers",
    "claude-code": "mcpServers",
    "cursor": "mcpServers",
    "vscode": "servers",
    "windsurf": "mcpServers",
    "gemini-cli": "mcpServers",
    "goose": "extensions",
    "codex": "mcp_servers",
    "generic": "mcpServers",
}
FILE_NAME = {
    "claude-desktop": "claude_desktop_config.json",
    "claude-code": ".mcp.json",
    "cursor": "mcp.json",
    "vscode": "mcp.json",
    "windsurf": "mcp_config.json",
    "gemini-cli": "settings.json",
    "goose": "config.yaml",
    "codex": "config.toml",
    "generic": "mcp.json",
}
# The names each client reads the command, its arguments and its environment by (Goose's own).
LAUNCH_KEYS = {"goose": ("cmd", "args", "envs")}
# The key of a remote server's URL, per client.
URL_KEY = {"windsurf": "serverUrl", "gemini-cli": "httpUrl", "goose": "uri"}
# Imports a command must leave out: the SDK and what only it needs.
SDK_MODULES = ("mcp", "mcp_types", "pydantic", "anyio", "starlette", "uvicorn")
IMPORTS_AFTER = """
import sys

from sample_server.cli import main

try:
    main(sys.argv[1:])
except SystemExit:
    pass
loaded = sorted(name for name in sys.modules if name.partition(".")[0] in {sdk!r})
sys.stderr.write("LOADED " + " ".join(loaded) + "\\n")
"""


def command(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The console script as a user types it."""
    assert COMMAND.is_file(), f"{COMMAND} is not installed: `pip install -e .` first"
    return subprocess.run(
        [str(COMMAND), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_version_is_the_one_in_pyproject(subprocess_env: dict[str, str]) -> None:
    version = tomllib.loads((SAMPLE_PROJECT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]

    answered = command("--version", env=subprocess_env)

    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == f"{SLUG} {version}"


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["client-config", "vscode"],
        ["client-config", "generic", "--install", "--dry-run", "--file", "never-written.json"],
        ["diagnose", "--help"],
        ["list", "--help"],
        ["call", "--help"],
    ],
    ids=lambda args: " ".join(args),
)
def test_command_answers_without_importing_the_sdk(subprocess_env: dict[str, str], args: list[str]) -> None:
    script = IMPORTS_AFTER.format(sdk=SDK_MODULES)

    ran = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    loaded = [line for line in ran.stderr.splitlines() if line.startswith("LOADED")]
    assert loaded == ["LOADED "], ran.stderr


def entry_of(client: str, answered: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The printed entry, read as the client reads its file (TOML for Codex, YAML for Goose)."""
    assert answered.returncode == 0, answered.stderr
    if client == "codex":
        snippet = tomllib.loads(answered.stdout)
    elif client == "goose":
        snippet = yaml.safe_load(answered.stdout)
    else:
        snippet = json.loads(answered.stdout)
    assert list(snippet) == [SERVERS_KEY[client]]
    entry: dict[str, Any] = snippet[SERVERS_KEY[client]][SLUG]
    return entry


@pytest.mark.parametrize("client", CLIENTS)
def test_client_config_starts_this_installation_over_stdio(
    subprocess_env: dict[str, str], tmp_path: Path, client: str
) -> None:
    env = {**subprocess_env, f"{ENV_PREFIX}LOG_LEVEL": "debug"}

    answered = command("client-config", client, env=env, cwd=tmp_path)

    entry = entry_of(client, answered)
    command_key, args_key, env_key = LAUNCH_KEYS.get(client, ("command", "args", "env"))
    assert Path(entry[command_key]).is_absolute()
    assert os.access(entry[command_key], os.X_OK), entry[command_key]
    assert entry[args_key][-1] == "serve"
    assert entry[env_key][f"{ENV_PREFIX}LOG_LEVEL"] == "debug"
    if client in ("claude-code", "vscode", "goose"):
        assert entry["type"] == "stdio"
    assert f"{FILE_NAME[client]}:" in answered.stderr, answered.stderr
    # The entry really starts the server: its own version answers from that command.
    started = subprocess.run(
        [entry[command_key], "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert started.stdout.startswith(SLUG), started.stderr


@pytest.mark.parametrize(
    "client", ["claude-code", "cursor", "vscode", "windsurf", "gemini-cli", "goose", "codex", "generic"]
)
def test_client_config_over_http_points_at_the_url(subprocess_env: dict[str, str], client: str) -> None:
    url = "http://127.0.0.1:8123/mcp"

    entry = entry_of(client, command("client-config", client, "--http", url, env=subprocess_env))

    assert entry[URL_KEY.get(client, "url")] == url
    assert "command" not in entry
    assert "cmd" not in entry


def test_unknown_client_is_refused_with_the_known_ones(subprocess_env: dict[str, str]) -> None:
    answered = command("client-config", "zed", env=subprocess_env)

    assert answered.returncode == 2
    assert "'zed'" in answered.stderr
    for client in CLIENTS:
        assert client in answered.stderr


BROKEN = "this mcp is broken on purpose"


@pytest.fixture
def broken_sdk_env(subprocess_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """An environment whose `import mcp` fails, as after a half-finished upgrade."""
    broken = tmp_path / "broken" / "mcp"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(f"raise ImportError({BROKEN!r})\n", encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(broken.parent), subprocess_env.get("PYTHONPATH")]))
    env = {**subprocess_env, "PYTHONPATH": path}
    assert subprocess.run([sys.executable, "-c", "import mcp"], env=env, check=False).returncode != 0
    return env


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        pytest.param(["--help"], "client-config", id="--help"),
        pytest.param(["--version"], SLUG, id="--version"),
        pytest.param(["client-config", "vscode"], '"servers"', id="client-config"),
        pytest.param(["diagnose", "--help"], "exit codes:", id="diagnose --help"),
    ],
)
def test_command_answers_with_the_sdk_broken(
    broken_sdk_env: dict[str, str], args: list[str], shown: str
) -> None:
    answered = command(*args, env=broken_sdk_env)

    assert answered.returncode == 0, answered.stderr
    assert shown in answered.stdout
    assert BROKEN not in answered.stderr


def test_diagnose_reports_a_broken_sdk_instead_of_crashing(broken_sdk_env: dict[str, str]) -> None:
    env = broken_sdk_env

    answered = command("diagnose", "--timeout", "60", env=env)

    assert answered.returncode == EXIT_NO_HANDSHAKE, answered.stdout + answered.stderr
    assert "Traceback" not in answered.stderr
    report = json.loads(answered.stdout)
    assert report["target"]["command"][1:3] == ["-m", PACKAGE]
    assert report["handshake"] is False
    assert any(BROKEN in hint for hint in report["hints"]), report["hints"]


WAITING = "waits for an MCP client"


def read_until(fd: int, wanted: bytes, seen: bytearray, *, timeout: float = 60) -> bytes:
    """Read fd into `seen` until it holds `wanted` (or the time is up); return all read so far."""
    deadline = time.monotonic() + timeout
    while wanted not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if ready and not chunk:
            break
        seen += chunk
    return bytes(seen)


def test_started_in_a_terminal_it_says_how_to_try_it_and_keeps_serving(
    subprocess_env: dict[str, str],
) -> None:
    terminal, terminal_side = pty.openpty()
    attributes = termios.tcgetattr(terminal_side)
    attributes[3] &= ~termios.ECHO  # what is typed is not echoed back to the terminal
    termios.tcsetattr(terminal_side, termios.TCSANOW, attributes)
    server = subprocess.Popen(
        [str(COMMAND)],
        stdin=terminal_side,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env,
    )
    os.close(terminal_side)
    assert server.stdout is not None
    assert server.stderr is not None
    stderr, stdout = bytearray(), bytearray()
    try:
        read_until(server.stderr.fileno(), WAITING.encode(), stderr)
        assert WAITING in stderr.decode(), stderr.decode()
        assert f"{SLUG} diagnose" in stderr.decode()
        assert f"npx {INSPECTOR} {SLUG}" in stderr.decode()  # the pinned one, as `dev` runs it

        # Still an MCP server: a request typed into the terminal is answered on stdout.
        request = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": with_envelope(MODERN)}
        os.write(terminal, json.dumps(request).encode() + b"\n")
        answer = json.loads(read_until(server.stdout.fileno(), b"\n", stdout).splitlines()[0])
        assert answer["id"] == 1
        assert "result" in answer, answer

        os.write(terminal, b"\x04")  # Ctrl+D: end of input, as a client closing stdin
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        os.close(terminal)
    stderr += server.stderr.read()
    assert stderr.decode().count(WAITING) == 1, stderr.decode()
    server.stdout.close()
    server.stderr.close()


def test_in_a_terminal_ctrl_c_stops_it_at_once(subprocess_env: dict[str, str]) -> None:
    terminal, terminal_side = pty.openpty()
    server = subprocess.Popen(
        [str(COMMAND)],
        stdin=terminal_side,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=subprocess_env,
    )
    os.close(terminal_side)
    assert server.stderr is not None
    try:
        stderr = bytearray()
        read_until(server.stderr.fileno(), WAITING.encode(), stderr)
        assert WAITING in stderr.decode(), stderr.decode()

        server.send_signal(signal.SIGINT)  # what Ctrl+C sends; no line was typed

        assert server.wait(timeout=60) == 128 + signal.SIGINT
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        os.close(terminal)
    stderr += server.stderr.read()
    server.stderr.close()
    assert "stopped (Ctrl+C)" in stderr.decode()
    assert "Traceback" not in stderr.decode()


def test_started_by_a_client_it_says_nothing_about_terminals(subprocess_env: dict[str, str]) -> None:
    served = subprocess.run(
        [str(COMMAND)], input="", capture_output=True, text=True, env=subprocess_env, timeout=60, check=False
    )

    assert served.returncode == 0, served.stderr
    assert WAITING not in served.stderr
