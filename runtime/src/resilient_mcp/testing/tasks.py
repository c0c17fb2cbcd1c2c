"""A client's side of durable tasks, for tests and scripts: the SDK's `Client`, taught to wait.

`Client(server, extensions=[TaskPolling()])` declares the tasks extension, and its `call_tool`
of a task-supporting tool then returns the task's final result, as a normal call would: it
polls `tasks/get` at the interval the server gives until the task ends. A task that failed
raises the task's error as an `MCPError`; one that asks the user raises `TaskNeedsInput` with
its questions (answer them with `answer_task`, then `wait_for_task`). The functions below
send the task methods through any open session (`client.session`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from mcp_types import INTERNAL_ERROR, Request, RequestParams, Result
from pydantic import ConfigDict

from resilient_mcp.tasks.wire import EXTENSION

TERMINAL = frozenset({"completed", "failed", "cancelled"})
DEFAULT_TIMEOUT_S = 600.0


class TaskIdParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTaskRequest(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # sent as Mcp-Name over HTTP, as SEP-2663 asks


class CancelTaskRequest(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CreatedTask(Result):
    """A `tools/call` answered with a task (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class Task(Result):
    """A `tasks/get` answer: the task, with its result, error or questions once there are any."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class TaskNeedsInput(Exception):
    """The task waits for answers to `input_requests` (send them with `answer_task`)."""

    def __init__(self, task: Task) -> None:
        super().__init__(f"task {task.task_id} asks: {', '.join(task.input_requests or {})}")
        self.task = task


class _Ack(Result):
    pass


async def get_task(session: ClientSession, task_id: str) -> Task:
    return await session.send_request(GetTaskRequest(params=TaskIdParams(task_id=task_id)), Task)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    await session.send_request(CancelTaskRequest(params=TaskIdParams(task_id=task_id)), _Ack)


async def answer_task(session: ClientSession, task_id: str, responses: Mapping[str, Any]) -> None:
    params = UpdateTaskParams(task_id=task_id, input_responses=dict(responses))
    await session.send_request(UpdateTaskRequest(params=params), _Ack)


async def wait_for_task(
    session: ClientSession,
    task_id: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float | None = None,
    stop_at_input: bool = True,
) -> Task:
    """Poll until the task ends (or asks, with `stop_at_input`); TimeoutError after `timeout_s`."""
    with anyio.fail_after(timeout_s):
        while True:
            task = await get_task(session, task_id)
            if task.status in TERMINAL or (stop_at_input and task.status == "input_required"):
                return task
            interval = poll_s if poll_s is not None else (task.poll_interval_ms or 1000) / 1000
            await anyio.sleep(interval)


def final_result(task: Task) -> CallToolResult:
    """What the call would have answered: the result of a completed task, else its error raised."""
    if task.status == "completed" and task.result is not None:
        return CallToolResult.model_validate(task.result)
    if task.status == "input_required":
        raise TaskNeedsInput(task)
    if task.status == "cancelled":
        raise MCPError(code=INTERNAL_ERROR, message=f"task {task.task_id} was cancelled")
    error = task.error or {}
    raise MCPError(
        code=int(error.get("code", INTERNAL_ERROR)),
        message=str(error.get("message", f"task {task.task_id} failed")),
        data=error.get("data"),
    )


class TaskPolling(ClientExtension):
    """Declares the tasks extension; `call_tool` then waits for a task's end (see the module)."""

    identifier = EXTENSION

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, poll_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.tasks: list[Task] = []  # every task waited for, as it ended: a test can tell a call was one

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        task = await wait_for_task(ctx.session, created.task_id, timeout_s=self.timeout_s, poll_s=self.poll_s)
        self.tasks.append(task)
        return final_result(task)
