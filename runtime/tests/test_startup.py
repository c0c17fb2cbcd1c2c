"""A bad configuration stops the server before it serves: one FATAL line, exit 78.

A good one serves with the garbage collector on, start-up's objects left out of its walks.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.setting_names import check_setting_names
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from sample_server.project import ENV_PREFIX
from sample_server.settings import Settings
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv, server_env
from template_files import TEMPLATE

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


def test_a_misspelt_setting_is_refused_with_the_closest_name(data_dir: Path) -> None:
    result = run("check", tool_timout_s="5", data_dir=str(data_dir))
    assert_one_fatal_line(
        result,
        f"unknown setting {ENV_PREFIX}TOOL_TIMOUT_S - did you mean {ENV_PREFIX}TOOL_TIMEOUT_S?",
    )


def test_every_unknown_setting_of_the_environment_and_dotenv_is_named_on_one_line(data_dir: Path) -> None:
    # The server's working directory is this test's (conftest): its `.env` is read.
    Path(".env").write_text(f"{ENV_PREFIX}LOG_LEVL=debug\n{ENV_PREFIX}LOG_LEVEL=info\n", encoding="utf-8")
    result = run("serve", data_dir=str(data_dir), xyzzy="1", retry_max_attempt="2")
    assert_one_fatal_line(
        result,
        f"unknown settings {ENV_PREFIX}RETRY_MAX_ATTEMPT, {ENV_PREFIX}XYZZY, "
        f"{ENV_PREFIX}LOG_LEVL (in .env) - ",
        f"did you mean {ENV_PREFIX}RETRY_MAX_ATTEMPTS for {ENV_PREFIX}RETRY_MAX_ATTEMPT?",
        f"did you mean {ENV_PREFIX}LOG_LEVEL for {ENV_PREFIX}LOG_LEVL?",
        # No name is close to XYZZY: the line says where the names are.
        f"no setting has a name like {ENV_PREFIX}XYZZY: the settings are listed in the README's Settings",
    )


def test_every_prefixed_variable_the_template_writes_is_a_known_setting() -> None:
    """The shipped Dockerfile, compose file, Kubernetes manifests, server.json, MCPB manifest, CI and
    README pass or name these variables: a server started with any of them must not refuse it."""
    found = set()
    for path in TEMPLATE.rglob("*"):
        if path.is_file() and path.suffix in {".jinja", ".yaml", ".yml", ".json", ".py", ".toml"}:
            text = path.read_text(encoding="utf-8")
            found |= set(re.findall(r"env_prefix\s*(?:-?\}\}|~\s*\")([A-Z][A-Z0-9_]*)", text))
    assert {"DATABASE_URL", "TEST_DATABASE_URL", "BEARER_TOKEN", "HTTP_STATELESS"} <= found  # the scan works
    check_setting_names(Settings, {f"{ENV_PREFIX}{name}": "x" for name in found})


def test_an_owner_setting_is_known_and_suggested(monkeypatch: pytest.MonkeyPatch) -> None:
    class OwnerSettings(Settings):
        weather_api_url: str = "https://api.example.com"

    check_setting_names(OwnerSettings, {f"{ENV_PREFIX}WEATHER_API_URL": "https://w.example.com"})
    with pytest.raises(FatalError, match=f"did you mean {ENV_PREFIX}WEATHER_API_URL\\?"):
        check_setting_names(OwnerSettings, {f"{ENV_PREFIX}WEATHER_API_ULR": "https://w.example.com"})


UNSERVABLE_TOOLS = '''
from typing import Any

from resilient_mcp import prompt, tool


@tool(read_only=True)
def core_test_variadic(city: str, *args: str, **kwargs: Any) -> str:
    """Variadic parameters."""
    return city


@tool(read_only=True)
def core_test_unannotated(city, ctx) -> str:  # type: ignore[no-untyped-def]
    """Unannotated parameters: the context too."""
    return str(city)


@tool(read_only=True)
def core_test_undocumented(city: str) -> str:
    return city


@tool
def core_test_unprotected(amount: int, idempotency_key: str) -> str:
    """A key without side_effect=True."""
    return idempotency_key


@prompt
def core_test_brief(topic: str, *more: str) -> str:
    """A prompt with variadic parameters."""
    return topic
'''


def test_tools_that_cannot_be_served_are_refused_by_module_and_function(
    tmp_path: Path, data_dir: Path
) -> None:
    tools = tmp_path / "unservable_tools"
    tools.mkdir()
    (tools / "core_test_unservable.py").write_text(UNSERVABLE_TOOLS, encoding="utf-8")
    result = run("check", extra_tools=tools, data_dir=str(data_dir))
    where = "sample_server.tools.core_test_unservable"
    assert_one_fatal_line(
        result,
        f"tool {where}:core_test_variadic takes *args, takes **kwargs",
        f"tool {where}:core_test_unannotated has no type annotation on 'city', "
        "has no type annotation on 'ctx'",
        f"tool {where}:core_test_undocumented has no docstring",
        f"tool {where}:core_test_unprotected takes idempotency_key without side_effect=True",
        f"prompt {where}:core_test_brief takes *more",
        "- replace *args and **kwargs with named parameters",  # the fixes follow the one " - "
        "annotate every parameter",
        "add a docstring",
        "add side_effect=True",
    )


def test_a_syntax_error_in_a_tools_module_points_at_its_line(tmp_path: Path, data_dir: Path) -> None:
    tools = tmp_path / "broken_tools"
    tools.mkdir()
    module = tools / "core_test_typo.py"
    module.write_text("from resilient_mcp import tool\n\n\ndef broken(:\n    pass\n", encoding="utf-8")
    result = run("check", extra_tools=tools, data_dir=str(data_dir))
    assert_one_fatal_line(result, "core_test_typo: SyntaxError", f"(at {module}:4)")
    assert "frozen" not in result.stderr


def test_a_null_argument_is_named_null(subprocess_env: dict[str, str]) -> None:
    with StdioSession(server_argv("serve"), env=subprocess_env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        call = {"name": "word_count", "arguments": {"text": "a b", "min_length": None}}
        result = session.request("tools/call", with_envelope(MODERN, call))["result"]
    text = result["content"][0]["text"]
    assert text.startswith("invalid_input: 'min_length': Input should be a valid integer, got null")
    assert "None" not in text
