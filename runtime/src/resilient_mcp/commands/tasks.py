"""`<slug> tasks`: list the durable tasks kept in the store, show one, cancel one.

The store is the one the server uses (the SQLite file in the data directory, or PostgreSQL
shared by every replica), so this sees every replica's tasks. A task belongs to its caller
(the CALLER column, as in `keys list`); an operator sees and cancels any caller's.

Cancelling writes `cancelled` to the store at once; the server process running the task sees
it within `WATCH_S` and cancels the body there (an async body at its next await, a sync body
when it checks its cancel flag). A finished task is left as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, get_args

import anyio

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.commands.columns import aligned
from resilient_mcp.commands.keys import format_age, positive_int
from resilient_mcp.project import this_project
from resilient_mcp.server.startup import exit_fatal, load_settings
from resilient_mcp.store import create_store
from resilient_mcp.store.task_table import TaskRow, TaskStatus, TaskTable
from resilient_mcp.tasks.runner import WATCH_S
from resilient_mcp.tasks.wire import iso
from resilient_mcp.telemetry.redaction import configure_redaction, redact_fields

if TYPE_CHECKING:
    from resilient_mcp.server.app import OwnerCode
    from resilient_mcp.store import IdempotencyStore

EXIT_UNKNOWN_TASK = 1


def build_parser() -> argparse.ArgumentParser:
    slug = this_project().slug
    parser = argparse.ArgumentParser(
        prog=f"{slug} tasks", description="List the durable tasks kept in the store, show one, cancel one."
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="the newest tasks first: id, tool, caller, status, age, last update, message"
    )
    listing.add_argument("--status", choices=get_args(TaskStatus), help="only tasks in this status")
    listing.add_argument(
        "--limit", type=positive_int, default=50, help="at most this many tasks (default: 50)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    show = actions.add_parser("show", help="one task: its result, its error, or the questions it waits on")
    show.add_argument("task_id", metavar="TASK_ID", help="the task's id, as `tasks list` shows it")
    show.add_argument("--json", action="store_true", help="one JSON object instead of text")
    cancel = actions.add_parser("cancel", help="cancel an unfinished task, on whichever process runs it")
    cancel.add_argument("task_id", metavar="TASK_ID", help="the task's id, as `tasks list` shows it")
    return parser


def main(argv: list[str], owner: OwnerCode) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(owner.settings_class)
        configure_redaction(settings.redact_keys, settings.redact_patterns)  # for the arguments shown
        code: int = anyio.run(_run, create_store(settings), args)
    except FatalError as exc:
        exit_fatal(exc)
    return code


async def _run(store: IdempotencyStore, args: argparse.Namespace) -> int:
    await store.open()
    try:
        if args.action == "list":
            return await _list(store.tasks, status=args.status, limit=args.limit, as_json=args.json)
        if args.action == "show":
            return await _show(store.tasks, args.task_id, as_json=args.json)
        return await _cancel(store.tasks, args.task_id)
    finally:
        await store.close()


async def _list(table: TaskTable, *, status: TaskStatus | None, limit: int, as_json: bool) -> int:
    rows = await table.newest(status=status, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([record(row) for row in rows], indent=2, ensure_ascii=False) + "\n")
        return 0
    if not rows:
        sys.stdout.write(f"No {status} tasks.\n" if status else "No tasks stored.\n")
        return 0
    sys.stdout.write(format_table(rows))
    return 0


def format_table(rows: list[TaskRow]) -> str:
    """Aligned columns; the status message comes last and is not padded."""
    header = ("TASK", "TOOL", "CALLER", "STATUS", "AGE", "UPDATED", "MESSAGE")
    table = [header] + [
        (
            row.task_id,
            row.tool,
            row.caller,
            row.status,
            format_age(row.now - row.created_at),
            f"{format_age(row.now - row.updated_at)} ago",
            row.status_message or "",
        )
        for row in rows
    ]
    return aligned(table)


def record(row: TaskRow, *, detailed: bool = False) -> dict[str, Any]:
    """A task as `--json` shows it; `detailed`: with its arguments (redacted) and how it ended."""
    shown: dict[str, Any] = {
        "task_id": row.task_id,
        "tool": row.tool,
        "caller": row.caller,
        "status": row.status,
        "status_message": row.status_message,
        "idempotency_key": row.idempotency_key,
        "correlation_id": row.correlation_id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "age_s": max(0.0, row.now - row.created_at),
    }
    if detailed:
        shown["arguments"] = redact_fields(row.decoded("arguments"))
        if row.status == "completed":
            shown["result"] = row.decoded("outcome")
        elif row.status == "failed":
            shown["error"] = row.decoded("outcome")
        elif row.status == "input_required":
            shown["input_requests"] = row.decoded("input_requests") or {}
    return shown


async def _show(table: TaskTable, task_id: str, *, as_json: bool) -> int:
    row = await table.get(task_id)
    if row is None:
        return _unknown(task_id)
    shown = record(row, detailed=True)
    if as_json:
        sys.stdout.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
        return 0
    status = row.status + (f" ({row.status_message})" if row.status_message else "")
    fields = [
        ("tool", row.tool),
        ("caller", row.caller),
        ("status", status),
        ("created", f"{iso(row.created_at)} ({format_age(row.now - row.created_at)} ago)"),
        ("updated", f"{iso(row.updated_at)} ({format_age(row.now - row.updated_at)} ago)"),
        ("idempotency key", row.idempotency_key or "-"),
        ("correlation id", row.correlation_id),
        ("arguments", json.dumps(shown["arguments"], ensure_ascii=False)),
    ]
    width = max(len(name) for name, _ in fields) + 1
    out = [f"Task {row.task_id}\n", *(f"  {f'{name}:':<{width}} {value}\n" for name, value in fields)]
    for name, title in (
        ("result", "result"),
        ("error", "error"),
        ("input_requests", "waiting for answers to"),
    ):
        if name in shown:
            out.append(f"  {title}:\n{_indented(shown[name])}")
    if not row.terminal:
        out.append(f"\nCancel it: {this_project().slug} tasks cancel {row.task_id}\n")
    sys.stdout.write("".join(out))
    return 0


async def _cancel(table: TaskTable, task_id: str) -> int:
    before = await table.get(task_id)
    if before is None:
        return _unknown(task_id)
    if before.terminal:
        sys.stdout.write(
            f"Task {task_id} ({before.tool}) had already ended ({before.status}): nothing changed.\n"
        )
        return 0
    after = await table.cancel(
        task_id, None, f"cancelled by an operator with `{this_project().slug} tasks cancel`"
    )
    if after is None:  # purged in between: it had ended long ago
        return _unknown(task_id)
    if after.status != "cancelled":
        sys.stdout.write(f"Task {task_id} ({after.tool}) ended first ({after.status}): nothing changed.\n")
        return 0
    sys.stdout.write(
        f"Cancelled task {task_id} ({after.tool}). The server running it stops its body within"
        f" {WATCH_S:g} s: an async body at its next await, a sync body when it checks its cancel flag.\n"
    )
    return 0


def _unknown(task_id: str) -> int:
    sys.stderr.write(
        f"No task {task_id!r} is stored (a finished task is kept for"
        f" {this_project().env_prefix}TASK_TTL_S seconds, then purged)."
        f" `{this_project().slug} tasks list` shows the tasks kept.\n"
    )
    return EXIT_UNKNOWN_TASK


def _indented(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return "".join(f"    {line}\n" for line in text.splitlines())
