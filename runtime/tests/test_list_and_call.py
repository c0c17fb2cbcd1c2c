"""`sample-server list` and `sample-server call`: the tools and results a model sees, from the shell.

Each runs the installed command, as a user types it, against a real server: the project's own over
stdio (the command starts it), or a running one over Streamable HTTP, with and without its token.
Run once (the sqlite variant): what the commands print does not depend on the backend.
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest

from resilient_mcp.commands.call_tool import argument_pair
from sample_server.project import ENV_PREFIX, SLUG
from support import ANSWER_TIMEOUT_S, http_server, sqlite_project

pytestmark = sqlite_project

COMMAND = Path(sysconfig.get_path("scripts")) / SLUG
TOKEN = "list-and-call-token-" + "c3" * 16


def command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMMAND), *args, "--timeout", str(ANSWER_TIMEOUT_S)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3 * ANSWER_TIMEOUT_S,
        check=False,
    )


def test_list_shows_each_tool_as_a_model_sees_it(subprocess_env: dict[str, str]) -> None:
    listed = command("list", env=subprocess_env)

    assert listed.returncode == 0, listed.stderr
    tools = listed.stdout.split("\n\n")
    assert tools[0] == "3 tools"
    word_count = next(tool for tool in tools if tool.startswith("word_count\n")).splitlines()
    assert word_count[1].split() == ["annotations:", "readOnlyHint=true,", "openWorldHint=false"]
    assert word_count[2].strip() == "Count the words in a text, optionally only the longer ones."
    assert word_count[3].strip() == "parameters (no others accepted):"
    assert word_count[4].split(None, 3) == ["text", "string", "required", "The text to count words in"]
    assert word_count[5].split(None, 4) == [
        "min_length",
        "integer",
        "(>=",
        "1)",
        "default 1  Count only words at least this long",
    ]
    assert word_count[6].strip() == "structured result: object {result: integer}"


def test_call_prints_the_result_and_says_when_it_is_a_replay(subprocess_env: dict[str, str]) -> None:
    note = (
        "append_note",
        "--arg",
        "notebook=shell",
        "--arg",
        "text=bought milk",
        "--arg",
        "idempotency_key=k-1",
    )

    first = command("call", *note, env=subprocess_env)
    again = command("call", *note, "--legacy", env=subprocess_env)  # the 2025-11-25 handshake

    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("isError: false\ncontent:\n"), first.stdout
    assert '"notebook": "shell"' in first.stdout
    assert "replayed" not in first.stdout
    assert again.returncode == 0, again.stderr
    assert 'idempotency: key "k-1", replayed: the stored result, the tool did not run again' in again.stdout


def test_a_tool_error_exits_1_and_shows_its_category(subprocess_env: dict[str, str]) -> None:
    # `3` is JSON, so the tool gets the number 3: a string parameter refuses it (no coercion).
    answered = command("call", "word_count", "--arg", "text=3", env=subprocess_env)

    assert answered.returncode == 1, answered.stderr
    lines = answered.stdout.splitlines()
    assert lines[0] == "isError: true  (category invalid_input, not retryable)"
    assert lines[1:3] == [
        "content:",
        "    invalid_input: 'text': Input should be a valid string, got integer 3",
    ]
    assert lines[3] == "_meta:"
    assert lines[4].startswith('    error: category "invalid_input", retryable false, correlation_id "')


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        ("n=3", ("n", 3)),
        ("flag=true", ("flag", True)),
        ("items=[1, 2]", ("items", [1, 2])),
        ('text="3"', ("text", "3")),
        ("text=hello world", ("text", "hello world")),
        ("text=", ("text", "")),
        ("expr=a=b", ("expr", "a=b")),
    ],
)
def test_an_argument_value_is_json_when_it_parses_else_a_string(pair: str, expected: object) -> None:
    assert argument_pair(pair) == expected


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(["call"], "TOOL", id="no-tool"),
        pytest.param(["call", "word_count", "--arg", "text"], "is not NAME=VALUE", id="arg-without-value"),
        pytest.param(["call", "word_count", "--args", "[1]"], "not an object", id="args-not-an-object"),
        pytest.param(["list", "--http", "localhost:8000"], "is not a URL", id="http-not-a-url"),
    ],
)
def test_a_usage_error_exits_2_and_says_why(
    subprocess_env: dict[str, str], args: list[str], said: str
) -> None:
    refused = command(*args, env=subprocess_env)

    assert refused.returncode == 2, refused.stderr
    assert said in refused.stderr


def test_a_server_stopped_by_its_start_up_checks_exits_78_with_its_fatal_line(
    subprocess_env: dict[str, str],
) -> None:
    env = {**subprocess_env, f"{ENV_PREFIX}TOOL_TIMEOUT_S": "soon"}

    stopped = command("list", env=env)

    assert stopped.returncode == 78, stopped.stderr
    assert f"FATAL: {ENV_PREFIX}TOOL_TIMEOUT_S='soon' is invalid" in stopped.stderr
    assert "Traceback" not in stopped.stderr


def test_over_http_the_token_comes_from_the_environment(subprocess_env: dict[str, str]) -> None:
    server_settings = {f"{ENV_PREFIX}AUTH": "bearer", f"{ENV_PREFIX}BEARER_TOKEN": TOKEN}
    with http_server({**subprocess_env, **server_settings}) as (url, _):
        without = command("list", "--http", url, env=subprocess_env)
        listed = command("list", "--http", url, env={**subprocess_env, f"{ENV_PREFIX}DIAGNOSE_TOKEN": TOKEN})
        called = command(
            "call",
            "word_count",
            "--args",
            '{"text": "one two three"}',
            "--http",
            url,
            "--legacy",
            "--json",
            env={**subprocess_env, f"{ENV_PREFIX}BEARER_TOKEN": TOKEN},
        )

    assert without.returncode == 69, without.stderr
    assert "HTTP 401" in without.stderr
    assert f"export {ENV_PREFIX}DIAGNOSE_TOKEN" in without.stderr
    assert TOKEN not in without.stderr
    assert listed.returncode == 0, listed.stderr
    assert "\nword_count\n" in listed.stdout
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert (result["isError"], result["structuredContent"]) == (False, {"result": 3})
