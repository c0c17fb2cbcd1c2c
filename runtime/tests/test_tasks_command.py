"""`<slug> tasks`: an operator lists the durable tasks, shows one, cancels one, on this project's backend."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from idempotency_support import new_store
from resilient_mcp.commands import cli, tasks
from resilient_mcp.commands.cli import owner_code
from resilient_mcp.commands.diagnose import MODERN, open_session
from resilient_mcp.store import LOCAL_CALLER, fingerprint
from resilient_mcp.store.task_table import NewTask, TaskStatus
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND, SLUG
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv, server_env
from task_support import TASK_TOOLS, health, start_task, wait_for_status

pytest_plugins = ["conftest_idempotency"]

RESULT = {"content": [{"type": "text", "text": "deleted notes.txt"}], "isError": False}
ERROR = {"code": -32603, "message": "the job hit a protocol-level failure"}
QUESTION = {"method": "elicitation/create", "params": {"mode": "form", "message": "Delete notes.txt?"}}


async def add_tasks(table: str) -> dict[TaskStatus, str]:
    """One task in each status a run leaves (working, input_required, completed, failed): their ids."""
    store = new_store(IDEMPOTENCY_BACKEND, table)
    await store.open()
    ids: dict[TaskStatus, str] = {}
    try:
        made: list[tuple[TaskStatus, str, str]] = [
            ("working", LOCAL_CALLER, "slow_compute"),
            ("input_required", "sub:ana", "confirm_delete"),
            ("completed", "sub:ana", "confirm_delete"),
            ("failed", LOCAL_CALLER, "protocol_error_job"),
        ]
        for status, caller, tool in made:
            arguments = {"filename": "notes.txt", "password": "hunter2-secret"}
            task = NewTask(caller, tool, None, fingerprint(arguments), arguments, None, None, None, "c0ffee")
            created = await store.tasks.create(task, max_open=100)
            assert created.row is not None
            task_id = ids[status] = created.row.task_id
            if status == "input_required":
                assert await store.tasks.park(task_id, {"confirm": QUESTION}, None, None)
            elif status in ("completed", "failed"):
                assert await store.tasks.finish(task_id, status, RESULT if status == "completed" else ERROR)
    finally:
        await store.close()
    return ids


def run_tasks(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = tasks.main(list(args), owner_code())
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_shows_the_newest_tasks_first_with_tool_caller_status_and_age(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = anyio.run(add_tasks, project_table)

    code, out, _ = run_tasks("list", capsys=capsys)

    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["TASK", "TOOL", "CALLER", "STATUS", "AGE", "UPDATED", "MESSAGE"]
    shown = {row.split()[0]: row.split()[1:6] for row in rows}
    assert shown == {
        ids["working"]: ["slow_compute", "local", "working", "0s", "0s"],
        ids["input_required"]: ["confirm_delete", "sub:ana", "input_required", "0s", "0s"],
        ids["completed"]: ["confirm_delete", "sub:ana", "completed", "0s", "0s"],
        ids["failed"]: ["protocol_error_job", "local", "failed", "0s", "0s"],
    }
    assert all(row.split()[6] == "ago" for row in rows)


def test_list_by_status_with_a_limit_as_json(project_table: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = anyio.run(add_tasks, project_table)

    code, out, _ = run_tasks("list", "--status", "input_required", "--json", capsys=capsys)
    limited = json.loads(run_tasks("list", "--limit", "2", "--json", capsys=capsys)[1])

    assert code == 0
    [task] = json.loads(out)
    assert task["task_id"] == ids["input_required"]
    assert (task["tool"], task["caller"], task["status"]) == ("confirm_delete", "sub:ana", "input_required")
    assert task["correlation_id"] == "c0ffee"
    assert "arguments" not in task, "a listing shows no arguments"
    assert len(limited) == 2


@pytest.mark.usefixtures("project_table")
def test_list_of_an_empty_store_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_tasks("list", capsys=capsys)[:2] == (0, "No tasks stored.\n")
    assert run_tasks("list", "--status", "failed", capsys=capsys)[:2] == (0, "No failed tasks.\n")


def test_show_prints_the_result_the_error_or_the_questions_waiting_with_arguments_redacted(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = anyio.run(add_tasks, project_table)

    completed = run_tasks("show", ids["completed"], capsys=capsys)
    failed = run_tasks("show", ids["failed"], capsys=capsys)
    waiting = run_tasks("show", ids["input_required"], capsys=capsys)
    as_json = json.loads(run_tasks("show", ids["failed"], "--json", capsys=capsys)[1])

    assert [completed[0], failed[0], waiting[0]] == [0, 0, 0]
    assert completed[1].startswith(f"Task {ids['completed']}\n")
    assert "  status:          completed\n" in completed[1]
    assert "  result:\n" in completed[1]
    assert '"text": "deleted notes.txt"' in completed[1]
    assert "  error:\n" in failed[1]
    assert "protocol-level failure" in failed[1]
    assert "  waiting for answers to:\n" in waiting[1]
    assert "Delete notes.txt?" in waiting[1]
    assert f"Cancel it: {SLUG} tasks cancel {ids['input_required']}" in waiting[1]
    assert "tasks cancel" not in completed[1], "a finished task cannot be cancelled"
    for shown in (completed[1], failed[1], waiting[1], json.dumps(as_json)):
        assert "hunter2" not in shown
        assert "notes.txt" in shown
    assert as_json["error"] == ERROR
    assert as_json["arguments"] == {"filename": "notes.txt", "password": "[redacted]"}


def test_cancel_of_a_finished_task_changes_nothing(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = anyio.run(add_tasks, project_table)

    code, out, _ = run_tasks("cancel", ids["completed"], capsys=capsys)
    shown = json.loads(run_tasks("show", ids["completed"], "--json", capsys=capsys)[1])

    assert code == 0
    assert (
        out == f"Task {ids['completed']} (confirm_delete) had already ended (completed): nothing changed.\n"
    )
    assert (shown["status"], shown["result"]) == ("completed", RESULT)


def test_cancel_of_a_task_waiting_for_answers_cancels_it(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = anyio.run(add_tasks, project_table)

    code, out, _ = run_tasks("cancel", ids["input_required"], capsys=capsys)
    shown = json.loads(run_tasks("show", ids["input_required"], "--json", capsys=capsys)[1])

    assert code == 0
    assert out.startswith(f"Cancelled task {ids['input_required']} (confirm_delete).")
    assert shown["status"] == "cancelled"
    assert shown["status_message"] == f"cancelled by an operator with `{SLUG} tasks cancel`"


@pytest.mark.usefixtures("project_table")
@pytest.mark.parametrize("action", ["show", "cancel"])
def test_an_unknown_task_id_exits_1_and_says_where_to_look(
    action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_tasks(action, "0123abcd", capsys=capsys)

    assert (code, out) == (1, "")
    assert err.startswith("No task '0123abcd' is stored")
    assert f"{ENV_PREFIX}TASK_TTL_S" in err
    assert f"`{SLUG} tasks list` shows the tasks kept" in err


def test_cancel_from_the_command_line_stops_the_body_on_the_server_running_it(data_dir: Path) -> None:
    """A real server runs the task; the real command, another process, cancels it."""
    env = server_env(data_dir=str(data_dir), shutdown_grace_s="1")
    with StdioSession(server_argv(extra_tools=TASK_TOOLS), env=env) as session:
        assert "result" in open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        task_id = start_task(session, "slow_compute", seconds=300)
        running = health(session)["in_flight"]  # the task's body, running on this server

        cancelled = subprocess.run(
            server_argv("tasks", "cancel", task_id), env=env, capture_output=True, text=True, timeout=120
        )

        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while health(session)["in_flight"] != 0:
            assert time.monotonic() < deadline, "the server still runs the cancelled task's body"
            time.sleep(0.05)
        task = wait_for_status(session, task_id, "cancelled")
    assert running == 1
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(
        f"Cancelled task {task_id} (slow_compute). The server running it stops"
    )
    assert task["statusMessage"] == f"cancelled by an operator with `{SLUG} tasks cancel`"
    assert "result" not in task


IMPORTS = """
import sys
def sdk(): return {m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')}
import resilient_mcp.commands.keys
keys = sdk()
import resilient_mcp.commands.tasks
print(sorted(sdk() - keys))
"""


def test_the_tasks_command_loads_no_more_of_the_sdk_than_the_keys_command() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120, check=False
    )

    assert (ran.returncode, ran.stdout) == (0, "[]\n"), ran.stderr


def test_help_names_the_tasks_command_and_its_actions(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["tasks", "--help"]):
        with pytest.raises(SystemExit) as caught:
            cli.main(argv)
        assert caught.value.code == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.split()[:1] == ["tasks"]]
    assert line.split(None, 1)[1] == "list durable tasks, show one, cancel one"
    for action in ("list", "show", "cancel"):
        assert f"    {action} " in out
