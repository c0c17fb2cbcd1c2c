"""The client's side of these tests, over any transport: a request that declares the tasks
extension, and a task polled until it reaches a status (no tools here; the server imports it
with the other modules of this folder and finds none)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from resilient_mcp.commands.diagnose import MODERN, with_envelope
from resilient_mcp.store.task_table import TERMINAL_STATUSES
from resilient_mcp.tasks.wire import EXTENSION, REQUEST_CAPABILITIES

POLL_FOR_S = 60.0  # how long a test waits for a task's status: generous, never what is tested
POLL_EVERY_S = 0.1

# (method, params) -> the JSON-RPC answer's result
Send = Callable[[str, Mapping[str, Any]], dict[str, Any]]


def as_task(params: Mapping[str, Any]) -> dict[str, Any]:
    """2026-07-28 request params whose client declares the tasks extension for this request."""
    merged = with_envelope(MODERN, params)
    merged["_meta"][REQUEST_CAPABILITIES] = {"extensions": {EXTENSION: {}}}
    return merged


def create(send: Send, tool: str, arguments: Mapping[str, Any]) -> str:
    """tools/call as a task: the new (or, for a key, existing) task's id."""
    result = send("tools/call", {"name": tool, "arguments": dict(arguments)})
    assert result.get("resultType") == "task", result
    task_id: str = result["taskId"]
    return task_id


def get(send: Send, task_id: str) -> dict[str, Any]:
    return send("tasks/get", {"taskId": task_id})


def until(
    send: Send, task_id: str, statuses: Collection[str] = TERMINAL_STATUSES, within_s: float = POLL_FOR_S
) -> dict[str, Any]:
    """tasks/get until the task's status is one of `statuses`; its last answer."""
    deadline = time.monotonic() + within_s
    while True:
        task = get(send, task_id)
        if task["status"] in statuses:
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {task['status']} after {within_s:g} s"
        time.sleep(POLL_EVERY_S)


def wait_for(seen: Callable[[], bool], what: str, within_s: float = POLL_FOR_S) -> float:
    """Poll until `seen()`; how long it took."""
    started = time.monotonic()
    while not seen():
        assert time.monotonic() - started < within_s, f"{what}: not within {within_s:g} s"
        time.sleep(0.05)
    return time.monotonic() - started
