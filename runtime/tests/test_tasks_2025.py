"""The 2025-11-25 task methods on the same tasks table, spoken in raw JSON-RPC over stdio.

The SDK's Client checks a 2025-11-25 `tools/call` answer as a `CallToolResult`, so it cannot
ask for a task: these tests speak the wire as a 2025-11-25 task client does. One server per
era; each test walks what a client of that era sees, in order.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from resilient_mcp.commands.diagnose.session import NoAnswer
from sample_tools.effects import effects_count
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv, server_env

TASK_TOOLS = Path(__file__).parent / "era_task_tools"
RELATED = "io.modelcontextprotocol/related-task"
ERA = "2025-11-25"


def result_of(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def error_code(answer: dict[str, Any]) -> int:
    assert "error" in answer, answer
    code: int = answer["error"]["code"]
    return code


def call(session: StdioSession, name: str, arguments: dict[str, Any], **more: Any) -> dict[str, Any]:
    return session.request(
        "tools/call", {"name": name, "arguments": arguments, **more}, timeout=ANSWER_TIMEOUT_S
    )


def task_request(session: StdioSession, method: str, task_id: str) -> dict[str, Any]:
    return session.request(method, {"taskId": task_id}, timeout=ANSWER_TIMEOUT_S)


def created(session: StdioSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = result_of(call(session, name, arguments, task={"ttl": 60000}))["task"]
    assert task["status"] == "working"
    assert set(task) >= {"taskId", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
    return task


def status_becomes(session: StdioSession, task_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        task = result_of(task_request(session, "tasks/get", task_id))
        if task["status"] == status or time.monotonic() > deadline:
            assert task["status"] == status, task
            return task
        time.sleep(0.1)


def answer_the_question_during_result(session: StdioSession, task_id: str) -> dict[str, Any]:
    """`tasks/result` on an `input_required` task: the server asks on its stream; the user says yes."""
    session.send({"jsonrpc": "2.0", "id": "result", "method": "tasks/result", "params": {"taskId": task_id}})
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while not (asked := [m for m in session.messages if m.get("method") == "elicitation/create"]):
        assert time.monotonic() < deadline, "no elicitation/create during tasks/result"
        try:
            return session.wait_for("result", timeout=0.2)  # answered without asking: wrong, shown below
        except NoAnswer:
            continue
    (question,) = asked
    assert question["params"]["_meta"][RELATED] == {"taskId": task_id}
    assert question["params"]["message"] == "Wipe disk0?"
    session.send(
        {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": True}}}
    )
    return session.wait_for("result", timeout=ANSWER_TIMEOUT_S)


@pytest.mark.anyio
async def test_a_2025_11_25_client_runs_cancels_and_answers_tasks(subprocess_env: dict[str, str]) -> None:
    argv = server_argv("serve", extra_tools=TASK_TOOLS)
    env = {
        **subprocess_env,
        **server_env(task_poll_interval_ms="100"),
    }  # tasks/result looks 10 times a second
    with StdioSession(argv, env=env) as session:
        hello = {
            "protocolVersion": ERA,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "t", "version": "1"},
        }
        initialized = result_of(session.request("initialize", hello, timeout=ANSWER_TIMEOUT_S))
        session.notify("notifications/initialized")
        assert initialized["capabilities"]["tasks"] == {
            "list": {},
            "cancel": {},
            "requests": {"tools": {"call": {}}},
        }
        tools = {tool["name"]: tool for tool in result_of(session.request("tools/list", {}))["tools"]}
        assert tools["charge_after"]["execution"] == {"taskSupport": "optional"}
        assert tools["report"]["execution"] == {"taskSupport": "required"}
        assert "execution" not in tools["word_count"]

        # A side-effecting task: its effect once, its result from tasks/result with the task named.
        charge = {"account": "acme", "cents": 300, "idempotency_key": "order-1"}
        task = created(session, "charge_after", charge)
        answer = result_of(task_request(session, "tasks/result", task["taskId"]))
        assert answer["content"][0]["text"] == "charged 300 to acme (effect #1)"
        assert answer["_meta"][RELATED] == {"taskId": task["taskId"]}
        assert status_becomes(session, task["taskId"], "completed")["ttl"] == 86_400_000
        assert effects_count() == 1
        again = result_of(call(session, "charge_after", charge, task={}))["task"]
        assert again["taskId"] == task["taskId"], "the same key is the same task"

        # Cancelled before its effect: no effect, no result, and a second cancel is refused.
        slow = created(session, "charge_after", {**charge, "seconds": 600, "idempotency_key": "order-2"})
        cancelled = result_of(task_request(session, "tasks/cancel", slow["taskId"]))
        assert (cancelled["taskId"], cancelled["status"]) == (slow["taskId"], "cancelled")
        assert error_code(task_request(session, "tasks/cancel", slow["taskId"])) == -32602
        assert error_code(task_request(session, "tasks/result", slow["taskId"])) == -32602
        assert effects_count() == 1

        # A task that asks: tasks/result puts the question to the client, then answers the call.
        wipe = created(session, "confirm_wipe", {"name": "disk0"})
        status_becomes(session, wipe["taskId"], "input_required")
        wiped = result_of(answer_the_question_during_result(session, wipe["taskId"]))
        assert wiped["content"][0]["text"] == "wiped disk0"

        # The caller's tasks, all three; an unknown id or cursor is -32602.
        listed = result_of(session.request("tasks/list", {}))
        assert {t["taskId"]: t["status"] for t in listed["tasks"]} == {
            task["taskId"]: "completed",
            slow["taskId"]: "cancelled",
            wipe["taskId"]: "completed",
        }
        assert "nextCursor" not in listed
        assert error_code(session.request("tasks/list", {"cursor": "not-a-cursor"})) == -32602
        assert error_code(task_request(session, "tasks/get", "0" * 32)) == -32602

        # What that revision's tool-level negotiation says: -32601 both ways.
        assert error_code(call(session, "report", {})) == -32601
        assert error_code(call(session, "word_count", {"text": "a b"}, task={})) == -32601
        assert not result_of(call(session, "word_count", {"text": "a b"})).get("isError")


@pytest.mark.anyio
async def test_the_2026_07_28_era_keeps_the_extension_and_has_no_2025_task_methods(
    subprocess_env: dict[str, str],
) -> None:
    argv = server_argv("serve", extra_tools=TASK_TOOLS)
    with StdioSession(argv, env=subprocess_env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        for method in ("tasks/result", "tasks/list"):
            answer = session.request(
                method, with_envelope(MODERN, {"taskId": "0" * 32}), timeout=ANSWER_TIMEOUT_S
            )
            assert error_code(answer) == -32601, method
        tools = result_of(session.request("tools/list", with_envelope(MODERN), timeout=ANSWER_TIMEOUT_S))[
            "tools"
        ]
        assert all("execution" not in tool for tool in tools)
        # tasks/get is still the extension's: without the extension declared, -32021.
        answer = session.request(
            "tasks/get", with_envelope(MODERN, {"taskId": "0" * 32}), timeout=ANSWER_TIMEOUT_S
        )
        assert error_code(answer) == -32021
