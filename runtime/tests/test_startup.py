"""A bad configuration stops the server before it serves: one FATAL line, exit 78.

A good one serves with the garbage collector on, start-up's objects left out of its walks.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from sample_server.project import ENV_PREFIX
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv, server_env

# Refused before the idempotency store opens, whatever the answers: one of the CI's two runs is enough.
before_the_store = pytest.mark.answers_independent_postgres


def run(
    *args: str, stdin: str = "", extra_tools: Path | None = None, **settings: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_argv(*args, extra_tools=extra_tools),
        input=stdin,
        env=server_env(**settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_fatal_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 78  # EX_CONFIG, written out: a changed constant fails here
    assert result.stdout == "", "nothing may reach the protocol stream"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert lines[0].startswith("FATAL: ")
    assert " - " in lines[0], "the line says what to do next after ' - '"
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("command", [(), ("serve",), ("check",)])
@before_the_store
def test_bad_log_level_stops_before_serving(command: tuple[str, ...], data_dir: Path) -> None:
    result = run(*command, log_level="loud", data_dir=str(data_dir))
    assert_one_fatal_line(result, f"{ENV_PREFIX}LOG_LEVEL", "'loud'")


def test_unwritable_data_dir_stops_before_serving(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # a path under a file is unwritable even for root
    result = run("serve", data_dir=str(blocker / "data"))
    assert_one_fatal_line(result, f"{ENV_PREFIX}DATA_DIR", str(blocker / "data"))


@pytest.mark.smoke
@before_the_store
def test_non_numeric_timeout_names_the_variable(data_dir: Path) -> None:
    result = run("check", tool_timeout_s="soon", data_dir=str(data_dir))
    assert_one_fatal_line(result, f"{ENV_PREFIX}TOOL_TIMEOUT_S", "'soon'")


@before_the_store
def test_a_wrong_choice_or_number_is_shown_though_its_name_sounds_secret(data_dir: Path) -> None:
    """`AUTH` and `SESSION_...` hold no secret: the line shows what was typed, so it can be fixed."""
    result = run("check", auth="bearr", data_dir=str(data_dir))
    assert_one_fatal_line(result, f"{ENV_PREFIX}AUTH='bearr'")
    result = run("check", session_idle_timeout_s="soon", data_dir=str(data_dir))
    assert_one_fatal_line(result, f"{ENV_PREFIX}SESSION_IDLE_TIMEOUT_S='soon'")


@before_the_store
def test_a_secret_setting_is_named_but_never_shown(data_dir: Path) -> None:
    result = run("check", auth="bearer", bearer_token="too-short-Zq9", data_dir=str(data_dir))
    assert_one_fatal_line(result, f"{ENV_PREFIX}BEARER_TOKEN", "[redacted]")
    assert "Zq9" not in result.stderr


@before_the_store
def test_tools_module_that_fails_to_import_stops_the_server(tmp_path: Path, data_dir: Path) -> None:
    broken = tmp_path / "broken_tools"
    broken.mkdir()
    # A name no owner's module has: the owner's tools/ would shadow a module of the same name.
    (broken / "core_test_broken.py").write_text("import requests_that_do_not_exist\n")
    result = run("serve", extra_tools=broken, data_dir=str(data_dir))
    assert_one_fatal_line(result, "core_test_broken", "ModuleNotFoundError", "requests_that_do_not_exist")


TOOL_MODULE = """
from resilient_mcp import tool


@tool(read_only=True)
def {name}() -> str:
    \"\"\"A tool.\"\"\"
    return "ok"
"""


@before_the_store
def test_two_tools_with_one_name_stop_the_server(tmp_path: Path, data_dir: Path) -> None:
    tools = tmp_path / "more_tools"
    tools.mkdir()
    for module in ("core_test_billing", "core_test_invoices"):
        (tools / f"{module}.py").write_text(TOOL_MODULE.format(name="core_test_send_invoice"))
    result = run("serve", extra_tools=tools, data_dir=str(data_dir))
    assert_one_fatal_line(
        result, "two tools are named 'core_test_send_invoice'", "core_test_billing", "core_test_invoices"
    )


@before_the_store
def test_a_tool_named_health_check_stops_the_server(tmp_path: Path, data_dir: Path) -> None:
    tools = tmp_path / "more_tools"
    tools.mkdir()
    (tools / "core_test_status.py").write_text(TOOL_MODULE.format(name="health_check"))
    result = run("serve", extra_tools=tools, data_dir=str(data_dir))
    assert_one_fatal_line(result, "'health_check'", "reserves", "rename")


def test_check_passes_with_good_settings(data_dir: Path) -> None:
    result = run("check", data_dir=str(data_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: ")
    assert data_dir.is_dir()


def test_serve_ends_cleanly_when_the_client_closes_stdin(data_dir: Path) -> None:
    result = run("serve", stdin="", data_dir=str(data_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


COLLECTOR_TOOL = """
import gc

from resilient_mcp import tool


@tool(read_only=True)
def core_test_collector() -> dict[str, int]:
    \"\"\"The garbage collector's state while serving.\"\"\"
    return {"enabled": int(gc.isenabled()), "frozen": gc.get_freeze_count()}
"""


def test_serving_collects_garbage_and_skips_start_up_objects(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    tools = tmp_path / "collector_tools"
    tools.mkdir()
    (tools / "core_test_collector.py").write_text(COLLECTOR_TOOL)
    with StdioSession(server_argv("serve", extra_tools=tools), env=subprocess_env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        call = {"name": "core_test_collector", "arguments": {}}
        state = session.request("tools/call", with_envelope(MODERN, call))["result"]["structuredContent"]
    # Off during start-up, the collector must be on again: cycles made by calls would pile up.
    assert state["enabled"] == 1
    # Modules, classes and models made at start-up are frozen, not walked at every collection.
    assert state["frozen"] > 10_000
