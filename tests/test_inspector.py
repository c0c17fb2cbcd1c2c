"""A client that knows nothing of this project: the MCP Inspector CLI (from npm) against a rendered server."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .project_env import ProjectEnv

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
SLUG = "example-tools"


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
