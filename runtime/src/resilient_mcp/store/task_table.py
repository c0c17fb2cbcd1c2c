"""Durable tasks in the same database as the idempotency table (DESIGN.md "Tasks").

One row per task: who asked (`caller`), what (`tool`, `arguments`), how far it got (`status`,
`body`), who runs it (`owner`, an instance row of `instances.py`), and how it ended (`outcome`).
Every decision that needs the database to be atomic is one statement or one transaction here;
what to do with a task (run it, re-run it, fail it) is `tasks/`'s.

- Created durably before the client hears of it, so a `tasks/get` sent at once to any replica
  finds it. One task per `(caller, tool, idempotency_key)` (a unique index), and no more than
  `max_open` unfinished tasks per caller (checked by the insert itself).
- A task's writes name its owner (`owner = :owner`), so a process that lost a task (taken over
  after its heartbeat stopped) can no longer change it; a cancelled task is never un-cancelled.
- A task whose owner's instance row is gone (the heartbeat sweep removed it) is an orphan;
  `adopt` hands it to exactly one live process.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from resilient_mcp.records import record

if TYPE_CHECKING:
    from resilient_mcp.store.dialect import Dialect, Session

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
OPEN_STATUSES: tuple[TaskStatus, ...] = ("working", "input_required")
TERMINAL_STATUSES: tuple[TaskStatus, ...] = ("completed", "failed", "cancelled")
TASK_STATUSES: tuple[TaskStatus, ...] = (*OPEN_STATUSES, *TERMINAL_STATUSES)

TASK_BODY_NOT_STARTED = 0  # created or re-queued: running it (again) cannot repeat anything
TASK_BODY_STARTED = 1  # a run began: its effect may have happened


def new_task_id() -> str:
    """128 random bits: a task id cannot be guessed, so it cannot be probed for."""
    return secrets.token_hex(16)


def migration(d: Dialect) -> tuple[str, ...]:
    """Schema 4: the tasks table."""
    t = d.time_type
    statuses = ", ".join(f"'{status}'" for status in TASK_STATUSES)
    return (
        f"""CREATE TABLE mcp_tasks (
            task_id text PRIMARY KEY,
            caller text NOT NULL,
            tool text NOT NULL,
            idempotency_key text,
            fingerprint text NOT NULL,
            arguments text NOT NULL,
            status text NOT NULL CHECK (status IN ({statuses})),
            owner text NOT NULL,
            body {d.small_int_type} NOT NULL DEFAULT 0,
            answers text,
            request_state text,
            input_requests text,
            outcome text,
            status_message text,
            capabilities text,
            correlation_id text NOT NULL,
            created_at {t} NOT NULL{d.time_default},
            updated_at {t} NOT NULL{d.time_default},
            finished_at {t}
        )""",
        "CREATE UNIQUE INDEX mcp_tasks_key ON mcp_tasks (caller, tool, idempotency_key)"
        " WHERE idempotency_key IS NOT NULL",
        "CREATE INDEX mcp_tasks_open ON mcp_tasks (owner, status)"
        " WHERE status IN ('working', 'input_required')",
        "CREATE INDEX mcp_tasks_caller ON mcp_tasks (caller, status)",
        "CREATE INDEX mcp_tasks_updated_at ON mcp_tasks (updated_at)",
    )


JsonColumn = Literal["arguments", "answers", "input_requests", "outcome", "capabilities"]


class TaskRow(NamedTuple):
    """One task as stored. Times are seconds since the epoch; JSON columns still encoded."""

    task_id: str
    caller: str
    tool: str
    idempotency_key: str | None
    fingerprint: str
    arguments: str
    status: TaskStatus
    owner: str
    body: int
    answers: str | None
    request_state: str | None
    input_requests: str | None
    outcome: str | None
    status_message: str | None
    capabilities: str | None
    correlation_id: str
    created_at: float
    updated_at: float
    now: float

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def decoded(
        self, column: Literal["arguments", "answers", "input_requests", "outcome", "capabilities"]
    ) -> Any:
        value = getattr(self, column)
        return None if value is None else json.loads(value)


@record
class NewTask:
    """A task about to be created: everything a run of it needs, on any replica."""

    caller: str
    tool: str
    idempotency_key: str | None
    fingerprint: str
    arguments: Mapping[str, Any]
    answers: Mapping[str, Any] | None
    request_state: str | None
    capabilities: Mapping[str, Any] | None
    correlation_id: str


@record
class Created:
    """What `create` did: `row` is the new task, or the caller's task of the same key
    (`existing`); None when the caller already has `max_open` unfinished tasks."""

    row: TaskRow | None
    existing: bool = False


class TaskStatements:
    """Every statement of the tasks table, in one dialect."""

    def __init__(self, d: Dialect) -> None:
        c, now = d.compile, d.now

        def epoch(column: str) -> str:
            return d.epoch.format(column)

        columns = ", ".join(
            epoch(name) if name in ("created_at", "updated_at") else epoch(now) if name == "now" else name
            for name in TaskRow._fields
        )
        select = f"SELECT {columns} FROM mcp_tasks"
        open_statuses = "status IN ('working', 'input_required')"
        self.insert = c(
            "INSERT INTO mcp_tasks (task_id, caller, tool, idempotency_key, fingerprint, arguments, status,"
            " owner, body, answers, request_state, capabilities, correlation_id, created_at, updated_at)"
            " SELECT :task_id, :caller, :tool, :idempotency_key, :fingerprint, :arguments, 'working',"
            f" :owner, {TASK_BODY_NOT_STARTED}, :answers, :request_state, :capabilities, :correlation_id,"
            f" {now}, {now} WHERE (SELECT count(*) FROM mcp_tasks WHERE caller = :caller AND {open_statuses})"
            " < :max_open ON CONFLICT DO NOTHING"
        )
        self.by_id = c(f"{select} WHERE task_id = :task_id")
        self.of_caller = c(f"{select} WHERE task_id = :task_id AND caller = :caller")
        self.by_key = c(
            f"{select} WHERE caller = :caller AND tool = :tool AND idempotency_key = :idempotency_key"
        )
        mine = " WHERE task_id = :task_id AND owner = :owner AND status = 'working'"
        self.mark_started = c(f"UPDATE mcp_tasks SET body = {TASK_BODY_STARTED}, updated_at = {now}{mine}")
        self.finish = c(
            "UPDATE mcp_tasks SET status = :status, outcome = :outcome, status_message = :message,"
            f" input_requests = NULL, updated_at = {now}, finished_at = {now}{mine}"
        )
        self.set_message = c(f"UPDATE mcp_tasks SET status_message = :message, updated_at = {now}{mine}")
        self.park = c(
            "UPDATE mcp_tasks SET status = 'input_required', input_requests = :input_requests,"
            f" request_state = :request_state, status_message = :message, updated_at = {now}{mine}"
        )
        self.resume = c(
            "UPDATE mcp_tasks SET status = 'working', owner = :owner, body = :body, answers = :answers,"
            f" input_requests = NULL, status_message = NULL, updated_at = {now}"
            " WHERE task_id = :task_id AND status = 'input_required'"
        )
        self.set_pending = c(
            f"UPDATE mcp_tasks SET input_requests = :input_requests, answers = :answers, updated_at = {now}"
            " WHERE task_id = :task_id AND status = 'input_required'"
        )
        self.cancel = c(
            "UPDATE mcp_tasks SET status = 'cancelled', input_requests = NULL, status_message = :message,"
            f" updated_at = {now}, finished_at = {now} WHERE task_id = :task_id AND {open_statuses}"
        )
        self.relaxed_commit = d.relaxed_commit
        self.forget = c(
            "DELETE FROM mcp_tasks WHERE task_id = :task_id"
            " AND status IN ('completed', 'failed', 'cancelled')"
        )
        self.working_of_owner = c("SELECT task_id FROM mcp_tasks WHERE owner = :owner AND status = 'working'")
        # A cancelled task is changed no more: its last update is its cancel (read by that index).
        self.cancelled_of_owner = c(
            f"SELECT task_id FROM mcp_tasks WHERE updated_at >= {d.before.format(':window')}"
            " AND owner = :owner AND status = 'cancelled'"
        )
        # Orphans: working tasks whose owner's instance row the heartbeat sweep removed.
        self.orphans = c(
            "SELECT task_id, owner FROM mcp_tasks AS t WHERE t.status = 'working' AND NOT EXISTS"
            " (SELECT 1 FROM idempotency_instances AS i WHERE i.instance_id = t.owner) LIMIT :limit"
        )
        self.adopt = c(
            f"UPDATE mcp_tasks SET owner = :owner, updated_at = {now}"
            " WHERE task_id = :task_id AND owner = :old_owner AND status = 'working'"
        )
        self.counts = "SELECT status, count(*) FROM mcp_tasks GROUP BY status"
        # The unfinished ones only: read from the partial index, however many finished tasks are kept.
        self.open_counts = f"SELECT status, count(*) FROM mcp_tasks WHERE {open_statuses} GROUP BY status"
        self.open_of_caller = c(f"SELECT count(*) FROM mcp_tasks WHERE caller = :caller AND {open_statuses}")
        # A caller's tasks a page at a time, in task id order (stable under inserts: ids are random).
        self.page_of_caller = c(
            f"{select} WHERE caller = :caller AND task_id > :after ORDER BY task_id LIMIT :limit"
        )
        self.newest = c(f"{select} ORDER BY created_at DESC LIMIT :limit")
        self.newest_of_status = c(f"{select} WHERE status = :status ORDER BY created_at DESC LIMIT :limit")
        # A finished task is kept `ttl` seconds; one left waiting for answers as long.
        self.purge = c(
            f"DELETE FROM mcp_tasks WHERE updated_at < {d.before.format(':ttl')}"
            " AND status IN ('completed', 'failed', 'cancelled', 'input_required')"
        )


Sessions = Callable[..., AbstractAsyncContextManager["Session"]]


class TaskTable:
    """The tasks table of one open store, for the process `owner` (its instance id)."""

    def __init__(self, sessions: Sessions, statements: TaskStatements, owner: str) -> None:
        self._session = sessions  # the store's `_session(operation, transaction=, durable=, shield=)`
        self.sql = statements
        self.owner = owner

    async def create(self, task: NewTask, *, max_open: int) -> Created:
        """Write the task durably (it exists before anyone is told its id); see `Created`."""
        params = {
            "task_id": new_task_id(),
            "caller": task.caller,
            "tool": task.tool,
            "idempotency_key": task.idempotency_key,
            "fingerprint": task.fingerprint,
            "arguments": _encode(task.arguments),
            "answers": None if task.answers is None else _encode(task.answers),
            "request_state": task.request_state,
            "capabilities": None if task.capabilities is None else _encode(task.capabilities),
            "correlation_id": task.correlation_id,
            "owner": self.owner,
            "max_open": max_open,
        }
        async with self._session("task_create", durable=True) as db:
            inserted = await db.execute(self.sql.insert, params)
        if inserted:
            return Created(await self.get(str(params["task_id"])))
        if task.idempotency_key is not None:
            async with self._session("task_create") as db:
                row = await db.one(self.sql.by_key, params)
            if row is not None:
                return Created(TaskRow(*row), existing=True)
        return Created(None)

    async def get(self, task_id: str, *, caller: str | None = None) -> TaskRow | None:
        """The task, if it exists (and is `caller`'s, when one is named)."""
        async with self._session("task_get") as db:
            if caller is None:
                row = await db.one(self.sql.by_id, {"task_id": task_id})
            else:
                row = await db.one(self.sql.of_caller, {"task_id": task_id, "caller": caller})
        return None if row is None else TaskRow(*row)

    async def mark_started(self, task_id: str) -> bool:
        """This process's run of the task begins; False if the task is no longer its to run."""
        async with self._session("task_mark_started") as db:
            return bool(await db.execute(self.sql.mark_started, self._mine(task_id)))

    async def finish(
        self,
        task_id: str,
        status: TaskStatus,
        outcome: Any,
        message: str | None = None,
        *,
        flushed: bool = True,
    ) -> bool:
        """The run ended: completed (a result), failed (an error) or cancelled; False if not ours.

        `flushed=False`: the commit need not reach the disk before this returns, for an end that
        a second run would reproduce (a database crash that loses it leaves the task working
        with its owner alive: the owner runs it again, see `working_mine`)."""
        params = self._mine(task_id, status=status, outcome=_encode(outcome), message=message)
        relaxed = None if flushed else self.sql.relaxed_commit
        async with self._session("task_finish", transaction=relaxed is not None, shield=True) as db:
            if relaxed is not None:
                await db.execute(relaxed)
            return bool(await db.execute(self.sql.finish, params))

    async def forget(self, task_id: str) -> None:
        """Delete a finished task (a key's task that did nothing, before its retry makes another)."""
        async with self._session("task_forget", durable=True) as db:
            await db.execute(self.sql.forget, {"task_id": task_id})

    async def working_mine(self) -> set[str]:
        """The tasks this process owns that the table says are working."""
        async with self._session("task_working_mine") as db:
            rows = await db.rows(self.sql.working_of_owner, {"owner": self.owner})
        return {str(row[0]) for row in rows}

    async def set_message(self, task_id: str, message: str) -> None:
        """The running task's `statusMessage` (its progress)."""
        async with self._session("task_message") as db:
            await db.execute(self.sql.set_message, self._mine(task_id, message=message[:500]))

    async def park(
        self, task_id: str, input_requests: Mapping[str, Any], request_state: str | None, message: str | None
    ) -> bool:
        """The run asked the client: the task waits for `tasks/update`; False if not ours."""
        params = self._mine(
            task_id, input_requests=_encode(input_requests), request_state=request_state, message=message
        )
        async with self._session("task_park", shield=True) as db:
            return bool(await db.execute(self.sql.park, params))

    async def answer(self, task_id: str, caller: str, responses: Mapping[str, Any]) -> TaskRow | None:
        """Record answers to a parked task's pending requests (others are ignored). When none is
        pending any more, the task is `working` again and this process owns it: the row returned
        then says `working` and the caller of this method runs it. None: no such task of the caller."""
        async with self._session("task_answer", transaction=True, durable=True) as db:
            found = await db.one(self.sql.of_caller, {"task_id": task_id, "caller": caller})
            if found is None:
                return None
            row = TaskRow(*found)
            pending: dict[str, Any] = dict(row.decoded("input_requests") or {})
            if row.status != "input_required" or not pending:
                return row
            answers: dict[str, Any] = dict(row.decoded("answers") or {})
            for key, response in responses.items():
                if key in pending:
                    answers[key] = response
                    del pending[key]
            params = {"task_id": task_id, "answers": _encode(answers)}
            if pending:
                await db.execute(self.sql.set_pending, {**params, "input_requests": _encode(pending)})
            else:
                resume = {**params, "owner": self.owner, "body": TASK_BODY_NOT_STARTED}
                await db.execute(self.sql.resume, resume)
            changed = await db.one(self.sql.by_id, {"task_id": task_id})
        return None if changed is None else TaskRow(*changed)

    async def cancel(self, task_id: str, caller: str | None, message: str) -> TaskRow | None:
        """Cancel an unfinished task (a finished one is left as it is); None: no such task of the caller."""
        async with self._session("task_cancel", transaction=True, durable=True) as db:
            where = {"task_id": task_id}
            found = await db.one(
                self.sql.by_id if caller is None else self.sql.of_caller, {**where, "caller": caller}
            )
            if found is None:
                return None
            await db.execute(self.sql.cancel, {**where, "message": message})
            row = await db.one(self.sql.by_id, where)
        return None if row is None else TaskRow(*row)

    async def cancelled_mine(self, window_s: float) -> set[str]:
        """Tasks this process runs that were cancelled in the last `window_s` seconds (anywhere)."""
        async with self._session("task_cancelled") as db:
            rows = await db.rows(
                self.sql.cancelled_of_owner, {"owner": self.owner, "window": float(window_s)}
            )
        return {str(row[0]) for row in rows}

    async def orphans(self, limit: int = 100) -> list[tuple[str, str]]:
        """(task id, owner) of working tasks whose owner is gone."""
        async with self._session("task_orphans") as db:
            rows = await db.rows(self.sql.orphans, {"limit": limit})
        return [(str(task_id), str(owner)) for task_id, owner in rows]

    async def adopt(self, task_id: str, old_owner: str) -> bool:
        """Take an orphan over; True for exactly one process."""
        params = {"task_id": task_id, "old_owner": old_owner, "owner": self.owner}
        async with self._session("task_adopt", durable=True) as db:
            return bool(await db.execute(self.sql.adopt, params))

    async def counts(self, *, open_only: bool = False) -> dict[TaskStatus, int]:
        """How many tasks are kept, by status (every status named; `open_only`: the finished read 0)."""
        async with self._session("task_counts") as db:
            rows = await db.rows(self.sql.open_counts if open_only else self.sql.counts)
        counted: dict[TaskStatus, int] = dict.fromkeys(TASK_STATUSES, 0)
        for status, count in rows:
            counted[status] = int(count)
        return counted

    async def open_count(self, caller: str) -> int:
        async with self._session("task_open_count") as db:
            row = await db.one(self.sql.open_of_caller, {"caller": caller})
        return int(row[0]) if row else 0

    async def page(self, caller: str, *, after: str = "", limit: int = 50) -> list[TaskRow]:
        """The caller's tasks whose id sorts after `after`, at most `limit` of them."""
        async with self._session("task_page") as db:
            rows = await db.rows(self.sql.page_of_caller, {"caller": caller, "after": after, "limit": limit})
        return [TaskRow(*row) for row in rows]

    async def newest(self, *, status: TaskStatus | None = None, limit: int = 50) -> list[TaskRow]:
        async with self._session("task_list") as db:
            if status is None:
                rows = await db.rows(self.sql.newest, {"limit": limit})
            else:
                rows = await db.rows(self.sql.newest_of_status, {"status": status, "limit": limit})
        return [TaskRow(*row) for row in rows]

    async def purge(self, ttl_s: float) -> int:
        async with self._session("task_purge") as db:
            return await db.execute(self.sql.purge, {"ttl": float(ttl_s)})

    def _mine(self, task_id: str, **more: Any) -> dict[str, Any]:
        return {"task_id": task_id, "owner": self.owner, **more}


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
