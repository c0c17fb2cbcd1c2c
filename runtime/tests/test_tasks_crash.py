"""A server killed or stopped while its tasks run: the next process takes each over by its rules.

Over real stdio, on SQLite. A restarted server takes the tasks of a dead one over as it starts
(its first heartbeat sweep sees the dead pid on this machine, so nothing is waited for): a
body that cannot repeat anything (a `read_only` tool, or a body that never began) runs again,
a side-effecting one whose body began ends `in_doubt` (its effect happened once), any other
whose body began ends `internal`, never re-run. On SIGTERM the tasks still running past the
grace stay `working` in the store for the next process. No task is left `working` once the
next process has taken them over.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from crash_task_tools.crash_tasks import runs
from crash_task_tools.task_client import Send, as_task, create, until, wait_for
from resilient_mcp.commands.diagnose import MODERN, open_session
from resilient_mcp.server.startup import load_settings
from resilient_mcp.store import LOCAL_CALLER, create_store, fingerprint
from resilient_mcp.store.task_table import NewTask, TaskRow
from resilient_mcp.tasks.runner import NOT_RE_RUN
from sample_server.settings import Settings
from sample_tools.effects import effects_count
from sample_tools.long_calls import marker
from support import ANSWER_TIMEOUT_S, HERE, StdioSession, server_argv, server_env, sqlite_project

CRASH_TASK_TOOLS = HERE / "crash_task_tools"
GRACE_S = 5.0  # the stopping server's grace: room for a task released once the stop began

# The runner's rules do not depend on the backend; PostgreSQL's takeover is test_tasks_replicas'.
pytestmark = sqlite_project


def start(env: dict[str, str]) -> StdioSession:
    session = StdioSession(server_argv("serve", extra_tools=CRASH_TASK_TOOLS), env=env)
    open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
    return session


def over(session: StdioSession) -> Send:
    def send(method: str, params: Any) -> dict[str, Any]:
        answer = session.request(method, as_task(params))
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    return send


def running(names: list[str]) -> None:
    """Wait until each body began once."""
    wait_for(lambda: all(len(runs(name)) == 1 for name in names), f"not every body of {names} began")


def release(*names: str) -> None:
    for name in names:
        marker(f"{name}.release").touch()


async def stored_tasks() -> dict[str, TaskRow]:
    """Every task in the store, as the store has it."""
    store = create_store(load_settings(Settings))
    await store.open()
    try:
        return {row.task_id: row for row in await store.tasks.newest(limit=100)}
    finally:
        await store.close()


def category(task: dict[str, Any]) -> str:
    return str(task["error"]["data"]["category"])


def charge(name: str) -> dict[str, Any]:
    return {"account": "acme", "cents": 500, "name": name, "idempotency_key": f"{name}:charge"}


async def left_unstarted(tool: str, arguments: dict[str, Any]) -> str:
    """A task written as a server's `tools/call` writes it, by a process that then stopped before
    running its body: the id of the task, which is `working` and has no live owner."""
    store = create_store(load_settings(Settings))
    await store.open()
    try:
        made = await store.tasks.create(
            NewTask(
                caller=LOCAL_CALLER,
                tool=tool,
                idempotency_key=None,
                fingerprint=fingerprint(arguments),
                arguments=arguments,
                answers=None,
                request_state=None,
                capabilities=None,
                correlation_id="stopped-before-its-body",
            ),
            max_open=100,
        )
    finally:
        await store.close()  # its instance row goes with it, as a dead server's is swept
    assert made.row is not None
    return made.row.task_id


@pytest.mark.anyio
async def test_the_tasks_of_a_killed_server_are_taken_over_by_the_restarted_one(
    subprocess_env: dict[str, str],
) -> None:
    first = start(subprocess_env)
    send = over(first)
    read = create(send, "read_until_released", {"name": "read"})
    charged = create(send, "charge_until_released", charge("charged"))
    written = create(send, "write_until_released", {"name": "written"})
    running(["read", "charged", "written"])
    first.process.kill()
    first.close()
    unstarted = await left_unstarted("write_until_released", {"name": "unstarted"})
    release("read", "charged", "written", "unstarted")

    with start(subprocess_env) as second:
        ended = {task: until(over(second), task) for task in (read, charged, written, unstarted)}
        restarted = second.process.pid
    stored = await stored_tasks()

    assert ended[read]["status"] == "completed", ended[read]
    assert ended[read]["result"]["content"][0]["text"] == "read: run #2 released"
    assert runs("read") == [first.process.pid, restarted]
    assert ended[charged]["status"] == "failed", ended[charged]
    assert category(ended[charged]) == "in_doubt"
    assert effects_count() == 1, "the charge ran again"
    assert runs("charged") == [first.process.pid]
    assert ended[written]["status"] == "failed", ended[written]
    assert category(ended[written]) == "internal"
    assert NOT_RE_RUN in ended[written]["error"]["message"]
    assert runs("written") == [first.process.pid], "a body that is not safe to repeat ran again"
    assert ended[unstarted]["status"] == "completed", ended[unstarted]
    assert runs("unstarted") == [restarted]
    assert {row.status for row in stored.values()} == {"completed", "failed"}


@pytest.mark.anyio
async def test_on_sigterm_tasks_get_the_grace_then_stay_for_the_next_process(
    subprocess_env: dict[str, str],
) -> None:
    env = {**subprocess_env, **server_env(shutdown_grace_s=f"{GRACE_S:g}")}
    first = start(env)
    send = over(first)
    quick = create(send, "read_until_released", {"name": "quick"})
    left = create(send, "read_until_released", {"name": "left"})
    charged = create(send, "charge_until_released", charge("charged"))
    running(["quick", "left", "charged"])
    first.process.send_signal(signal.SIGTERM)
    wait_for(lambda: '"draining"' in first.stderr_text(), "the server never began to stop")
    release("quick")  # within the grace: it ends on the stopping server
    assert first.close() == 0
    after_stop = await stored_tasks()
    release("left", "charged")

    with start(env) as second:
        ended = {task: until(over(second), task) for task in (quick, left, charged)}
        restarted = second.process.pid
    stored = await stored_tasks()

    assert after_stop[quick].status == "completed"
    assert (after_stop[left].status, after_stop[charged].status) == ("working", "working")
    assert runs("quick") == [first.process.pid]
    assert ended[left]["status"] == "completed", ended[left]
    assert runs("left") == [first.process.pid, restarted]
    assert ended[charged]["status"] == "failed", ended[charged]
    assert category(ended[charged]) == "in_doubt"
    assert effects_count() == 1, "the charge ran again"
    assert {row.status for row in stored.values()} == {"completed", "failed"}
