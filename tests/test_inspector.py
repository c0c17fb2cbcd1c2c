"""A client that knows nothing of this project: the MCP Inspector CLI (from npm) against a rendered server.

The Inspector is the one the library pins (`resilient_mcp.commands.inspector_pin`): `dev`, the
start-up banner, the generated README and `nox -s demo` all name that one.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .gitrepo import REPO_ROOT
from .project_env import ProjectEnv
from .test_readme_examples import python_blocks

PIN_MODULE = REPO_ROOT / "runtime" / "src" / "resilient_mcp" / "commands" / "inspector_pin.py"
SLUG = "example-tools"
TOKEN = "inspector-test-token-" + "d4" * 16


def load_pin() -> Any:
    """The library's pin module (constants only), loaded as a file: these tests do not import the library."""
    spec = importlib.util.spec_from_file_location("inspector_pin", PIN_MODULE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PIN = load_pin()
INSPECTOR: str = PIN.INSPECTOR


def npm_reachable() -> str | None:
    """None when the Inspector can be fetched from npm; else why it cannot."""
    if shutil.which("npx") is None or shutil.which("npm") is None:
        return "npx is not installed (Node.js and npm are needed for the MCP Inspector CLI)"
    probe = subprocess.run(
        ["npm", "view", INSPECTOR, "version"], capture_output=True, text=True, timeout=120, check=False
    )
    if probe.returncode != 0:
        return f"npm cannot reach the registry: {probe.stderr.strip()[-300:]}"
    return None


def inspector(env: ProjectEnv, data_dir: Path, *method: str) -> tuple[int, Any]:
    """Run the Inspector CLI on the project's stdio command; its exit code and its JSON answer."""
    command = [
        "npx",
        "-y",
        INSPECTOR,
        "--cli",
        "-e",
        f"EXAMPLE_TOOLS_DATA_DIR={data_dir}",
        str(env.venv / "bin" / SLUG),
        "serve",
        *method,
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=env.environ, check=False
    )
    try:
        return result.returncode, json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"the Inspector printed no JSON (exit {result.returncode}):\n{result.stderr[-2000:]}")


@pytest.mark.generated
def test_inspector_lists_tools_and_calls_health_check(
    project_env: Callable[[str], ProjectEnv], tmp_path: Path
) -> None:
    if (reason := npm_reachable()) is not None:
        pytest.skip(reason)
    env = project_env("defaults")

    code, listing = inspector(env, tmp_path, "--method", "tools/list")
    assert code == 0
    assert "health_check" in [tool["name"] for tool in listing["tools"]]

    code, health = inspector(env, tmp_path, "--method", "tools/call", "--tool-name", "health_check")
    assert code == 0
    assert health["structuredContent"]["status"] == "ok"


@pytest.mark.generated
def test_inspector_sees_a_categorised_error(project_env: Callable[[str], ProjectEnv], tmp_path: Path) -> None:
    if (reason := npm_reachable()) is not None:
        pytest.skip(reason)
    env = project_env("defaults")

    code, result = inspector(
        env, tmp_path, "--method", "tools/call", "--tool-name", "word_count", "--tool-arg", "text= "
    )

    assert code == 5  # the Inspector's exit code for an isError result
    assert result["isError"] is True
    assert result["_meta"]["error"]["category"] == "invalid_input"
    assert result["content"][0]["text"].startswith("invalid_input: ")


def test_the_readme_and_the_demo_name_the_pinned_inspector(rendered_project: Callable[[str], Path]) -> None:
    readme = (rendered_project("defaults") / "README.md").read_text(encoding="utf-8")
    noxfile = (REPO_ROOT / "noxfile.py").read_text(encoding="utf-8")

    named = re.findall(r"@modelcontextprotocol/inspector[@\w.-]*", readme)
    assert named, "the README names no Inspector"
    assert set(named) == {INSPECTOR}
    assert f"Node.js {PIN.INSPECTOR_NODE} or newer" in " ".join(readme.split())
    assert "npx {inspector_pin().INSPECTOR}" in noxfile  # the demo's closing line prints the same pin


@contextmanager
def bearer_server(env: ProjectEnv, data_dir: Path) -> Iterator[str]:
    """The project's server over HTTP with AUTH=bearer on a free port: its /mcp URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = {
        "EXAMPLE_TOOLS_AUTH": "bearer",
        "EXAMPLE_TOOLS_BEARER_TOKEN": TOKEN,
        "EXAMPLE_TOOLS_DATA_DIR": str(data_dir),
    }
    server = subprocess.Popen(
        [str(env.venv / "bin" / SLUG), "serve", "--transport", "http", "--port", str(port)],
        env={**env.environ, **settings},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, "the server exited"
                assert time.monotonic() < deadline, "no HTTP server after 120 s"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.generated
def test_inspector_sends_the_bearer_token_as_the_readme_shows(
    project_env: Callable[[str], ProjectEnv], tmp_path: Path
) -> None:
    if (reason := npm_reachable()) is not None:
        pytest.skip(reason)
    env = project_env("defaults")

    with bearer_server(env, tmp_path) as url:
        ran = subprocess.run(
            [
                "npx",
                "-y",
                INSPECTOR,
                "--cli",
                url,
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--method",
                "tools/call",
                "--tool-name",
                "health_check",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env.environ,
            check=False,
        )

        # The README's Python client, as written, with this server's address and token.
        readme = (env.project / "README.md").read_text(encoding="utf-8")
        snippet = python_blocks(readme.split("A client with the token", 1)[1])[0]
        snippet = snippet.replace("http://127.0.0.1:8000/mcp", url).replace("the server's token", TOKEN)
        sdk = subprocess.run(
            [str(env.venv / "bin" / "python"), "-c", snippet],
            capture_output=True,
            text=True,
            timeout=300,
            env=env.environ,
            check=False,
        )

    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["structuredContent"]["status"] == "ok"
    assert sdk.returncode == 0, sdk.stderr[-2000:]
    assert "is_error=False" in sdk.stdout, sdk.stdout
