"""`resilient_mcp.testing.tasks`: the SDK's `Client` taught to wait for a task, as project tests use it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, ElicitRequestParams, ElicitResult

from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.testing.tasks import TaskNeedsInput, TaskPolling, answer_task, wait_for_task

pytestmark = pytest.mark.anyio
FAST = 0.02  # poll this often: the server's interval is a second, longer than these tests need


@pytest.fixture
def server(make_server: Callable[..., ResilientServer]) -> ResilientServer:
    return make_server(tools=importlib.import_module("task_tools"))


async def test_call_tool_answers_the_tasks_result_and_keeps_the_task(server: ResilientServer) -> None:
    polling = TaskPolling(poll_s=FAST)
    async with Client(server, extensions=[polling]) as client:
        result = await client.call_tool("wait_then_answer", {"label": "polled", "seconds": 0.2})
    assert not result.is_error
    assert result.structured_content == {"result": "polled done after 0.2 s"}
    assert [task.status for task in polling.tasks] == ["completed"]


async def test_a_failed_task_raises_its_error_and_a_tool_failure_is_a_result(server: ResilientServer) -> None:
    async with Client(server, extensions=[TaskPolling(poll_s=FAST)]) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("fail_as", {"label": "x", "how": "protocol"})
        refused = await client.call_tool("fail_as", {"label": "x", "how": "terminal"})
    assert raised.value.error.code == INTERNAL_ERROR
    assert "a protocol-level failure" in raised.value.error.message
    assert refused.is_error
    assert refused.meta is not None
    assert refused.meta["error"]["category"] == "terminal"


async def test_a_task_that_asks_raises_its_questions_and_ends_once_answered(server: ResilientServer) -> None:
    async with Client(server, extensions=[TaskPolling(poll_s=FAST)]) as client:
        with pytest.raises(TaskNeedsInput) as asked:
            await client.call_tool("ask_two_questions", {"label": "asked"})
        task = asked.value.task
        assert set(task.input_requests or {}) == {"name", "confirm"}
        accept = {"action": "accept"}
        answers = {
            "name": {**accept, "content": {"name": "Ada"}},
            "confirm": {**accept, "content": {"confirm": True}},
        }
        await answer_task(client.session, task.task_id, answers)
        done = await wait_for_task(client.session, task.task_id, poll_s=FAST, timeout_s=60)
    assert done.status == "completed"
    assert done.result is not None
    assert done.result["structuredContent"] == {"result": "name=Ada, confirm=True"}


def answering(name: str | None) -> Any:
    """An elicitation callback: accepts with `name`, or declines (None)."""

    async def answer(context: Any, params: ElicitRequestParams) -> ElicitResult:
        if name is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={"name": name})

    return answer


async def test_resolve_questions_come_first_then_the_task_keeps_the_answer(server: ResilientServer) -> None:
    polling = TaskPolling(poll_s=FAST)
    async with Client(server, extensions=[polling], elicitation_callback=answering("Ada")) as client:
        result = await client.call_tool("greet_the_asked_name", {})
    assert result.structured_content == {"result": "Hello, Ada!"}
    assert [task.status for task in polling.tasks] == ["completed"]


async def test_a_declined_question_first_is_a_failed_call_and_no_task(
    server: ResilientServer,
) -> None:
    polling = TaskPolling(poll_s=FAST)
    async with Client(server, extensions=[polling], elicitation_callback=answering(None)) as client:
        result = await client.call_tool("greet_the_asked_name", {})
    assert result.is_error
    assert polling.tasks == []
