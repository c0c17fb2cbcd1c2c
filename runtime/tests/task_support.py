"""Durable tasks on a real server: the suite's task tools, and a client that declared the extension.

The tools are the conformance suite's fixtures (`slow_compute`, `failing_job`, `confirm_delete`,
...), added to the server's tools/ the way `conformance/run.py` adds them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg

from resilient_mcp.commands.diagnose import MODERN, with_envelope
from resilient_mcp.store import DB_FILENAME
from resilient_mcp.tasks.wire import EXTENSION, REQUEST_CAPABILITIES
from sample_server.project import IDEMPOTENCY_BACKEND
from support import ANSWER_TIMEOUT_S, HERE, StdioSession

TASK_TOOLS = HERE.parent / "conformance" / "fixtures"


def as_task(params: dict[str, Any]) -> dict[str, Any]:
    """2026-07-28 request params from a client that declared the tasks extension in `_meta`."""
    enveloped = with_envelope(MODERN, params)
    enveloped["_meta"][REQUEST_CAPABILITIES] = {"extensions": {EXTENSION: {}}}
    return enveloped


def start_task(session: StdioSession, tool: str, **arguments: Any) -> str:
    """Call `tool` as a task; its id."""
    answer = session.request("tools/call", as_task({"name": tool, "arguments": arguments}))
    assert answer.get("result", {}).get("resultType") == "task", answer
    task_id: str = answer["result"]["taskId"]
    return task_id


def wait_for_status(session: StdioSession, task_id: str, status: str) -> dict[str, Any]:
    """`tasks/get` until the task is in `status`; the answer."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        answer = session.request("tasks/get", as_task({"taskId": task_id}))
        task: dict[str, Any] = answer["result"]
        if task["status"] == status:
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {task['status']}, not {status}"
        time.sleep(0.05)


def health(session: StdioSession) -> dict[str, Any]:
    """health_check's report, over the session."""
    answer = session.request("tools/call", with_envelope(MODERN, {"name": "health_check", "arguments": {}}))
    report: dict[str, Any] = answer["result"]["structuredContent"]
    return report


def run_sql(data_dir: Path, database_url: str | None, statement: str) -> None:
    """One statement on this project's store (the SQLite file in `data_dir`, or PostgreSQL)."""
    if IDEMPOTENCY_BACKEND == "postgres":
        assert database_url is not None
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(statement.encode())
        return
    with contextlib.closing(sqlite3.connect(data_dir / DB_FILENAME, timeout=ANSWER_TIMEOUT_S)) as db, db:
        db.execute(statement)
