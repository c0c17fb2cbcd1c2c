"""The Dockerfile's HEALTHCHECK, run as the container runs it, against a real HTTP server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support import http_server

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def healthcheck_command() -> list[str]:
    """The exec-form command of the Dockerfile's HEALTHCHECK instruction."""
    instructions = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    (healthcheck,) = [line for line in instructions if line.startswith("HEALTHCHECK")]
    argv: list[str] = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert argv[0] == "python", "the image has Python and no curl"
    return [sys.executable, *argv[1:]]


def check_health(livez_url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        healthcheck_command(),
        env={**env, "LIVEZ_URL": livez_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_healthcheck_passes_while_serving_and_fails_once_stopped(subprocess_env: dict[str, str]) -> None:
    with http_server(subprocess_env) as (url, _):
        livez = url.removesuffix("/mcp") + "/livez"
        serving = check_health(livez, subprocess_env)
    stopped = check_health(livez, subprocess_env)

    assert serving.returncode == 0, serving.stderr
    assert stopped.returncode == 1
    assert "not live" in stopped.stderr
