"""`diagnose` names why a server will not connect: real servers, real subprocesses, one JSON report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from resilient_mcp.commands.diagnose import (
    EXIT_HEALTHY,
    EXIT_NO_HANDSHAKE,
    EXIT_SERVER_FATAL,
    EXIT_STDOUT_NOISE,
    EXIT_TIMEOUT,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
    LEGACY,
    MODERN,
)
from resilient_mcp.commands.diagnose.progress import PROGRESS_AFTER_S, Progress
from sample_server.project import DESCRIPTION, ENV_PREFIX, WEBSITE_URL
from support import ANSWER_TIMEOUT_S, SAMPLE_PACKAGE, free_port, http_server, server_argv, server_env

V1_SERVER = """
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("weather")


@mcp.tool()
def forecast(city: str) -> str:
    return "sunny"


if __name__ == "__main__":
    mcp.run()
"""
V1_ERROR_IMPORT = "from mcp.shared.exceptions import McpError\n"
V1_CAMEL_CASE = "import mcp.types\n\nmcp.types.CallToolResult(content=[]).isError\n"
BANNER_SERVER = '''
from mcp.server.mcpserver import MCPServer

print("Weather server 1.2 - ready for requests", flush=True)
mcp = MCPServer("weather")


@mcp.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return "sunny"


mcp.run()
'''
LOGS_TO_STDOUT_SERVER = """
import logging
import sys

logging.basicConfig(stream=sys.stdout, level=logging.INFO)
from mcp.server.mcpserver import MCPServer

logging.getLogger("weather").info("connecting to the forecast service")
MCPServer("weather").run()
"""
UNFLUSHED_PRINT_SERVER = """
from mcp.server.mcpserver import MCPServer

