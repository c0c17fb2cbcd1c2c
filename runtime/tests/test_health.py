"""health_check is always there, read-only, and tells the truth about the server."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from mcp import Client, StdioServerParameters

import task_support
from http_support import get
from resilient_mcp.commands.diagnose import MODERN, open_session
from resilient_mcp.http.probes import READYZ_PATH
from resilient_mcp.server.health_tool import HealthReport
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.store.postgres import describe_dsn
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND
from support import ANSWER_TIMEOUT_S, StdioSession, http_server, server_argv, server_env
from task_support import TASK_TOOLS, run_sql, start_task, wait_for_status

Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]  # the 2025-11-25 initialize handshake, and 2026-07-28


async def health(client: Client) -> dict[str, Any]:
    result = await client.call_tool("health_check", {})
    assert not result.is_error
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@pytest.mark.smoke
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_health_check_reports_ok_with_its_checks(
    mode: Mode, make_server: Callable[..., ResilientServer]
) -> None:
    created = time.monotonic()
    async with Client(make_server(), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        report = await health(client)
    lived = time.monotonic() - created
    annotations = tools["health_check"].annotations
    assert annotations is not None
    assert annotations.read_only_hint is True
    assert report["status"] == "ok"
    assert report["checks"]["data_dir"]["status"] == "ok"
    assert isinstance(report["version"], str)
    assert report["version"]
    assert 0 < report["uptime_s"] <= lived + 0.001, f"it lived {lived:.3f} s"
    assert report["keys_in_doubt"] == 0


@pytest.mark.anyio
async def test_health_checks_output_schema_names_every_field_of_the_report(server: ResilientServer) -> None:
    async with Client(server) as client:
        (tool,) = [t for t in (await client.list_tools()).tools if t.name == "health_check"]
    assert tool.output_schema is not None
    assert set(tool.output_schema["properties"]) == set(HealthReport.model_fields)
    assert set(tool.output_schema["required"]) == set(HealthReport.model_fields)


@pytest.mark.anyio
async def test_health_check_shows_no_path_of_the_servers_machine(
    server: ResilientServer, data_dir: Path
) -> None:
    async with Client(server) as client:
        result = await client.call_tool("health_check", {})
    shown = result.model_dump_json(by_alias=True)
    assert str(data_dir) not in shown
    assert str(data_dir.parent) not in shown


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_health_check_counts_calls_and_errors_by_category(mode: Mode, server: ResilientServer) -> None:
    async with Client(server, mode=mode) as client:
        await client.call_tool("echo", {"text": "hi"})
        await client.call_tool("refused", {})
        await client.call_tool("no_such_tool", {})
        report = await health(client)
    assert report["calls"] == 3
    assert report["errors"] == {"terminal": 1, "unknown_tool": 1}
    assert report["in_flight"] == 0  # health_check does not count itself


@pytest.mark.anyio
async def test_health_check_fails_when_the_data_dir_goes_away(
    server: ResilientServer, data_dir: Path
) -> None:
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.write_text("now a file, not a directory")
    async with Client(server) as client:
        result = await client.call_tool("health_check", {})
    report = result.structured_content
    assert report is not None
    assert report["status"] == "failing"
    assert report["checks"]["data_dir"]["status"] == "failing"
    shown = result.model_dump_json(by_alias=True)  # the client's view: the operator's log names the path
    assert str(data_dir.parent) not in shown
    assert "[path]" not in shown, "nothing to hide: the detail never held the path"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_health_check_over_real_stdio(mode: Mode, subprocess_env: dict[str, str]) -> None:
    command, *args = server_argv("serve")
    params = StdioServerParameters(command=command, args=args, env=subprocess_env)
    async with Client(params, mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        report = await health(client)
    assert "health_check" in names
    assert report["status"] == "ok"
    assert report["in_flight"] == 0  # a fresh server runs nothing


@pytest.mark.network
def test_neither_health_check_nor_readyz_shows_where_the_data_lives(data_dir: Path) -> None:
    """What a client (health_check) or anyone (/readyz) sees names no host, port, database or path."""
    hidden = [str(data_dir)]
    if IDEMPOTENCY_BACKEND == "postgres":
        hidden.append(describe_dsn(os.environ[f"{ENV_PREFIX}DATABASE_URL"]))  # host:port/dbname
    with http_server(server_env(data_dir=str(data_dir))) as (url, _):
        status, ready = get(url, READYZ_PATH)
        assert status == 200, ready
        shown = json.dumps(ready) + json.dumps(anyio.run(health_over_http, url))
    assert "idempotency_store" in shown
    for secret in hidden:
        assert secret not in shown


async def health_over_http(url: str) -> dict[str, Any]:
    async with Client(url) as client:
        return await health(client)


def test_health_check_counts_open_tasks_and_outlives_a_task_table_it_cannot_read(
    data_dir: Path, database_url: str | None
) -> None:
    """Tasks working and waiting for answers, on one server; then its tasks table gone."""
    env = server_env(data_dir=str(data_dir), shutdown_grace_s="1")
    with StdioSession(server_argv(extra_tools=TASK_TOOLS), env=env) as session:
        assert "result" in open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        before = task_health(session)
        for _ in range(2):
            start_task(session, "slow_compute", seconds=300)
        asking = start_task(session, "confirm_delete", filename="notes.txt")
        wait_for_status(session, asking, "input_required")
        during = task_health(session)
        run_sql(data_dir, database_url, "ALTER TABLE mcp_tasks RENAME TO mcp_tasks_elsewhere")
        unreadable = task_health(session)
    assert before == {"status": "ok", "tasks_working": 0, "tasks_input_required": 0}
    assert during == {"status": "ok", "tasks_working": 2, "tasks_input_required": 1}
    assert unreadable == {"status": "ok", "tasks_working": None, "tasks_input_required": None}


def task_health(session: StdioSession) -> dict[str, Any]:
    report = task_support.health(session)
    return {name: report[name] for name in ("status", "tasks_working", "tasks_input_required")}
