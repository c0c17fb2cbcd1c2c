"""One tools/call, top to bottom: every stage from the SDK's `call_tool` to the answer.

`ResilientServer.call_tool` hands each call to `ToolCalls.answer`, which runs, in order:

1. the call's context: correlation id, caller, in flight, the `Call` context variable, and
   heartbeat progress when the call carries a progressToken (`_progress.heartbeat`);
2. the refusals that cost nothing: stopping, an unknown tool, missing scopes, then the
   limits (`calls.rate_limits`);
3. strict validation (`calls.validation`);
4. a side-effecting tool's claim (`_idempotent_call.claim_key`): a known key is answered
   without running anything;
5. the run: one time limit for every attempt (`calls.time_limit`), transient failures of safe
   tools retried (`_resilience.run_with_retries`), each attempt `ServedTool.attempt`
   (`calls.served_tool`: the body through `calls.entrypoints`, `convert_result`, `fit_result`);
6. a side-effecting tool's record (`HeldKey.record`): the outcome stored for every retry;
7. the answer: the call line (`telemetry.call_line`), telemetry, and for a failure its isError result
   (`Failure.result`).

Each stage is handed what it needs; none calls back into the server or into this module.

It runs on every call, so it does each thing once: one validation (the tool is then called
with the validated arguments, the SDK does not validate them again), one time limit around
all attempts (on a timer all calls share), one context variable for the call, and one log
line rendered without the processor chain. A call without a progressToken is awaited
directly (no heartbeat task), and a small result is not measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult

from resilient_mcp.authoring.outcomes import Attempts, Failure, shown_protocol_error
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.callers import caller, forbidden_message, key_caller, missing_scopes
from resilient_mcp.calls.idempotent_call import HeldKey, claim_key
from resilient_mcp.calls.progress import heartbeat, oversized_progress_token, progress_requested
from resilient_mcp.calls.rate_limits import CallLimits
from resilient_mcp.calls.resilience import classify, in_doubt_message, run_with_retries
from resilient_mcp.calls.running import current_body, is_own_cancellation, reset_body, set_body
from resilient_mcp.calls.served_tool import ServedTool
from resilient_mcp.calls.shutdown import Shutdown
from resilient_mcp.calls.stats import CallStats
from resilient_mcp.calls.time_limit import TimeLimits, time_limits
from resilient_mcp.calls.validation import unknown_tool_message
from resilient_mcp.records import record
from resilient_mcp.store import KEY_ARGUMENT, StoreHandle, fingerprint
from resilient_mcp.telemetry.call_context import Call, enter_call, leave_call, new_correlation_id
from resilient_mcp.telemetry.call_line import write_call_line
from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.redaction import redact_text
from resilient_mcp.telemetry.text import clip

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.server import Settings
    from pydantic import BaseModel

    from resilient_mcp.calls.fatal_exit import FatalExit

    # What each attempt is called with: the arguments as sent and as validated, the Context, the size limit.
    AttemptArgs = tuple[dict[str, Any], BaseModel, Context[Any, Any] | None, int]

log = get_logger(__name__)
LEASE_MARGIN_S = 30.0  # a claim outlives the call's time limit by this much before it is in doubt
_NAME_IN_LOG = 100  # a client may send any name; the log keeps this much of it
STOPPING_RETRY_AFTER_S = 2.0  # what a call refused or cut by the shutdown is told to wait
STOPPED_BEFORE_THE_END = "the server stopped before the task's run finished"


@record
class TaskRun:
    """A call run as a durable task's body: whose it is (the task's caller, for its idempotency
    key), with no per-call limit (the task's creation met them) and its own time limit (the
    tool's `timeout_s`, else TASK_TTL_S)."""

    caller: str


class CutAtShutdown(Exception):
    """A task's run was cut by the shutdown: nothing is recorded, the task stays for another process."""


class CallTelemetry(Protocol):
    """What a call tells the telemetry (`_telemetry.Telemetry`), when it is configured."""

    def tool_call(self, served: ServedTool | None, correlation_id: str, outcome: Attempts | None) -> None: ...


class ToolCalls:
    """What one server's tool calls are served with; `answer` is one call, top to bottom.

    `telemetry`, `fatal_exit` and `scopes_enforced` are set when a transport is served.
    """

    def __init__(
        self,
        served: Mapping[str, ServedTool],
        *,
        settings: CoreSettings,
        sdk_settings: Settings[Any],
        stats: CallStats,
        store: StoreHandle,
        limits: CallLimits,
        shutdown: Shutdown,
        new_context: Callable[[], Context[Any, Any]],
    ) -> None:
        self.served = served
        self.settings = settings
        self.sdk_settings = sdk_settings  # its `auth` is set when HTTP is served with auth
        self.stats = stats
        self.store = store
        self.limits = limits
        self.shutdown = shutdown
        self.new_context = new_context  # the SDK's Context, for a call made outside a request
        self.telemetry: CallTelemetry | None = None
        self.fatal_exit: FatalExit | None = None
        self.scopes_enforced = False  # a tool's `scopes` apply with AUTH=oauth over HTTP
        self._time_limits: TimeLimits | None = None  # the serving loop's, made on the first call

    async def answer(
        self,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None,
        *,
        task: TaskRun | None = None,
    ) -> CallToolResult | InputRequiredResult:
        """One tools/call: its context, then its outcome, then its line and its answer.

        `task`: the call is a durable task's run (`tasks.runner`), not a client's request.
        Raises `CutAtShutdown` for a task run the shutdown cut: the task stays in the store."""
        started = time.perf_counter()
        served = self.served.get(name)
        # A declared name is the owner's; any other came from the client and may hold anything.
        tool = name if served is not None else redact_text(clip(name, _NAME_IN_LOG, mark=""))
        call = Call(new_correlation_id(), tool)
        correlation_id = call.correlation_id
        # Without auth (stdio, AUTH=none) no request carries a token: no subject to look up.
        subject = caller() if self.sdk_settings.auth is not None else None
        stats = self.stats
        stats.in_flight += 1
        token = enter_call(call)
        this_call = asyncio.current_task()
        running = self.shutdown.calls
        if this_call is not None:
            running.add(this_call)
        try:
            if task is None and context is not None and progress_requested(context):
                too_long = oversized_progress_token(context)
                if too_long is not None:  # every heartbeat would echo it: refused before anything runs
                    outcome = Attempts(failure=Failure.refusal("invalid_input", too_long))
                else:
                    async with heartbeat(context, self.settings.progress_interval_s) as tracked:
                        outcome = await self._outcome(
                            served, name, arguments, tracked, correlation_id, subject
                        )
            else:  # the common case: no heartbeat task
                outcome = await self._outcome(served, name, arguments, context, correlation_id, subject, task)
        except MCPError as exc:  # raised on purpose: the client gets that JSON-RPC error, in both eras
            shown_protocol_error(exc)
            write_call_line(started, tool, correlation_id, "protocol_error", None, 1, subject)
            if self.telemetry is not None:
                self.telemetry.tool_call(served, correlation_id, None)
            error = exc.error
            log.info(
                "tool_protocol_error",
                tool=tool,
                correlation_id=correlation_id,
                code=error.code,
                message=error.message,
            )
            raise
        except CutAtShutdown:
            write_call_line(started, tool, correlation_id, "error", "transient", 1, subject)
            raise
        except BaseException as exc:  # a bug in this layer or a store: still an answer, never a leak
            if not is_own_cancellation(exc):
                outcome = Attempts(failure=classify(exc, name, correlation_id))
            elif self.shutdown.caused(exc):
                outcome = Attempts(failure=_cut_at_shutdown(None))
            else:
                raise
        finally:
            running.discard(this_call)
            leave_call(token)
            stats.in_flight -= 1
            stats.calls += 1
        return self._answered(outcome, started, tool, correlation_id, subject, served, context)

    async def _outcome(
        self,
        served: ServedTool | None,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None,
        correlation_id: str,
        subject: str | None,
        task: TaskRun | None = None,
    ) -> Attempts:
        """Refused; or validated, claimed (a side effect), run and recorded (a side effect).

        A task's run meets no limit and no shutdown refusal: its creation met them."""
        shutdown = self.shutdown
        refused = _refusal(
            served,
            name,
            self.served,
            stopping=shutdown.stopping and task is None,
            scopes=self.scopes_enforced and task is None,
        )
        if refused is not None:
            return Attempts(failure=refused)
        assert served is not None
        spec = served.spec
        # Unknown and forbidden answers are final, so they come first; a limit's refusal comes
        # before validation and the idempotency table: it costs little, and a retry is safe.
        over = self.limits.enter(spec, subject) if task is None else None
        if over is not None:
            limited = Failure.refusal("rate_limited", over.message, retry_after_s=over.retry_after_s)
            return Attempts(failure=limited)
        try:
            problem, validated = served.validator.check(arguments)
            if problem is not None:
                return Attempts(failure=Failure.refusal("invalid_input", problem))
            assert validated is not None
            settings = self.settings
            if context is None and served.takes_context:  # called outside a request (a test)
                context = self.new_context()
            max_bytes = spec.max_result_bytes or settings.max_result_bytes
            attempt: AttemptArgs = (arguments, validated, context, max_bytes)
            timeout_s = spec.timeout_s or (settings.tool_timeout_s if task is None else settings.task_ttl_s)
            limits = self._time_limits = time_limits(self._time_limits)
            if not spec.side_effect:
                return await _run(
                    served, attempt, correlation_id, timeout_s, limits, shutdown, settings, task
                )
            canonical = validated.model_dump(mode="json", by_alias=True)
            held = await claim_key(
                await self.store.get(),
                caller=task.caller if task else key_caller(authenticated=self.sdk_settings.auth is not None),
                tool=name,
                key=canonical[KEY_ARGUMENT],
                fingerprint=fingerprint(canonical),
                lease_s=timeout_s + LEASE_MARGIN_S,
                correlation_id=correlation_id,
                reconcile=spec.reconcile,
                start_with_claim=served.start_with_claim,
            )
            if not isinstance(held, HeldKey):
                return held  # answered without running: a replay, a conflict, a key in doubt
            token = set_body(held.body)  # the entrypoint marks the body's start in the key's row
            try:
                outcome = await _run(
                    served, attempt, correlation_id, timeout_s, limits, shutdown, settings, task
                )
            except anyio.get_cancelled_exc_class():
                await held.interrupted("the call was cancelled")
                raise
            except MCPError:  # e.g. the client cannot answer a question the tool must ask first
                await held.interrupted("a protocol error during the call")
                raise
            except CutAtShutdown:
                await held.interrupted(STOPPED_BEFORE_THE_END)
                raise
            finally:
                reset_body(token)
            return await held.record(outcome, correlation_id)
        finally:
            if task is None:
                self.limits.leave(spec)

    def _answered(
        self,
        outcome: Attempts,
        started: float,
        tool: str,
        correlation_id: str,
        subject: str | None,
        served: ServedTool | None,
        context: Context[Any, Any] | None,
    ) -> CallToolResult | InputRequiredResult:
        """The call's line and telemetry; its result, or the isError answer the model reads."""
        failure = outcome.failure
        write_call_line(
            started,
            tool,
            correlation_id,
            "error" if failure else "replayed" if outcome.replayed else "ok",
            failure.category if failure else None,
            outcome.count,
            subject,
        )
        if self.telemetry is not None:
            self.telemetry.tool_call(served, correlation_id, outcome)
        if failure is None:
            assert outcome.result is not None
            return outcome.result
        self.stats.errors[failure.category] += 1
        if failure.category in ("internal", "fatal"):
            log.error("tool_failed", tool=tool, correlation_id=correlation_id, exc_info=failure.error)
        if failure.category == "fatal" and self.fatal_exit is not None:
            self.fatal_exit.arm(context.request_id if context is not None else None)
        return failure.result(correlation_id)


def _refusal(
    served: ServedTool | None, name: str, declared: Mapping[str, ServedTool], *, stopping: bool, scopes: bool
) -> Failure | None:
    """A final answer that takes no share of a limit: the server stopping, an unknown tool, missing scopes."""
    if stopping:
        return Failure.refusal(
            "transient",
            f"the server is stopping and takes no new calls; nothing was run. Retry in "
            f"{STOPPING_RETRY_AFTER_S:g} s, when a restarted server or another replica answers",
            retry_after_s=STOPPING_RETRY_AFTER_S,
        )
    if served is None:
        return Failure.refusal("unknown_tool", unknown_tool_message(name, declared))
    spec = served.spec
    if spec.scopes and scopes:
        missing = missing_scopes(spec.scopes)
        if missing:
            return Failure.refusal("forbidden", forbidden_message(name, missing))
    return None


async def _run(
    served: ServedTool,
    attempt: AttemptArgs,
    correlation_id: str,
    timeout_s: float,
    limits: TimeLimits,
    shutdown: Shutdown,
    settings: CoreSettings,
    task: TaskRun | None = None,
) -> Attempts:
    """Every attempt at the call, all inside the one time limit.

    The limit cancels the task as `asyncio.timeout` would (a sync body's thread is
    abandoned alike), from a timer all calls share (`calls.time_limit`); the server only
    runs on asyncio.
    """
    outcome = Attempts()  # filled in place: a call stopped at its limit still counts its attempts
    spec = served.spec
    deadline = limits.start(timeout_s)
    try:
        await run_with_retries(
            served.attempt,
            attempt,
            outcome,
            tool_name=spec.name,
            correlation_id=correlation_id,
            side_effect=spec.side_effect,
            may_retry=served.may_retry,
            max_attempts=settings.retry_max_attempts,
            max_total_s=settings.retry_max_s,
        )
    except asyncio.CancelledError as exc:
        if deadline.caused(exc):
            outcome.failure = _past_time_limit(spec, timeout_s)
        elif shutdown.caused(exc):
            if task is not None:  # left in the store, for the next process to take over
                raise CutAtShutdown from None
            outcome.failure = _cut_at_shutdown(spec)
        else:
            raise  # the client's cancellation
    finally:
        limits.stop(deadline)
    return outcome


def _past_time_limit(spec: ToolSpec, timeout_s: float) -> Failure:
    """A call stopped at its time limit: worth retrying, unless its side effect may have begun
    (a side-effecting call whose body never began is `transient`: its key was released)."""
    body = current_body()
    if spec.side_effect and body is not None and body.started:
        still = ", and may still be running" if body.still_running else ""
        what = f"it ran past its time limit of {timeout_s:g} s{still}"
        return Failure.refusal("in_doubt", in_doubt_message(spec.name, what))
    if spec.side_effect:  # cut while it waited (for a worker thread): the key is free again
        return Failure.refusal(
            "transient",
            f"{spec.name} was stopped at its time limit of {timeout_s:g} s before its body began "
            "(the server was busy); nothing was run. Retry later with the same idempotency key",
        )
    return Failure.refusal(
        "timeout",
        f"{spec.name} did not finish within {timeout_s:g} s and was stopped; retry later, "
        "or with less work if the tool allows it",
    )


def _cut_at_shutdown(spec: ToolSpec | None) -> Failure:
    """A call still running when the shutdown's grace ran out: in doubt if its effect may have begun."""
    body = current_body()
    if spec is not None and spec.side_effect and body is not None and body.started:
        still = ", and may still be running" if body.still_running else ""
        what = f"the server stopped before it finished{still}"
        return Failure.refusal("in_doubt", in_doubt_message(spec.name, what))
    began = "its body began; nothing was run" if spec is not None and spec.side_effect else "it finished"
    return Failure.refusal(
        "transient",
        f"the server is stopping and cut this call before {began}; "
        f"retry in {STOPPING_RETRY_AFTER_S:g} s, when a restarted server or another replica answers",
        retry_after_s=STOPPING_RETRY_AFTER_S,
    )
