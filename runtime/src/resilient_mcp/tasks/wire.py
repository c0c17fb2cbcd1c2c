"""The tasks extension's JSON (SEP-2663): what a client reads, built from a stored task.

The SDK types only the 2025-11-25 task shapes (`ttl`, a nested `task`), so the v2 shapes are
written here as plain dicts: `CreateTaskResult` (flat: `resultType: "task"` and the task's
fields, nothing else), the `tasks/get` answer (the task, with its result, error or pending
requests inlined) and the acknowledgement of `tasks/update` and `tasks/cancel`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY

from resilient_mcp.store.task_table import TaskRow

EXTENSION = "io.modelcontextprotocol/tasks"
# Where a 2026-07-28 request declares the client's capabilities for itself alone.
REQUEST_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
ACK: dict[str, Any] = {"resultType": "complete"}
TASKS_2025 = "2025-11-25"  # the revision whose core had tasks (`tasks.handshake_era` serves them)


def iso(seconds: float) -> str:
    """A stored time as ISO 8601 in UTC, milliseconds kept."""
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_fields(row: TaskRow, *, ttl_ms: int, poll_interval_ms: int) -> dict[str, Any]:
    """The fields every task answer carries."""
    return {
        "taskId": row.task_id,
        "status": row.status,
        "createdAt": iso(row.created_at),
        "lastUpdatedAt": iso(row.updated_at),
        "ttlMs": ttl_ms,
        "pollIntervalMs": poll_interval_ms,
    }


def created(row: TaskRow, *, ttl_ms: int, poll_interval_ms: int) -> dict[str, Any]:
    """The answer to a `tools/call` that became a task."""
    return {"resultType": "task", **task_fields(row, ttl_ms=ttl_ms, poll_interval_ms=poll_interval_ms)}


def detailed(row: TaskRow, *, ttl_ms: int, poll_interval_ms: int) -> dict[str, Any]:
    """The answer to `tasks/get`: the result or error once terminal, the pending requests while
    `input_required`; never the request state the body keeps between rounds."""
    answer: dict[str, Any] = {
        "resultType": "complete",
        **task_fields(row, ttl_ms=ttl_ms, poll_interval_ms=poll_interval_ms),
    }
    if row.status_message:
        answer["statusMessage"] = row.status_message
    if row.status == "completed" and row.outcome is not None:
        answer["result"] = row.decoded("outcome")
    elif row.status == "failed" and row.outcome is not None:
        answer["error"] = row.decoded("outcome")
    elif row.status == "input_required":
        answer["inputRequests"] = row.decoded("input_requests") or {}
    return answer


def unknown_task(task_id: str) -> MCPError:
    """The one answer for an id that is not the caller's, whether it exists or not."""
    shown = task_id if len(task_id) <= 64 else task_id[:64] + "..."
    return MCPError(
        code=INVALID_PARAMS,
        message=f"unknown task {shown!r}: no task of yours has this id "
        "(a finished task is kept for its ttlMs)",
    )


def extension_required(what: str) -> MCPError:
    """-32021: the client must declare the tasks extension for `what`."""
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"{what} needs the {EXTENSION} extension: declare it in the client's capabilities",
        data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )
