"""The tasks extension as the SDK serves it: advertised, negotiated, and its three methods.

- `tools/call` of a tool with `task_support` (`intercept_tool_call`): from a client that
  declared the extension, for its session or in this request's `_meta`, the call is checked
  as a call is (the server stopping, scopes, the caller's rate limit, strict validation), its
  `Resolve` questions asked first as a plain `InputRequiredResult`, then the task is written
  durably and only then answered as `CreateTaskResult`; the body runs in the background
  (`runner`). Without the extension an `"optional"` tool is an ordinary call and a
  `"required"` one is -32021.
- `tasks/get`, `tasks/update`, `tasks/cancel`: the caller's task only; any other id, whether
  it exists or not, gets the same -32602. Each needs the extension declared (-32021). A
  `Mcp-Name` header, when sent, must name the task (-32020, as for a tool's name).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.resolve import resolve_arguments
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp.types import CallToolRequestParams, CallToolResult, InputRequiredResult
from mcp_types import HEADER_MISMATCH, INVALID_PARAMS, InputResponse, RequestParams
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from resilient_mcp.authoring.errors import StoreUnavailableError
from resilient_mcp.authoring.outcomes import Failure
from resilient_mcp.calls.callers import caller, forbidden_message, key_caller, missing_scopes
from resilient_mcp.calls.idempotent_call import FREED
from resilient_mcp.calls.resilience import classify
from resilient_mcp.calls.served_tool import ServedTool
from resilient_mcp.store import KEY_ARGUMENT, fingerprint
from resilient_mcp.store.task_table import NewTask, TaskRow
from resilient_mcp.tasks import wire
from resilient_mcp.tasks.wire import TASKS_2025
from resilient_mcp.telemetry.call_context import new_correlation_id
from resilient_mcp.telemetry.call_line import write_call_line
from resilient_mcp.telemetry.logs import get_logger

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from resilient_mcp.authoring.settings import CoreSettings
    from resilient_mcp.calls.tool_call import ToolCalls
    from resilient_mcp.tasks.runner import TaskRunner

log = get_logger(__name__)
CANCELLED_BY_CLIENT = "cancelled by the client"
_ANSWER = TypeAdapter(InputResponse, config=ConfigDict(defer_build=True))  # built at first use


class TaskIdParams(RequestParams):
    model_config = ConfigDict(defer_build=True)  # built at its first request, not at start-up

    task_id: str = Field(min_length=1, max_length=1000)


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


class TasksExtension(Extension):
    """SEP-2663 on the store's tasks table; `bind` hands it the server's parts once they exist."""

    identifier = wire.EXTENSION

    def __init__(self) -> None:
        self._tool_calls: ToolCalls | None = None
        self._runner: TaskRunner | None = None
        self._preflight_context: Any = None

    def bind(self, tool_calls: ToolCalls, runner: TaskRunner, preflight_context: Any) -> None:
        """`preflight_context(ctx, params)`: the SDK's Context of this request, for `Resolve` questions."""
        self._tool_calls, self._runner, self._preflight_context = tool_calls, runner, preflight_context

    @property
    def tool_calls(self) -> ToolCalls:
        assert self._tool_calls is not None, "TasksExtension.bind was not called"
        return self._tool_calls

    @property
    def runner(self) -> TaskRunner:
        assert self._runner is not None, "TasksExtension.bind was not called"
        return self._runner

    @property
    def core_settings(self) -> CoreSettings:
        return self.tool_calls.settings

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/update", UpdateTaskParams, self.update),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
        )

    # --- tools/call -------------------------------------------------------------

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        served = self.tool_calls.served.get(params.name)
        if served is None or served.spec.task_support == "forbidden" or ctx.protocol_version == TASKS_2025:
            return await call_next(ctx)  # 2025-11-25 tasks are the core's (handshake_era), asked with `task`
        if not declared(ctx, params.meta):
            if served.spec.task_support == "required":
                raise wire.extension_required(f"{params.name} runs only as a task: it")
            return await call_next(ctx)
        made = await self.create(served, params, ctx)
        if not isinstance(made, TaskRow):
            return made
        return wire.created(
            made, ttl_ms=self.ttl_ms(), poll_interval_ms=self.core_settings.task_poll_interval_ms
        )

    async def create(
        self,
        served: ServedTool,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        *,
        questions_first: bool = True,
    ) -> TaskRow | CallToolResult | InputRequiredResult:
        """Checked as a call, its questions asked first (unless told not to), then written: the
        task once written, else the refusal or the questions to answer with no task made."""
        started = time.perf_counter()
        spec, tool_calls, settings = served.spec, self.tool_calls, self.core_settings
        correlation_id = new_correlation_id()
        authenticated = tool_calls.sdk_settings.auth is not None
        subject = caller() if authenticated else None

        def refused(failure: Failure) -> CallToolResult:
            write_call_line(started, spec.name, correlation_id, "error", failure.category, 0, subject)
            tool_calls.stats.errors[failure.category] += 1
            return failure.result(correlation_id)

        if tool_calls.shutdown.stopping:
            return refused(Failure.refusal("transient", _STOPPING, retry_after_s=2.0))
        if tool_calls.scopes_enforced and spec.scopes:
            missing = missing_scopes(spec.scopes)
            if missing:
                return refused(Failure.refusal("forbidden", forbidden_message(spec.name, missing)))
        over = tool_calls.limits.enter(spec, subject)  # a task's creation counts in the caller's rate limit
        if over is not None:
            return refused(Failure.refusal("rate_limited", over.message, retry_after_s=over.retry_after_s))
        tool_calls.limits.leave(spec)  # its run is not a call in flight: only the rate counts
        arguments = params.arguments or {}
        problem, validated = served.validator.check(arguments)
        if problem is not None:
            return refused(Failure.refusal("invalid_input", problem))
        assert validated is not None
        if questions_first and served.tool.resolved_params:  # before any work: asked with no task
            try:
                asked = await self._questions_first(served, arguments, params, ctx)
            except MCPError:
                raise  # e.g. a client that cannot be asked: -32021, as for a call
            except Exception as exc:  # a declined answer, a resolver that failed: as a call's failure
                return refused(classify(exc, spec.name, correlation_id))
            if asked is not None:
                return asked
        canonical = validated.model_dump(mode="json", by_alias=True)  # fingerprinted as a call's claim is
        capabilities = ctx.session.client_capabilities
        task = NewTask(
            caller=key_caller(authenticated=authenticated),
            tool=spec.name,
            idempotency_key=canonical.get(KEY_ARGUMENT) if spec.side_effect else None,
            fingerprint=fingerprint(canonical),
            arguments=arguments,
            answers=_dumped(params.input_responses),
            request_state=params.request_state,
            capabilities=_capabilities(capabilities, params.meta),
            correlation_id=correlation_id,
        )
        try:
            table = await self.runner.table()
            made = await table.create(task, max_open=settings.max_tasks_per_caller)
            if made.row is not None and made.existing and nothing_happened(made.row):
                # The key's task ended having done nothing (its key was freed, as a call's is):
                # the retry is a new task, not that answer again.
                await table.forget(made.row.task_id)
                made = await table.create(task, max_open=settings.max_tasks_per_caller)
        except StoreUnavailableError:
            return refused(Failure.refusal("transient", _STORE_DOWN, retry_after_s=5.0))
        if made.row is None:
            return refused(Failure.refusal("rate_limited", self._too_many(), retry_after_s=_TOO_MANY_RETRY_S))
        row = made.row
        if made.existing and row.fingerprint != task.fingerprint:
            key = task.idempotency_key
            return refused(Failure.refusal("conflict", _other_arguments(spec.name, key)))
        if not made.existing:
            self.runner.start(row)
        write_call_line(started, spec.name, correlation_id, "task", None, 0, subject)
        log.info(
            "task_created",
            task_id=row.task_id,
            tool=spec.name,
            correlation_id=correlation_id,
            existing=made.existing,
        )
        return row

    async def _questions_first(
        self,
        served: ServedTool,
        arguments: dict[str, Any],
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
    ) -> InputRequiredResult | None:
        """The tool's `Resolve` questions still unanswered, as a plain answer; None when all are."""
        tool = served.tool
        context: Context[Any, Any] = self._preflight_context(ctx, params)
        resolved = await resolve_arguments(
            tool.resolved_params, tool.resolver_plans, tool.fn_metadata.validate_arguments(arguments), context
        )
        return resolved if isinstance(resolved, InputRequiredResult) else None

    def _too_many(self) -> str:
        most = self.core_settings.max_tasks_per_caller
        return (
            f"you already have {most} unfinished tasks, the most this server keeps per caller; "
            f"nothing was started. Wait for one to finish (tasks/get) or cancel one, then retry"
        )

    def ttl_ms(self) -> int:
        return int(self.core_settings.task_ttl_s * 1000)

    # --- tasks/get, tasks/update, tasks/cancel ------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        self._admit(ctx, params, "tasks/get")
        row = await (await self.runner.table()).get(params.task_id, caller=self._caller())
        if row is None:
            raise wire.unknown_task(params.task_id)
        return wire.detailed(
            row, ttl_ms=self.ttl_ms(), poll_interval_ms=self.core_settings.task_poll_interval_ms
        )

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> HandlerResult:
        self._admit(ctx, params, "tasks/update")
        table = await self.runner.table()
        who = self._caller()
        row = await table.get(params.task_id, caller=who)
        if row is None:
            raise wire.unknown_task(params.task_id)
        pending = row.decoded("input_requests") or {}
        answers = checked_answers({k: v for k, v in params.input_responses.items() if k in pending})
        row = await table.answer(params.task_id, who, answers) if answers else row
        if row is None:
            raise wire.unknown_task(params.task_id)
        if row.status == "working" and row.owner == table.owner and answers:
            self.runner.start(row)  # every question answered: the body runs again, here
        return dict(wire.ACK)

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        self._admit(ctx, params, "tasks/cancel")
        row = await (await self.runner.table()).cancel(params.task_id, self._caller(), CANCELLED_BY_CLIENT)
        if row is None:
            raise wire.unknown_task(params.task_id)
        self.runner.cancel_here(params.task_id)  # elsewhere, its process sees it within a second
        return dict(wire.ACK)

    def _admit(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams, method: str) -> None:
        if not declared(ctx, params.meta):
            raise wire.extension_required(method)
        headers = getattr(ctx.request, "headers", None)
        named = headers.get(MCP_NAME_HEADER) if headers is not None else None
        if named is not None and (decode_header_value(named) or "").strip() != params.task_id:
            raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")

    def _caller(self) -> str:
        return key_caller(authenticated=self.tool_calls.sdk_settings.auth is not None)


def nothing_happened(row: TaskRow) -> bool:
    """A finished task whose tool failed before any effect (its key freed: bad input, transient)."""
    outcome = row.decoded("outcome") if row.status == "completed" else None
    if not isinstance(outcome, dict) or not outcome.get("isError"):
        return False
    error = (outcome.get("_meta") or {}).get("error") or {}
    return error.get("category") in FREED


def declared(ctx: ServerRequestContext[Any, Any], meta: Mapping[str, Any] | None) -> bool:
    """Whether the client declared the extension: for its session, or in this request's `_meta`."""
    capabilities = ctx.session.client_capabilities
    if capabilities is not None and capabilities.extensions and wire.EXTENSION in capabilities.extensions:
        return True
    extensions = _request_extensions(meta)
    return extensions is not None and wire.EXTENSION in extensions


def _request_extensions(meta: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    declared_here = (meta or {}).get(wire.REQUEST_CAPABILITIES)
    extensions = declared_here.get("extensions") if isinstance(declared_here, Mapping) else None
    return extensions if isinstance(extensions, Mapping) else None


def _capabilities(capabilities: BaseModel | None, meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the client declared, kept with the task: its body's `Resolve` reads it on any replica."""
    kept: dict[str, Any] = (
        {} if capabilities is None else capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    declared_here = (meta or {}).get(wire.REQUEST_CAPABILITIES)
    if isinstance(declared_here, Mapping):
        kept.update(declared_here)
    return kept


def _dumped(responses: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not responses:
        return None
    return {
        key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(value, BaseModel)
        else value
        for key, value in responses.items()
    }


def checked_answers(responses: Mapping[str, Any]) -> dict[str, Any]:
    """Answers to pending requests as the body will read them; a malformed one is -32602, and
    nothing of the update is kept. Answers to no pending request are ignored."""
    checked: dict[str, Any] = {}
    for key, value in responses.items():
        try:
            answer = _ANSWER.validate_python(value)
        except ValidationError:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"inputResponses[{key!r}] is not an answer to the request it names "
                "(an elicitation, sampling or roots result); nothing was kept",
            ) from None
        checked[key] = _ANSWER.dump_python(answer, mode="json", by_alias=True, exclude_none=True)
    return checked


def _other_arguments(tool: str, key: str | None) -> str:
    return (
        f"idempotency key {key!r} was already used for a task of {tool} with other arguments; nothing "
        "was started. Use a new key for a new operation, or resend the original arguments to get its task"
    )


_STOPPING = (
    "the server is stopping and takes no new tasks; nothing was started. Retry in 2 s, when a "
    "restarted server or another replica answers"
)
_STORE_DOWN = "the task could not be written (the store does not answer); nothing was started. Retry in 5 s"
_TOO_MANY_RETRY_S = 10.0
