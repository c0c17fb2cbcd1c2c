"""Running tasks: each body in the background on the process that owns it, to a stored end.

A run is the tool's ordinary call path (`ToolCalls.answer` with a `TaskRun`: validation, the
idempotency key, the time limit, retries, the call line), so a task's body behaves exactly as
a call's. How the run ended is written to the task, and only if the task is still this
process's and still `working` (a cancelled task is never un-cancelled):

| the run | the task |
|---|---|
| a result, an isError result included | `completed`, the result inlined |
| an `InputRequiredResult` (it asks) | `input_required` with those requests |
| an `MCPError` | `failed` with that error |
| cut by the shutdown | left `working`: the next process takes it over |

One loop per process (`watch`) keeps two promises: a task cancelled on another replica
stops here within `WATCH_S`, and a task whose process died is taken over by a live one
within a heartbeat sweep (`HEARTBEAT_S` x `STALE_AFTER_BEATS`) plus `ADOPT_EVERY_S`. A
taken-over task runs again if that cannot repeat anything (its body had not begun, or the
tool is `read_only` or `idempotent`); a `side_effect` tool runs again through its
idempotency key, which answers `in_doubt` (the task `failed`) unless the key shows, or the
tool's `reconcile` says, that nothing happened; any other tool whose body had begun ends
`failed`, never re-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any, Protocol

from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from mcp_types import INTERNAL_ERROR
from pydantic import BaseModel

from resilient_mcp.authoring.errors import StoreUnavailableError
from resilient_mcp.calls.idempotent_call import write_retried
from resilient_mcp.calls.tool_call import CutAtShutdown, TaskRun, ToolCalls
from resilient_mcp.store import StoreHandle
from resilient_mcp.store.task_table import TASK_BODY_STARTED, TaskRow, TaskStatus, TaskTable
from resilient_mcp.tasks.task_context import ProgressSink, TaskContext
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)

WATCH_S = 1.0  # how often this process looks for its tasks cancelled elsewhere
ADOPT_EVERY_S = 5.0  # how often it looks for tasks whose process died
CANCEL_WINDOW_S = 120.0  # a cancellation older than this was seen already (or its run is gone)
START_RETRY_S = 5.0  # a run that could not reach the store before its body: started again then
END_RETRY_S = 600.0  # how long a run's end is retried while the store does not answer
PROGRESS_EVERY_S = 1.0  # the most often a task's progress is written as its statusMessage
NOT_RE_RUN = "not re-run: the tool is not marked safe to repeat (read_only or idempotent)"

# (task id, capabilities, answers, request state, progress) -> the body's Context
ContextFactory = Callable[[TaskRow, ProgressSink], TaskContext]


class TaskTelemetry(Protocol):
    """What a run tells the telemetry (`server/otel.py`) when it ends a task, if configured."""

    def task_ended(self, tool: str, status: TaskStatus, duration_s: float) -> None:
        """`duration_s`: from the task's creation to its end (a park and a takeover included)."""


