"""Owner extension points, through the real command: lifespans, `shared`, dependency checks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pytest
from mcp import Client, StdioServerParameters, stdio_client

from http_support import get
from resilient_mcp import lifespan, shared
from resilient_mcp.http.probes import READYZ_PATH
from resilient_mcp.server.resilient_server import ResilientServer
from support import HERE, http_server, server_argv, server_env
from test_startup import assert_one_fatal_line, run

OWNER_TOOLS = HERE / "owner_tools"
PLANTED_SECRET = "sk-live-0123456789abcdef"
Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]  # the 2025-11-25 initialize handshake, and 2026-07-28


def owner_env(data_dir: Path, **behaviour: str) -> dict[str, str]:
    """The server's environment, with the owner module's behaviour (`dependency="failing"`, ...)."""
    env = server_env(data_dir=str(data_dir))
    env.update({f"CORE_TEST_{name.upper()}": value for name, value in behaviour.items()})
    return env


def stdio_params(env: dict[str, str]) -> StdioServerParameters:
    command, *args = server_argv("serve", extra_tools=OWNER_TOOLS)
    return StdioServerParameters(command=command, args=args, env=env)


async def health(client: Client) -> dict[str, Any]:
    result = await client.call_tool("health_check", {})
    assert not result.is_error
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_lifespan_opens_once_and_its_object_is_shared_across_calls(mode: Mode, data_dir: Path) -> None:
    async with Client(stdio_params(owner_env(data_dir)), mode=mode) as client:
        counts = [(await client.call_tool("count_calls", {})).structured_content for _ in range(3)]
        report = await health(client)
        assert (data_dir / "lifespan.log").read_text() == "open\n"
    assert counts == [{"result": 1}, {"result": 2}, {"result": 3}]
    assert report["checks"]["billing_api"] == {"status": "ok", "detail": "reachable (3 calls so far)"}
    assert report["checks"]["ledger"] == {"status": "degraded", "detail": "read-only replica"}
    assert report["status"] == "degraded"
    assert (data_dir / "lifespan.log").read_text() == "open\nclose\n"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_an_in_memory_client_opens_and_closes_the_lifespans_too(
    mode: Mode, data_dir: Path, make_server: Callable[..., ResilientServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner's own tests use Client(server) in memory: shared() must work there as well.
    package = ModuleType("core_test_owner_tools")
    package.__path__ = [str(OWNER_TOOLS)]
    monkeypatch.setitem(sys.modules, package.__name__, package)
    async with Client(make_server(tools=package), mode=mode) as client:
        first = await client.call_tool("count_calls", {})
        second = await client.call_tool("count_calls", {})
    assert (first.structured_content, second.structured_content) == ({"result": 1}, {"result": 2})
    assert (data_dir / "lifespan.log").read_text() == "open\nclose\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("behaviour", "detail"),
    [
        ("failing", "503 from the billing API"),
        ("hang", "timed out after 1 s"),
        ("raise", "ConnectionError: refused with api_key=[redacted] in [path]"),
    ],
)
async def test_a_failing_dependency_shows_in_health_check(
    behaviour: str, detail: str, data_dir: Path
) -> None:
    async with Client(stdio_params(owner_env(data_dir, dependency=behaviour))) as client:
        report = await health(client)
    assert report["status"] == "failing"
    assert report["checks"]["billing_api"] == {"status": "failing", "detail": detail}
    assert PLANTED_SECRET not in json.dumps(report)


@pytest.mark.network
@pytest.mark.anyio
async def test_over_http_the_lifespan_is_shared_by_every_session_and_readyz_names_the_dependency(
    data_dir: Path,
) -> None:
    with http_server(owner_env(data_dir, dependency="failing"), extra_tools=OWNER_TOOLS) as (url, _):
        counts = []
        for mode in ERAS:  # a 2025-11-25 session, then the sessionless 2026-07-28 era
            async with Client(url, mode=mode) as client:
                counts.append((await client.call_tool("count_calls", {})).structured_content)
        status, ready = get(url, READYZ_PATH)
        assert (data_dir / "lifespan.log").read_text() == "open\n"
    assert counts == [{"result": 1}, {"result": 2}]
    assert status == 503
    assert ready["failing"]["billing_api"] == {"status": "failing", "detail": "503 from the billing API"}
    assert (data_dir / "lifespan.log").read_text() == "open\nclose\n"  # SIGTERM drains, then closes


def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_argv("check", extra_tools=OWNER_TOOLS), env=env, capture_output=True, text=True, timeout=60
    )


def test_check_lists_the_owner_dependencies(data_dir: Path) -> None:
    result = check(owner_env(data_dir, dependency="failing"))
    assert result.returncode == 0, result.stderr
    assert "  billing_api: failing - 503 from the billing API\n" in result.stdout
    assert "  ledger: degraded - read-only replica\n" in result.stdout
    assert "  idempotency_store: ok" in result.stdout
    assert (data_dir / "lifespan.log").read_text() == "open\nclose\n"


@pytest.mark.parametrize("command", ["serve", "check"])
def test_fatal_error_in_a_lifespan_stops_the_server_with_its_own_line(command: str, data_dir: Path) -> None:
    result = subprocess.run(
        server_argv(command, extra_tools=OWNER_TOOLS),
        env=owner_env(data_dir, lifespan="fatal"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_fatal_line(result, "FATAL: the billing API key is missing - set BILLING_API_KEY")
    assert "fix the module" not in result.stderr


def test_an_exception_in_a_lifespan_stops_the_server_naming_the_lifespan(data_dir: Path) -> None:
    result = subprocess.run(
        server_argv("serve", extra_tools=OWNER_TOOLS),
        env=owner_env(data_dir, lifespan="raise"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_fatal_line(result, "lifespan counter failed to open: ConnectionError: billing API refused key")
    assert PLANTED_SECRET not in result.stderr


def test_fatal_error_in_a_dependency_check_at_startup_stops_the_server(data_dir: Path) -> None:
    result = subprocess.run(
        server_argv("serve", extra_tools=OWNER_TOOLS),
        env=owner_env(data_dir, dependency="fatal"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_fatal_line(result, "FATAL: the billing API rejects this server's key - renew BILLING_API_KEY")
    assert (data_dir / "lifespan.log").read_text() == "open\n"  # os._exit: no teardown after FATAL


def test_fatal_error_at_import_of_a_tools_module_keeps_its_own_line(tmp_path: Path, data_dir: Path) -> None:
    tools = tmp_path / "fatal_tools"
    tools.mkdir()
    (tools / "core_test_fatal_import.py").write_text(
        "from resilient_mcp import FatalError\n\n"
        "raise FatalError('BILLING_API_KEY is not set', 'set it in the environment')\n"
    )
    result = run("serve", extra_tools=tools, data_dir=str(data_dir))
    assert_one_fatal_line(result, "FATAL: BILLING_API_KEY is not set - set it in the environment")
    assert "fix the module" not in result.stderr
    assert "cannot import" not in result.stderr


@pytest.mark.anyio
async def test_owner_redaction_keys_and_patterns_hide_values_from_client_and_log(data_dir: Path) -> None:
    env = owner_env(data_dir)
    env.update(server_env(redact_keys="billing_ref", redact_patterns=r"ACME-\d{4}-\d{4}"))
    params = stdio_params(env)
    log = data_dir.parent / "server.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("refund_lookup", {"reference": "R-77-secret"})
    shown = result.model_dump_json(by_alias=True)
    assert "billing_ref=[redacted]" in shown
    assert "card [redacted]" in shown
    assert "R-77-secret" not in shown
    assert "ACME-4242-9999" not in shown
    logged = log.read_text()
    assert "R-77-secret" not in logged
    assert "ACME-4242-9999" not in logged


def test_a_bad_redaction_pattern_stops_the_server_naming_it(data_dir: Path) -> None:
    result = run("check", data_dir=str(data_dir), redact_patterns="ACME-(\\d+")
    assert_one_fatal_line(result, "REDACT_PATTERNS", "ACME-(")


def test_shared_outside_a_running_server_or_of_a_plain_function_says_what_to_do() -> None:
    @lifespan
    async def client() -> AsyncIterator[str]:
        yield "a client"

    async def not_a_lifespan() -> AsyncIterator[str]:
        yield "a client"

    with pytest.raises(RuntimeError, match=r"no server is running.*call shared\(\) inside a tool"):
        shared(client)
    with pytest.raises(TypeError, match=r"not a @lifespan function; decorate it with @lifespan"):
        shared(not_a_lifespan)
    with pytest.raises(TypeError, match=r"@lifespan needs an async generator function"):
        lifespan(lambda: iter(()))  # type: ignore[arg-type,return-value]
