"""Every failure reaches the model as an isError result with a category it can act on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from resilient_mcp.server.resilient_server import ResilientServer
from sample_tools.failing import PLANTED_PATH, PLANTED_SECRET
from support import SAMPLE_TOOLS, error_of, server_argv

Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]


def visible(result: CallToolResult) -> str:
    """Every byte the client receives."""
    return result.model_dump_json(by_alias=True)


async def call(server: ResilientServer, mode: Mode, name: str, **arguments: Any) -> CallToolResult:
    async with Client(server, mode=mode) as client:
        return await client.call_tool(name, arguments)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    ("tool", "category", "retryable", "says"),
    [
        ("bad_input", "invalid_input", False, "city 'Atlantis' is unknown: pass a real city name"),
        ("bad_value", "invalid_input", False, "date must be in the future"),
        ("refused", "terminal", False, "the account is closed; nothing was changed"),
        ("connection_down", "transient", True, "temporary"),
        ("fatal", "fatal", False, "stopping"),
    ],
)
async def test_tool_errors_map_to_their_category(
    server: ResilientServer, mode: Mode, tool: str, category: str, retryable: bool, says: str
) -> None:
    text, error = error_of(await call(server, mode, tool))
    assert error["category"] == category
    assert error["retryable"] is retryable
    assert says in text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_unexpected_exception_shows_only_the_correlation_id(
    server: ResilientServer, mode: Mode
) -> None:
    result = await call(server, mode, "crash")
    text, error = error_of(result)
    assert error == {"category": "internal", "retryable": False, "correlation_id": error["correlation_id"]}
    assert error["correlation_id"] in text
    for internal in (PLANTED_SECRET, "RuntimeError", "/srv/app", "Traceback", "password"):
        assert internal not in visible(result)


@pytest.mark.anyio
async def test_internal_details_go_to_the_log_under_the_same_id(
    make_server: Callable[..., ResilientServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server()  # built inside the test, so its log goes to the captured stderr
    _, error = error_of(await call(server, "auto", "crash"))
    log = capsys.readouterr().err
    crash_lines = [line for line in log.splitlines() if error["correlation_id"] in line]
    assert any("RuntimeError" in line and "Traceback" in line for line in crash_lines)


@pytest.mark.anyio
async def test_transient_dependency_failure_hides_the_address(server: ResilientServer) -> None:
    result = await call(server, "auto", "connection_down")
    assert "10.1.2.3" not in visible(result)
    assert PLANTED_SECRET not in visible(result)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("tool", ["slow", "slow_sync"])
async def test_tool_past_its_time_limit_gets_timeout(server: ResilientServer, mode: Mode, tool: str) -> None:
    text, error = error_of(await call(server, mode, tool, seconds=5))
    assert error["category"] == "timeout"
    assert error["retryable"] is True
    assert "0.5 s" in text


@pytest.mark.anyio
@pytest.mark.smoke
@pytest.mark.parametrize("mode", ERAS)
async def test_unknown_tool_lists_tools_and_suggests_the_closest(server: ResilientServer, mode: Mode) -> None:
    text, error = error_of(await call(server, mode, "ecoh"))
    assert error["category"] == "unknown_tool"
    assert "did you mean 'echo'?" in text
    assert "health_check" in text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_partial_result_keeps_what_worked(server: ResilientServer, mode: Mode) -> None:
    result = await call(server, mode, "partly")
    text, error = error_of(result)
    assert error["category"] == "partial"
    assert "1 of 3 parts failed (b.txt)" in text
    worked = [block.text for block in result.content[1:] if isinstance(block, TextContent)]
    assert worked == ["a.txt: 120 words", "c.txt: 7 words"]
    assert result.structured_content == {
        "parts": {
            "a.txt": {"status": "ok", "result": "120 words"},
            "b.txt": {"status": "error", "error": "not found"},
            "c.txt": {"status": "ok", "result": "7 words"},
        }
    }


@pytest.mark.anyio
@pytest.mark.smoke
@pytest.mark.parametrize("mode", ERAS)
async def test_success_is_not_marked_as_error(server: ResilientServer, mode: Mode) -> None:
    result = await call(server, mode, "echo", text="hello")
    assert not result.is_error
    assert result.structured_content == {"result": "hello"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_categories_over_real_stdio(mode: Mode, subprocess_env: dict[str, str]) -> None:
    command, *args = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    params = StdioServerParameters(command=command, args=args, env=subprocess_env)
    async with Client(params, mode=mode) as client:
        results = {
            name: await client.call_tool(name, arguments)
            for name, arguments in [
                ("crash", {}),
                ("bad_input", {}),
                ("refused", {}),
                ("no_such_tool", {}),
                ("echo", {"text": 3}),
            ]
        }
    categories = {name: error_of(result)[1]["category"] for name, result in results.items()}
    assert categories == {
        "crash": "internal",
        "bad_input": "invalid_input",
        "refused": "terminal",
        "no_such_tool": "unknown_tool",
        "echo": "invalid_input",  # 3 is not a string, in strict and lax mode alike
    }
    assert PLANTED_SECRET not in "".join(visible(result) for result in results.values())


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "category"),
    [
        ("value", "invalid_input"),  # may be a library's text
        ("transient", "transient"),
        ("terminal", "terminal"),  # the owner's own words, minus secrets and the machine's paths
        ("input", "invalid_input"),
    ],
)
async def test_a_secret_or_a_path_in_a_failure_message_never_reaches_the_client(
    make_server: Callable[..., ResilientServer],
    capsys: pytest.CaptureFixture[str],
    kind: str,
    category: str,
) -> None:
    server = make_server()
    result = await call(server, "auto", "leaky", kind=kind)
    text, error = error_of(result)
    assert error["category"] == category
    assert PLANTED_SECRET not in visible(result)
    assert "api_key=[redacted]" in text
    assert PLANTED_PATH not in text
    assert "at [path] line 42" in text
    assert PLANTED_SECRET not in capsys.readouterr().err


@pytest.mark.anyio
async def test_a_secret_in_a_library_exception_is_redacted_for_the_client(server: ResilientServer) -> None:
    result = await call(server, "auto", "leaky_library")
    text, error = error_of(result)
    assert error["category"] == "invalid_input"
    assert PLANTED_SECRET not in visible(result)
    assert "invalid literal" in text, "the rest of the library's message stays useful"


@pytest.mark.anyio
async def test_a_secret_in_a_traceback_is_redacted_in_the_log(
    make_server: Callable[..., ResilientServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server()
    _, error = error_of(await call(server, "auto", "crash"))
    log = capsys.readouterr().err
    crash_lines = [
        line for line in log.splitlines() if error["correlation_id"] in line and "Traceback" in line
    ]
    assert crash_lines, "the traceback is logged under the correlation id"
    assert PLANTED_SECRET not in log
    assert "[redacted]" in crash_lines[0]