class TaskRunner:
    """The task runs of one server process, and the loop that watches for cancels and orphans.

    `telemetry` is set when a transport is served (as `ToolCalls.telemetry` is).
    """

    def __init__(
        self,
        tool_calls: ToolCalls,
        store: StoreHandle,
        new_context: ContextFactory,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tool_calls = tool_calls
        self.store = store
        self.new_context = new_context
        self.clock = clock
        self.telemetry: TaskTelemetry | None = None
        self.runs: dict[str, asyncio.Task[None]] = {}
        self._stopped_here: set[str] = set()  # cancelled (or stopping): their end is not written
        self._watch: asyncio.Task[None] | None = None
        self._closing = False

    async def table(self) -> TaskTable:
        return (await self.store.get()).tasks

    # --- runs -------------------------------------------------------------------

    def start(self, row: TaskRow, *, taken_over: bool = False) -> None:
        """Run the task's body in the background (once per process at a time)."""
        if self._closing or row.task_id in self.runs:
            return
        self.watch()
        run = asyncio.get_running_loop().create_task(self._run(row, taken_over), name=f"task {row.task_id}")
        self.runs[row.task_id] = run
        run.add_done_callback(lambda _: self._ended(row.task_id))

    def _ended(self, task_id: str) -> None:
        self.runs.pop(task_id, None)
        self._stopped_here.discard(task_id)

    def cancel_here(self, task_id: str) -> bool:
        """Stop the task's run if this process runs it (the store says `cancelled` already)."""
        run = self.runs.get(task_id)
        if run is None or run.done():
            return False
        self._stopped_here.add(task_id)
        run.cancel()
        return True

    async def _run(self, row: TaskRow, taken_over: bool) -> None:
        ended = _EndOfRun(row, self.clock(), self.clock, self.telemetry)
        try:
            await self._run_to_the_end(row, taken_over, ended)
        except asyncio.CancelledError:
            if row.task_id not in self._stopped_here:
                raise
            if not self._closing:  # cancelled (the store says so already), not cut by the shutdown
                ended("cancelled")
        except CutAtShutdown:
            log.info("task_left_for_takeover", task_id=row.task_id, tool=row.tool)
        except StoreUnavailableError:  # before the body ran (a run's end is retried): try again later
            log.warning("task_start_deferred", task_id=row.task_id, tool=row.tool, retry_in_s=START_RETRY_S)
            again = functools.partial(self.start, row, taken_over=taken_over)
            asyncio.get_running_loop().call_later(START_RETRY_S, again)
        except Exception:
            log.error("task_run_failed", task_id=row.task_id, tool=row.tool, exc_info=True)
            with contextlib.suppress(Exception):
                failed = lost(row, "internal", "the run failed")
                await ended.write(await self.table(), "failed", failed)

    async def _run_to_the_end(self, row: TaskRow, taken_over: bool, ended: _EndOfRun) -> None:
        table = await self.table()
        served = self.tool_calls.served.get(row.tool)
        if served is None:
            await ended.write(table, "failed", lost(row, "internal", f"{row.tool} is no longer served"))
            return
        spec = served.spec
        repeatable = spec.safe_to_repeat or spec.side_effect  # side effect: its key decides
        if taken_over and row.body == TASK_BODY_STARTED and not repeatable:
            log.warning("task_not_re_run", task_id=row.task_id, tool=row.tool)
            await ended.write(table, "failed", lost(row, "internal", NOT_RE_RUN))
            return
        if not repeatable and not await table.mark_started(row.task_id):
            return  # no longer this process's task, or no longer working
        context = self.new_context(row, self._progress_writer(table, row.task_id))
        arguments = row.decoded("arguments")
        try:
            result = await self.tool_calls.answer(row.tool, arguments, context, task=TaskRun(row.caller))
        except MCPError as exc:
            await ended.write(table, "failed", _json(exc.error))
            return
        if isinstance(result, InputRequiredResult):
            asked = result.input_requests or {}
            requests = {key: _json(request) for key, request in asked.items()}
            park = functools.partial(table.park, row.task_id, requests, result.request_state, None)
            await write_retried(park, retry_s=END_RETRY_S)
            return
        if taken_over and spec.side_effect and error_category(result) == "in_doubt":
            await ended.write(table, "failed", lost(row, "in_doubt", _in_doubt_text(result)))
            return
        # A run that can be repeated ends without a flush of its own: lost in a database crash,
        # it is run again (its side effect, if any, replayed by its key, which was flushed).
        await ended.write(table, "completed", _json(result), flushed=not repeatable)

    def _progress_writer(self, table: TaskTable, task_id: str) -> ProgressSink:
        last = [-PROGRESS_EVERY_S]

        async def write(progress: float, total: float | None, message: str | None) -> None:
            now = self.clock()
            if now - last[0] < PROGRESS_EVERY_S:
                return
            last[0] = now
            shown = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
            with contextlib.suppress(StoreUnavailableError):  # progress is a courtesy, never a failure
                await table.set_message(task_id, f"{message} ({shown})" if message else shown)

        return write

    # --- the watch loop -----------------------------------------------------------

    def watch(self) -> None:
        """Start the loop (once): at start-up, so tasks of a dead process are taken over."""
        if self._watch is None and not self._closing:
            self._watch = asyncio.get_running_loop().create_task(self._watching(), name="tasks watch")

    async def _watching(self) -> None:
        next_adoption = self.clock()
        while True:
            try:
                table = await self.table()
                if self.runs:
                    for task_id in await table.cancelled_mine(CANCEL_WINDOW_S) & set(self.runs):
                        self.cancel_here(task_id)
                if self.clock() >= next_adoption:
                    next_adoption = self.clock() + ADOPT_EVERY_S
                    await self.adopt_orphans(table)
                    await self.rerun_lost(table)
            except StoreUnavailableError:
                pass  # the store says so in health_check; try again next round
            except Exception:
                log.error("tasks_watch_failed", exc_info=True)
            await asyncio.sleep(WATCH_S)

    async def adopt_orphans(self, table: TaskTable) -> int:
        """Take over the working tasks whose process died; how many this process took."""
        taken = 0
        for task_id, old_owner in await table.orphans():
            if not await table.adopt(task_id, old_owner):
                continue  # another process was first
            row = await table.get(task_id)
            if row is None:
                continue
            taken += 1
            log.warning("task_taken_over", task_id=task_id, tool=row.tool, body_started=bool(row.body))
            self.start(row, taken_over=True)
        return taken

    async def rerun_lost(self, table: TaskTable) -> int:
        """Run again, by the takeover rules, the tasks the table says this process runs but it
        does not (a run's end lost with the database's unflushed commits, or never written)."""
        running_before = set(self.runs)
        lost = await table.working_mine() - running_before - set(self.runs)
        for task_id in lost:
            row = await table.get(task_id)
            if row is not None and row.status == "working" and task_id not in self.runs:
                log.warning("task_run_lost", task_id=task_id, tool=row.tool, body_started=bool(row.body))
                self.start(row, taken_over=True)
        return len(lost)

    async def close(self) -> None:
        """Stop watching; runs still going (past the shutdown's grace) stay in the store."""
        self._closing = True
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        for task_id, run in list(self.runs.items()):
            self._stopped_here.add(task_id)
            run.cancel()
        if self.runs:
            await asyncio.wait(list(self.runs.values()), timeout=2.0)


class _EndOfRun:
    """How a run ends a task: written to the store, then told to the telemetry (if the write held)."""

    def __init__(
        self, row: TaskRow, started: float, clock: Callable[[], float], telemetry: TaskTelemetry | None
    ) -> None:
        self.row, self.started, self.clock, self.telemetry = row, started, clock, telemetry
        self.age_at_start = max(0.0, row.now - row.created_at)  # the database's clock: no skew

    async def write(
        self, table: TaskTable, status: TaskStatus, outcome: Any, *, flushed: bool = True
    ) -> None:
        """Retried while the store does not answer: unwritten, the task would read `working`
        until the watch loop ran it again (`TaskRunner.rerun_lost`)."""
        held: list[bool] = []

        async def finish() -> None:
            held.append(await table.finish(self.row.task_id, status, outcome, flushed=flushed))

        if await write_retried(finish, retry_s=END_RETRY_S) and held[-1]:
            self(status)

    def __call__(self, status: TaskStatus) -> None:
        if self.telemetry is not None:
            duration_s = self.age_at_start + self.clock() - self.started
            self.telemetry.task_ended(self.row.tool, status, duration_s)


def error_category(result: CallToolResult) -> str | None:
    if not result.is_error or not result.meta:
        return None
    error = result.meta.get("error")
    return error.get("category") if isinstance(error, dict) else None


def lost(row: TaskRow, category: str, why: str) -> dict[str, Any]:
    """The error of a task that cannot end as its body would have made it end."""
    return {
        "code": INTERNAL_ERROR,
        "message": f"{row.tool}: {why}",
        "data": {"category": category, "correlation_id": row.correlation_id},
    }


def _json(model: BaseModel) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _in_doubt_text(result: CallToolResult) -> str:
    texts = [part.text for part in result.content if isinstance(part, TextContent)]
    return texts[0] if texts else "the process running it died after its body began; it was not run again"
