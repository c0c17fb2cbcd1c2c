"""The task runner runs again, by the takeover rules, a task the table says this process runs
but that runs nowhere: a run's end lost with a database's unflushed commits, or never written."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import anyio
import pytest

from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.store import fingerprint
from resilient_mcp.store.task_table import NewTask, TaskRow
from support import ANSWER_TIMEOUT_S

pytestmark = pytest.mark.anyio


@pytest.fixture
def server(make_server: Callable[..., ResilientServer]) -> ResilientServer:
    return make_server(tools=importlib.import_module("task_tools"))


async def left_working(server: ResilientServer, tool: str, arguments: dict[str, object]) -> TaskRow:
    """A task this process owns, `working`, that no run of this process serves."""
    table = await server.tasks.table()
    new = NewTask("local", tool, None, fingerprint(arguments), arguments, None, None, {}, "0123456789abcdef")
    made = await table.create(new, max_open=10)
    assert made.row is not None
    return made.row


async def ended(server: ResilientServer, task_id: str) -> TaskRow:
    table = await server.tasks.table()
    with anyio.fail_after(ANSWER_TIMEOUT_S):
        while True:
            row = await table.get(task_id)
            assert row is not None
            if row.terminal:
                return row
            await anyio.sleep(0.02)


async def test_a_repeatable_task_left_working_here_runs_again_to_its_end(server: ResilientServer) -> None:
    row = await left_working(server, "wait_then_answer", {"label": "lost", "seconds": 0})
    table = await server.tasks.table()
    assert await server.tasks.rerun_lost(table) == 1
    done = await ended(server, row.task_id)
    assert done.status == "completed"
    assert done.decoded("outcome")["structuredContent"] == {"result": "lost done after 0 s"}
    assert await server.tasks.rerun_lost(table) == 0  # nothing left to run


async def test_a_running_task_is_not_run_twice(server: ResilientServer) -> None:
    row = await left_working(server, "wait_then_answer", {"label": "busy", "seconds": 30})
    server.tasks.start(row)
    table = await server.tasks.table()
    assert await server.tasks.rerun_lost(table) == 0
    assert list(server.tasks.runs) == [row.task_id]
