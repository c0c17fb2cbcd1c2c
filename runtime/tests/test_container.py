"""The Dockerfile's HEALTHCHECK, run as the container runs it, against a real HTTP server."""

from __future__ import annotations

import json
import subprocess
import sys

from support import http_server
from template_files import template_source


def healthcheck_command() -> list[str]:
    """The exec-form command of the template's Dockerfile's HEALTHCHECK instruction."""
    instructions = template_source("Dockerfile").replace("\\\n", " ").splitlines()
    (healthcheck,) = [line for line in instructions if line.startswith("HEALTHCHECK")]
    assert "{{" not in healthcheck, "the instruction is the same in every project"
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