print("loaded 3 forecast regions")  # buffered: MCP hosts do not set PYTHONUNBUFFERED
MCPServer("weather").run()
"""
FAILING_HEALTH_SERVER = '''
from typing import Any

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("orders")


@mcp.tool()
def health_check() -> dict[str, Any]:
    """Whether the orders database answers."""
    database = {"status": "failing", "detail": "connection refused"}
    return {"status": "failing", "checks": {"database": database}}


mcp.run()
'''
MISSING_MODULE_SERVER = "import nonexistent_module_xyz\n"
SILENT_SERVER = "import time\n\ntime.sleep(600)  # never reads a request, never answers\n"
# --timeout unless a test gives its own: the time limit is not what the other tests check.
PATIENT = f"{ANSWER_TIMEOUT_S:g}"


def diagnose(
    *args: str, env: dict[str, str], timeout: float = 4 * ANSWER_TIMEOUT_S
) -> tuple[int, dict[str, Any]]:
    """Run the project's `<command> diagnose ARGS`; its exit code and its one JSON report."""
    patient = [] if "--timeout" in args else ["--timeout", PATIENT]
    result = subprocess.run(
        server_argv("diagnose", *patient, *args),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.stdout.strip(), f"no report on stdout; stderr:\n{result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["exit_code"] == result.returncode
    return result.returncode, report


def script(tmp_path: Path, source: str) -> list[str]:
    path = tmp_path / "server.py"
    path.write_text(textwrap.dedent(source))
    return ["--", sys.executable, str(path)]


def hint_with(report: dict[str, Any], *fragments: str) -> str:
    """The first hint that holds every fragment; fails with all the hints."""
    for hint in report["hints"]:
        if all(fragment in hint for fragment in fragments):
            return str(hint)
    pytest.fail(f"no hint holds {fragments}; hints: {json.dumps(report['hints'], indent=2)}")


def test_the_project_server_is_healthy_in_both_eras(subprocess_env: dict[str, str]) -> None:
    code, report = diagnose(env=subprocess_env)
    assert code == EXIT_HEALTHY, json.dumps(report, indent=2)
    assert report["verdict"].startswith("healthy")
    assert report["handshake"] is True
    assert report["eras_ok"] == [MODERN, LEGACY]
    assert report["server_exit_code"] == 0
    assert report["server_info"]["name"]
    assert "health_check" in report["tools"]
    # Who the server says it is: description, website, the icon (shortened) and the instructions' size.
    info = report["server_info"]
    assert (info["description"], info["websiteUrl"]) == (DESCRIPTION, WEBSITE_URL)
    assert [(icon["mimeType"], icon["sizes"]) for icon in info["icons"]] == [("image/png", ["64x64"])]
    assert re.fullmatch(r"data:image/png;base64,\.\.\. \(\d+ characters\)", info["icons"][0]["src"])
    assert report["instructions_bytes"] == len((SAMPLE_PACKAGE / "instructions.md").read_bytes().strip())
    assert report["tool_count"] == len(report["tools"])
    assert report["tools_list_bytes"] > 0
    assert report["health_check"]["status"] == "ok"
    assert report["first_answer_ms"] > 0
    assert report["stdout_noise"] == []
    assert report["hints"] == []


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        pytest.param(V1_SERVER, "from mcp.server.mcpserver import MCPServer", id="fastmcp-import"),
        pytest.param(V1_ERROR_IMPORT, "MCPError", id="mcperror-import"),
        pytest.param(V1_CAMEL_CASE, "is_error", id="camelcase-attribute"),
    ],
)
def test_v1_code_on_sdk_v2_gets_a_migration_hint(
    source: str, fragment: str, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    code, report = diagnose(*script(tmp_path, source), env=subprocess_env)
    assert code == EXIT_NO_HANDSHAKE
    assert report["handshake"] is False
    hint_with(report, "v1 code on SDK v2", fragment)


def test_banner_on_stdout_is_reported_as_noise_with_its_likely_source(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    code, report = diagnose(*script(tmp_path, BANNER_SERVER), env=subprocess_env)
    assert code == EXIT_STDOUT_NOISE
    assert report["eras_ok"] == [MODERN, LEGACY], "the server answers; the noise is the problem"
    assert report["stdout_noise"] == ["Weather server 1.2 - ready for requests"]
    hint_with(report, "before the first answer", "start-up banner", "stderr")


def test_logging_to_stdout_is_reported_as_noise(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    code, report = diagnose(*script(tmp_path, LOGS_TO_STDOUT_SERVER), env=subprocess_env)
    assert code == EXIT_STDOUT_NOISE
    assert any("connecting to the forecast service" in line for line in report["stdout_noise"])
    hint_with(report, "log output", "stream=sys.stderr")


def test_unflushed_print_leaks_at_exit_as_under_a_real_host(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    env = {**subprocess_env, "PYTHONUNBUFFERED": "1"}  # diagnose must drop it for the server
    code, report = diagnose(*script(tmp_path, UNFLUSHED_PRINT_SERVER), env=env)
    assert code == EXIT_STDOUT_NOISE
    assert report["stdout_noise"] == ["loaded 3 forecast regions"]
    hint_with(report, "after answers began", "unflushed print")


def test_failing_health_check_is_unhealthy_and_names_the_check(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    code, report = diagnose(*script(tmp_path, FAILING_HEALTH_SERVER), env=subprocess_env)
    assert code == EXIT_UNHEALTHY
    assert report["handshake"] is True
    assert report["health_check"]["status"] == "failing"
    hint_with(report, "health_check reports failing", "database (connection refused)")


def test_missing_module_is_named_with_pip_install(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    code, report = diagnose(*script(tmp_path, MISSING_MODULE_SERVER), env=subprocess_env)
    assert code == EXIT_NO_HANDSHAKE
    assert report["server_exit_code"] == 1
    assert any("nonexistent_module_xyz" in line for line in report["stderr_tail"])
    hint_with(report, "`nonexistent_module_xyz`", "pip install nonexistent_module_xyz")


def test_server_that_never_answers_times_out_instead_of_hanging(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    started = time.monotonic()
    code, report = diagnose(
        "--timeout", "2", *script(tmp_path, SILENT_SERVER), env=subprocess_env, timeout=300
    )
    elapsed = time.monotonic() - started
    assert code == EXIT_TIMEOUT
    assert elapsed < 120, f"2 eras x (2 s + 1 s grace), not the server's 600 s: {elapsed:.1f} s"
    assert report["server_exit_code"] is None, "it ignored its closed stdin and had to be killed"
    assert report["eras"][MODERN]["failure"] == "timeout"
    hint_with(report, "never answered within 2 s")


def test_failed_startup_check_passes_exit_78_and_its_fatal_line_through(
    subprocess_env: dict[str, str],
) -> None:
    env = {**subprocess_env, f"{ENV_PREFIX}LOG_LEVEL": "loud"}
    code, report = diagnose(env=env)
    assert code == EXIT_SERVER_FATAL
    assert report["server_exit_code"] == 78  # the server's own EX_CONFIG, written out
    assert report["verdict"].startswith("start-up checks failed: FATAL: ")
    hint_with(report, "exit 78", f"FATAL: {ENV_PREFIX}LOG_LEVEL='loud'")


@pytest.fixture
def http_url(subprocess_env: dict[str, str]) -> Iterator[str]:
    """The project's server on Streamable HTTP; yields its /mcp URL."""
    with http_server(subprocess_env) as (url, _):
        yield url


def test_http_endpoint_is_healthy_in_both_eras(http_url: str, subprocess_env: dict[str, str]) -> None:
    code, report = diagnose("--http", http_url, env=subprocess_env)
    assert code == EXIT_HEALTHY, json.dumps(report, indent=2)
    assert report["eras_ok"] == [MODERN, LEGACY]
    assert report["health_check"]["status"] == "ok"
    assert "health_check" in report["tools"]


def test_http_wrong_path_names_the_mcp_path(http_url: str, subprocess_env: dict[str, str]) -> None:
    code, report = diagnose("--http", http_url.removesuffix("/mcp") + "/wrong", env=subprocess_env)
    assert code == EXIT_NO_HANDSHAKE
    hint_with(report, "404", "/mcp")


TOKEN = "d1agnose-" + "7f" * 16


@pytest.mark.network
@pytest.mark.parametrize(
    ("settings", "host", "status", "setting"),
    [
        ({"auth": "bearer", "bearer_token": TOKEN}, "127.0.0.1", 401, "BEARER_TOKEN"),
        (
            {"allowed_hosts": "mcp.example.test", "allow_unauthenticated": "true"},
            "0.0.0.0",
            421,
            "ALLOWED_HOSTS",
        ),
        ({"max_request_bytes": "60"}, "127.0.0.1", 413, "MAX_REQUEST_BYTES"),
    ],
)
def test_http_refusals_name_the_server_setting_that_fixes_them(
    data_dir: Path, settings: dict[str, str], host: str, status: int, setting: str
) -> None:
    env = server_env(data_dir=str(data_dir), **settings)
    with http_server(env, host=host) as (url, _):
        code, report = diagnose("--http", url, env=server_env(data_dir=str(data_dir)))
    assert code == EXIT_NO_HANDSHAKE
    hint_with(report, f"HTTP {status}", f"{ENV_PREFIX}{setting}")


@pytest.mark.network
def test_http_sends_the_diagnose_token(data_dir: Path) -> None:
    with http_server(server_env(data_dir=str(data_dir), auth="bearer", bearer_token=TOKEN)) as (url, _):
        code, report = diagnose("--http", url, env=server_env(data_dir=str(data_dir), diagnose_token=TOKEN))
    assert code == EXIT_HEALTHY, json.dumps(report, indent=2)


def test_http_nothing_listening_says_so(subprocess_env: dict[str, str]) -> None:
    code, report = diagnose("--http", f"http://127.0.0.1:{free_port()}/mcp", env=subprocess_env)
    assert code == EXIT_NO_HANDSHAKE
    hint_with(report, "cannot connect", "serve --transport http")


@pytest.mark.parametrize(
    "args",
    [("--timeout", "0"), ("--",), ("--http", "http://127.0.0.1:1/mcp", "--", "cat"), ("--bogus",)],
)
def test_usage_errors_exit_2(args: tuple[str, ...], subprocess_env: dict[str, str]) -> None:
    result = subprocess.run(
        server_argv("diagnose", *args),
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == EXIT_USAGE
    assert result.stdout == ""
    assert "usage:" in result.stderr


def test_run_alone_it_diagnoses_the_server_command_it_is_given(subprocess_env: dict[str, str]) -> None:
    """`python -m resilient_mcp.commands.diagnose -- CMD` belongs to no project: it checks CMD."""
    result = subprocess.run(
        [sys.executable, "-m", "resilient_mcp.commands.diagnose", "--timeout", PATIENT, "--", *server_argv()],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=4 * ANSWER_TIMEOUT_S,
    )

    report = json.loads(result.stdout)
    assert result.returncode == report["exit_code"] == EXIT_HEALTHY, result.stdout + result.stderr
    assert "health_check" in report["tools"]


def test_run_alone_without_a_server_says_what_to_give(subprocess_env: dict[str, str]) -> None:
    """Outside a project there is no server of its own to start: a usage error, not a report."""
    result = subprocess.run(
        [sys.executable, "-m", "resilient_mcp.commands.diagnose"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=ANSWER_TIMEOUT_S,
    )

    assert result.returncode == EXIT_USAGE
    assert result.stdout == ""
    assert "give --http URL, or its command after --" in result.stderr


def test_help_documents_the_exit_codes_and_the_token(subprocess_env: dict[str, str]) -> None:
    result = subprocess.run(
        server_argv("diagnose", "--help"),
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "78 "):
        assert f"\n    {code}" in result.stdout
    assert f"{ENV_PREFIX}DIAGNOSE_TOKEN" in " ".join(result.stdout.split())  # wrapped at any width


# Slow to start the first time only (the first era), as a server that loads a model or a cache.
SLOW_FIRST_START = """
import pathlib, sys, time

started_before = pathlib.Path(sys.argv[1])
if not started_before.exists():
    started_before.touch()
    time.sleep({slow_s})
"""


def test_a_step_past_two_seconds_is_named_on_stderr_while_it_waits(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    server = tmp_path / "slow_first_start.py"
    server.write_text(SLOW_FIRST_START.format(slow_s=PROGRESS_AFTER_S + 1.5), encoding="utf-8")
    command = ["--", sys.executable, str(server), str(tmp_path / "started-before")]

    result = subprocess.run(
        server_argv("diagnose", "--timeout", PATIENT, *command),
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=4 * ANSWER_TIMEOUT_S,
    )

    assert result.returncode == EXIT_NO_HANDSHAKE, result.stdout + result.stderr
    waited = [line for line in result.stderr.splitlines() if line.startswith("diagnose: waiting for")]
    assert waited, result.stderr
    assert "server/discover" in waited[0]
    assert MODERN in waited[0]
    assert json.loads(result.stdout)["exit_code"] == EXIT_NO_HANDSHAKE  # the report alone on stdout


def test_a_step_that_ends_in_time_says_nothing() -> None:
    said: list[str] = []

    with Progress(said.append, after_s=ANSWER_TIMEOUT_S).waiting("a quick step"):
        pass

    assert said == []
