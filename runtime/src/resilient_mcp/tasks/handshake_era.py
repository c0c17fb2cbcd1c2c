"""The 2025-11-25 tasks (core in that revision) on the same tasks table, for clients of that era.

What a 2025-11-25 session sees (other eras see none of it; 2026-07-28 keeps the extension):
- `initialize` declares `capabilities.tasks` (`list`, `cancel`, `requests.tools.call`), and
  `tools/list` a tool's `execution.taskSupport`.
- `tools/call` with `params.task` runs an `"optional"` or `"required"` tool as a task, checked
  and written as the extension writes one, answered `{"task": Task}` (the requested `ttl` is
  overridden by TASK_TTL_S, how long the store keeps a task). A `"forbidden"` tool asked for a
  task, and a `"required"` one called without, is -32601, as that revision says.
- `tasks/get`, `tasks/cancel` answer the Task; `tasks/list` the caller's, 50 a page;
  `tasks/result` waits for the end (polling the store, so on any replica) and answers what the
  call would have: its result with `_meta["io.modelcontextprotocol/related-task"]`, or its error.
  While the task waits for answers (`input_required`), `tasks/result` asks the client on its
  own stream (`elicitation/create` and the like, tagged with the task) and resumes the task.
  A tool result with `isError` shows as `failed`, as that revision defines it.

The SDK types these shapes but serves none; the core answers `tools/call` from middleware
(the SDK's 2025-11-25 result check admits only a `CallToolResult`) and registers the methods
with the low-level Server's public `add_request_handler`. In another era `tasks/result` and
`tasks/list` are -32601, and `tasks/get` and `tasks/cancel` stay the extension's.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import CallToolRequestParams, CreateMessageResult, ElicitResult, ListRootsResult
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, InputRequest, PaginatedRequestParams
from pydantic import ConfigDict, TypeAdapter, ValidationError

from resilient_mcp.calls.callers import key_caller
from resilient_mcp.store.task_table import TaskRow
from resilient_mcp.tasks import wire
from resilient_mcp.tasks.extension import CANCELLED_BY_CLIENT, TaskIdParams, checked_answers
from resilient_mcp.tasks.wire import TASKS_2025

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from resilient_mcp.tasks.extension import TasksExtension

RELATED_TASK = "io.modelcontextprotocol/related-task"
PAGE_SIZE = 50
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
_ASK = TypeAdapter(InputRequest, config=ConfigDict(defer_build=True))  # built at first use
_ANSWER_TYPES: dict[str, Any] = {
    "elicitation/create": ElicitResult,
    "sampling/createMessage": CreateMessageResult,
    "roots/list": ListRootsResult,
}
_CURSOR = re.compile(r"[0-9a-f]{32}")


class HandshakeEraTasks:
    """The 2025-11-25 task methods, served from the extension's parts (see the module docstring)."""

    def __init__(self, extension: TasksExtension) -> None:
        self.extension = extension

    def serve_on(self, lowlevel: Server[Any]) -> None:
        """Register the four methods; `tasks/get` and `tasks/cancel` replace the extension's
        handlers with ones that hand other eras back to it."""
        lowlevel.add_request_handler("tasks/get", TaskIdParams, self.get)
        lowlevel.add_request_handler("tasks/cancel", TaskIdParams, self.cancel)
        lowlevel.add_request_handler("tasks/result", TaskIdParams, self.result)
        lowlevel.add_request_handler("tasks/list", PaginatedRequestParams, self.list)

    # --- initialize, tools/list, tools/call (server middleware) ------------------------

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.protocol_version == TASKS_2025:
            return await self._tool_call(ctx, call_next)
        answer = await call_next(ctx)
        if not isinstance(answer, dict):
            return answer
        if ctx.method == "initialize" and answer.get("protocolVersion") == TASKS_2025:
            answer.setdefault("capabilities", {})["tasks"] = CAPABILITY
        elif ctx.method == "tools/list" and ctx.protocol_version == TASKS_2025:
            served = self.extension.tool_calls.served
            for listed in answer.get("tools", []):
                spec = served[listed["name"]].spec if listed.get("name") in served else None
                if spec is not None and spec.task_support != "forbidden":
                    listed["execution"] = {"taskSupport": spec.task_support}
        return answer

    async def _tool_call(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        raw = ctx.params if isinstance(ctx.params, dict) else {}
        served = self.extension.tool_calls.served.get(str(raw.get("name")))
        if served is None:
            return await call_next(ctx)
        support, name = served.spec.task_support, served.spec.name
        if raw.get("task") is None:
            if support == "required":
                raise MCPError(code=METHOD_NOT_FOUND, message=f"{name} runs only as a task: send params.task")
            return await call_next(ctx)
        if support == "forbidden":
            raise MCPError(
                code=METHOD_NOT_FOUND, message=f"{name} does not run as a task: call it without params.task"
            )
        try:
            params = CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError:
            raise MCPError(code=INVALID_PARAMS, message="Invalid request parameters") from None
        made = await self.extension.create(served, params, ctx, questions_first=False)
        if not isinstance(made, TaskRow):  # refused: an ordinary tool result says why
            return made.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"task": self._task(made)}

    # --- tasks/get, tasks/cancel, tasks/result, tasks/list ------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        if ctx.protocol_version != TASKS_2025:
            return await self.extension.get(ctx, params)
        return self._task(await self._mine(params.task_id))

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        if ctx.protocol_version != TASKS_2025:
            return await self.extension.cancel(ctx, params)
        row = await self._mine(params.task_id)
        if not row.terminal:
            table = await self.extension.runner.table()
            row = await table.cancel(params.task_id, self._caller(), CANCELLED_BY_CLIENT) or row
            self.extension.runner.cancel_here(params.task_id)  # elsewhere, its process sees it soon
            if row.status == "cancelled":
                return self._task(row)
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"task {params.task_id!r} already ended ({self._status(row)}): nothing to cancel",
        )

    async def result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        """Wait for the task's end (asking the client what it waits for), then answer as the call."""
        self._only_2025(ctx)
        poll_s = self.extension.core_settings.task_poll_interval_ms / 1000
        row = await self._mine(params.task_id)
        while not row.terminal:
            if row.status == "input_required":
                await self._ask(ctx, row)
            await asyncio.sleep(poll_s)
            row = await self._mine(params.task_id)
        related = {RELATED_TASK: {"taskId": row.task_id}}
        outcome = row.decoded("outcome")
        if row.status == "completed" and isinstance(outcome, dict):
            return {**outcome, "_meta": {**(outcome.get("_meta") or {}), **related}}
        if row.status == "failed" and isinstance(outcome, dict):
            raise MCPError(
                code=outcome.get("code", -32603), message=outcome.get("message", ""), data=outcome.get("data")
            )
        raise MCPError(code=INVALID_PARAMS, message=f"task {row.task_id!r} was cancelled: it has no result")

    async def list(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> HandlerResult:
        self._only_2025(ctx)
        after = params.cursor or ""
        if after and not _CURSOR.fullmatch(after):
            raise MCPError(
                code=INVALID_PARAMS, message="invalid cursor: send the nextCursor of the last page"
            )
        table = await self.extension.runner.table()
        rows = await table.page(self._caller(), after=after, limit=PAGE_SIZE + 1)
        page: dict[str, Any] = {"tasks": [self._task(row) for row in rows[:PAGE_SIZE]]}
        if len(rows) > PAGE_SIZE:
            page["nextCursor"] = rows[PAGE_SIZE - 1].task_id
        return page

    async def _ask(self, ctx: ServerRequestContext[Any, Any], row: TaskRow) -> None:
        """Send each pending request to the client on this request's stream; the answers resume the task."""
        answers: dict[str, Any] = {}
        on_this_stream = ServerMessageMetadata(related_request_id=ctx.request_id)
        for key, stored in (row.decoded("input_requests") or {}).items():
            params = {**(stored.get("params") or {})}
            params["_meta"] = {**(params.get("_meta") or {}), RELATED_TASK: {"taskId": row.task_id}}
            asked = _ASK.validate_python({**stored, "params": params})
            answer = await ctx.session.send_request(
                asked, _ANSWER_TYPES[asked.method], metadata=on_this_stream
            )
            answers[key] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        table = await self.extension.runner.table()
        resumed = await table.answer(row.task_id, self._caller(), checked_answers(answers))
        if resumed is not None and resumed.status == "working" and resumed.owner == table.owner:
            self.extension.runner.start(resumed)

    # --- shapes -------------------------------------------------------------------

    def _task(self, row: TaskRow) -> dict[str, Any]:
        """The 2025-11-25 `Task`."""
        settings = self.extension.core_settings
        task: dict[str, Any] = {
            "taskId": row.task_id,
            "status": self._status(row),
            "createdAt": wire.iso(row.created_at),
            "lastUpdatedAt": wire.iso(row.updated_at),
            "ttl": self.extension.ttl_ms(),
            "pollInterval": settings.task_poll_interval_ms,
        }
        outcome = row.decoded("outcome") if row.status == "failed" else None
        message = outcome.get("message") if isinstance(outcome, dict) else row.status_message
        if message:
            task["statusMessage"] = message
        return task

    @staticmethod
    def _status(row: TaskRow) -> str:
        """That revision counts a tool result with `isError` as `failed`."""
        if row.status == "completed":
            outcome = row.decoded("outcome")
            if isinstance(outcome, dict) and outcome.get("isError"):
                return "failed"
        return row.status

    async def _mine(self, task_id: str) -> TaskRow:
        row = await (await self.extension.runner.table()).get(task_id, caller=self._caller())
        if row is None:
            raise wire.unknown_task(task_id)
        return row

    def _caller(self) -> str:
        return key_caller(authenticated=self.extension.tool_calls.sdk_settings.auth is not None)

    @staticmethod
    def _only_2025(ctx: ServerRequestContext[Any, Any]) -> None:
        if ctx.protocol_version != TASKS_2025:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
