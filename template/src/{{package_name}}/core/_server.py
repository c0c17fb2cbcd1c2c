# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`ResilientServer`: the SDK's MCPServer with one seam that sees every tool call.

Resources, prompts and completions pass through `_primitive_calls` from the public
`read_resource` and `get_prompt` overrides; the 2025-11-25 methods MCPServer leaves
unserved (`logging/setLevel`, `resources/subscribe`) come from `_handshake_era`.

`call_tool` is the verified seam: it receives the tool's own exception (as the
`__cause__` of the SDK's ToolError), so here each call is validated, bounded in
time, retried when safe, classified, counted and logged in one line.

It runs on every call, so it does each thing once: one validation (the tool is then
called with the validated arguments, the SDK does not validate them again), one time
limit around all attempts (on a timer all calls share), one context variable for the
call, and one log line rendered without the processor chain. A call without a
progressToken is awaited directly (no heartbeat task), and a small result is not measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.abc
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ToolError,
    UnexpectedResourceError,
    UnexpectedToolError,
)
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    SetLevelRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, TypeAdapter

from ._call_line import time_tool_calls, write_call_line
from ._callers import caller, forbidden_message, missing_scopes
from ._discovery import Primitives
from ._entrypoints import entrypoint
from ._errors import FatalError, TransientError
from ._fatal_exit import FatalExit
from ._handshake_era import HandshakeEraMethods
from ._health import CallStats, HealthCheck
from ._idempotency import KEY_ARGUMENT, StoreHandle, fingerprint
from ._idempotent_call import run_once
from ._logs import get_logger
from ._primitive_calls import answered, prompt_arguments, register
from ._progress import progress_requested, with_heartbeat
from ._rate_limits import CallLimits
from ._redaction import redact_text
from ._resilience import Attempts, Failure, classify, in_doubt_message, run_with_retries
from ._resources import Resources
from ._result_size import fit_result
from ._running import Call, current_body, enter_call, is_own_cancellation, leave_call, new_correlation_id
from ._sdk import convert_to_content, lowlevel_server_of, output_adapter, subscriptions_of
from ._settings import CoreSettings
from ._shutdown import Shutdown
from ._startup import exit_fatal
from ._stdio_guard import ProtocolPipes
from ._stdio_transport import open_stdio
from ._telemetry import Telemetry, start_telemetry
from ._time_limit import TimeLimits, time_limits
from ._tool import ToolSpec
from ._validation import ArgumentValidator, harden_schema, unknown_tool_message, without_titles

log = get_logger(__name__)
LEASE_MARGIN_S = 30.0  # a claim outlives the call's time limit by this much before it is in doubt
_NAME_IN_LOG = 100  # a client may send any name; the log keeps this much of it
STOPPING_RETRY_AFTER_S = 2.0  # what a call refused or cut by the shutdown is told to wait


@dataclass(frozen=True)
class ServedTool:
    spec: ToolSpec
    validator: ArgumentValidator
    tool: Tool
    # Nothing comes between a side-effecting call's claim and its body (an async function
    # whose parameters the client is not asked for first): the claim records the start.
    start_with_claim: bool
    # The output model and its TypeAdapter, which FuncMetadata keeps as a pydantic private
    # attribute: reading one costs three `__getattr__` fallbacks on every call.
    _output: list[tuple[Any, TypeAdapter[Any]]] = field(default_factory=list, compare=False)

    def convert_result(self, value: Any) -> CallToolResult | InputRequiredResult:
        """What `FuncMetadata.convert_result` makes of a return value, its adapter looked up once."""
        metadata = self.tool.fn_metadata
        model = metadata.output_model
        if (
            model is None
            or metadata.output_schema is None
            or isinstance(value, CallToolResult | InputRequiredResult)
        ):
            return metadata.convert_result(value)
        if not self._output or self._output[0][0] is not model:  # rebuilt if the model is reassigned
            self._output[:] = [(model, output_adapter(metadata, model))]
        adapter = self._output[0][1]
        content = convert_to_content(value)
        validated = adapter.validate_python(
            {"result": value} if metadata.wrap_output else value, by_alias=True, by_name=True
        )
        if isinstance(validated, BaseModel):  # dumped via the instance: a subclass keeps its fields
            structured = validated.model_dump(mode="json", by_alias=True)
        else:
            structured = adapter.dump_python(validated, mode="json", by_alias=True)
        return CallToolResult(content=content, structured_content=structured)

    def may_retry(self, failure: Failure) -> bool:
        if failure.category != "transient":
            return False
        # A side-effecting tool's own TransientError promises nothing was applied.
        spec = self.spec
        return spec.safe_to_repeat or (spec.side_effect and isinstance(failure.error, TransientError))


def build_tool(spec: ToolSpec, *, strict: bool) -> tuple[Tool, ServedTool]:
    """The SDK Tool for a spec (schema hardened when strict) and what the seam needs to serve it.

    Advertised schemas lose pydantic's generated titles: they cost bytes on every tools/list.
    """
    tool = Tool.from_function(
        entrypoint(spec),
        name=spec.name,
        title=spec.title,
        description=spec.description,
        annotations=spec.annotations(),
    )
    tool.parameters = without_titles(tool.parameters)
    if strict:
        tool.parameters = harden_schema(tool.parameters)
    if spec.output_schema is not None:  # read live by tools/list (Tool.output_schema)
        tool.fn_metadata.output_schema = dict(spec.output_schema)
    elif tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = without_titles(tool.fn_metadata.output_schema)
    validator = ArgumentValidator(tool.parameters, tool.fn_metadata, strict=strict)
    start_with_claim = inspect.iscoroutinefunction(spec.fn) and not tool.resolved_params
    return tool, ServedTool(spec, validator, tool, start_with_claim)


def _past_time_limit(spec: ToolSpec, timeout_s: float) -> Failure:
    """A call stopped at its time limit: worth retrying, unless its side effect may have begun."""
    body = current_body()
    if spec.side_effect and body is not None and body.started:
        still = ", and may still be running" if body.still_running else ""
        what = f"it ran past its time limit of {timeout_s:g} s{still}"
        return Failure.refusal("in_doubt", in_doubt_message(spec.name, what))
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
    return Failure.refusal(
        "transient",
        "the server is stopping and cut this call before it finished; "
        f"retry in {STOPPING_RETRY_AFTER_S:g} s, when a restarted server or another replica answers",
        retry_after_s=STOPPING_RETRY_AFTER_S,
    )


class ResilientServer(MCPServer[Any]):
    """MCPServer whose every tool call ends in a result the model can act on."""

    def __init__(
        self,
        name: str,
        *,
        specs: list[ToolSpec],
        app_settings: CoreSettings,
        stats: CallStats,
        store: StoreHandle,
        strict: bool,
        resources: Resources | None = None,
        health_checks: Mapping[str, HealthCheck] | None = None,
        primitives: Primitives | None = None,
        **kwargs: Any,
    ) -> None:
        built = [build_tool(spec, strict=strict) for spec in specs]
        # The middleware times each call from the SDK's validation of it to its answer built.
        super().__init__(name, tools=[tool for tool, _ in built], middleware=[time_tool_calls], **kwargs)
        self.served = {served.spec.name: served for _, served in built}
        self.primitives = primitives or Primitives()
        self.strict = strict
        self.prompts = register(self, self.primitives)
        self._serve_handshake_era_methods()
        self.app_settings = app_settings
        self.stats = stats
        self.store = store
        self.resources = resources or Resources([], [])  # the owner's lifespans and dependency checks
        self.health_checks = dict(health_checks or {})  # what health_check reports; /readyz runs them
        self.fatal_exit: FatalExit | None = None  # armed only when serving a transport
        self.scopes_enforced = False  # a tool's `scopes` apply with AUTH=oauth over HTTP
        self._time_limits: TimeLimits | None = None  # the serving loop's, made on the first call
        self.shutdown = Shutdown(app_settings.shutdown_grace_s)
        self.limits = CallLimits(
            rate_limit=app_settings.rate_limit, max_concurrent_calls=app_settings.max_concurrent_calls
        )
        self.telemetry: Telemetry | None = None  # started when serving, if METRICS or OTEL_* ask for it

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        started = time.perf_counter()
        served = self.served.get(name)
        # A declared name is the owner's; any other came from the client and may hold anything.
        tool = name if served is not None else redact_text(name[:_NAME_IN_LOG])
        call = Call(new_correlation_id(), tool)
        correlation_id = call.correlation_id
        # Without auth (stdio, AUTH=none) no request carries a token: no subject to look up.
        subject = caller() if self.settings.auth is not None else None
        stats = self.stats
        stats.in_flight += 1
        token = enter_call(call)
        task = asyncio.current_task()
        running = self.shutdown.calls
        if task is not None:
            running.add(task)
        try:
            if context is not None and progress_requested(context):
                outcome = await with_heartbeat(
                    lambda ctx: self._call(served, name, arguments, ctx, correlation_id, subject),
                    context,
                    self.app_settings.progress_interval_s,
                )
            else:  # the common case: no heartbeat task, no closure
                outcome = await self._call(served, name, arguments, context, correlation_id, subject)
        except MCPError as exc:  # raised on purpose: the client gets that JSON-RPC error, in both eras
            write_call_line(started, tool, correlation_id, "protocol_error", None, 1, subject)
            if self.telemetry is not None:
                self.telemetry.tool_call(served, correlation_id, None)
            log.info("tool_protocol_error", tool=tool, correlation_id=correlation_id, code=exc.error.code)
            raise
        except BaseException as exc:  # a bug in this layer or a store: still an answer, never a leak
            if not is_own_cancellation(exc):
                outcome = Attempts(failure=classify(exc, name, correlation_id))
            elif self.shutdown.caused(exc):
                outcome = Attempts(failure=_cut_at_shutdown(None))
            else:
                raise
        finally:
            running.discard(task)
            leave_call(token)
            stats.in_flight -= 1
            stats.calls += 1
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
        stats.errors[failure.category] += 1
        if failure.category in ("internal", "fatal"):
            log.error("tool_failed", tool=tool, correlation_id=correlation_id, exc_info=failure.error)
        if failure.category == "fatal" and self.fatal_exit is not None:
            self.fatal_exit.arm(context.request_id if context is not None else None)
        return failure.result(correlation_id)

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """A resource read through the core: categorised failures, an unknown URI as -32602."""
        read = functools.partial(MCPServer.read_resource, self, uri, context)
        known = (spec.uri for spec in self.primitives.resources)  # read only for an unknown URI
        fatal = self._fatal_after(context)
        return await answered(
            "resources/read", str(uri), read, uri=str(uri), known_uris=known, on_fatal=fatal
        )

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        """A prompt through the core: its name and arguments checked first, its failures categorised."""

        async def checked_then_rendered() -> GetPromptResult | InputRequiredResult:
            given = prompt_arguments(self.prompts, name, arguments, strict=self.strict)
            return await MCPServer.get_prompt(self, name, given, context)

        return await answered("prompts/get", name, checked_then_rendered, on_fatal=self._fatal_after(context))

    def _fatal_after(self, context: Context[Any, Any] | None) -> Callable[[], None]:
        """Stop the server once this request is answered (armed only while serving a transport)."""

        def arm() -> None:
            if self.fatal_exit is not None:
                self.fatal_exit.arm(context.request_id if context is not None else None)

        return arm

    def _serve_handshake_era_methods(self) -> None:
        """`logging/setLevel` always; `resources/subscribe` when there are resources to follow.

        The low-level Server's public `add_request_handler` also makes it declare the
        capabilities (`logging`, `resources.subscribe`) in the 2025-11-25 handshake.
        """
        methods = HandshakeEraMethods(subscriptions_of(self))
        lowlevel = lowlevel_server_of(self)
        lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, methods.set_level)
        if self.primitives.resources:
            lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, methods.subscribe)
            lowlevel.add_request_handler(
                "resources/unsubscribe", UnsubscribeRequestParams, methods.unsubscribe
            )
        self.handshake_era = methods

    def limited_spec(self, name: str) -> ToolSpec | None:
        """The tool whose limits a call of `name` by this caller meets next; None if refused before."""
        served = self.served.get(name)
        if served is None or (self.scopes_enforced and missing_scopes(served.spec.scopes)):
            return None
        return served.spec

    async def _call(
        self,
        served: ServedTool | None,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None,
        correlation_id: str,
        subject: str | None,
    ) -> Attempts:
        if self.shutdown.stopping:
            return Attempts(
                failure=Failure.refusal(
                    "transient",
                    f"the server is stopping and takes no new calls; nothing was run. Retry in "
                    f"{STOPPING_RETRY_AFTER_S:g} s, when a restarted server or another replica answers",
                    retry_after_s=STOPPING_RETRY_AFTER_S,
                )
            )
        if served is None:
            return Attempts(failure=Failure.refusal("unknown_tool", unknown_tool_message(name, self.served)))
        spec = served.spec
        if spec.scopes and self.scopes_enforced:
            missing = missing_scopes(spec.scopes)
            if missing:
                return Attempts(failure=Failure.refusal("forbidden", forbidden_message(name, missing)))
        # Unknown and forbidden answers are final, so they come first; a limit's refusal comes
        # before validation and the idempotency table: it costs little, and a retry is safe.
        refused = self.limits.enter(spec, subject)
        if refused is not None:
            return Attempts(
                failure=Failure.refusal("rate_limited", refused.message, retry_after_s=refused.retry_after_s)
            )
        try:
            problem, validated = served.validator.check(arguments)
            if problem is not None:
                return Attempts(failure=Failure.refusal("invalid_input", problem))
            assert validated is not None
            timeout_s = spec.timeout_s or self.app_settings.tool_timeout_s
            attempt = (served, arguments, validated, context)  # what each attempt is called with
            if not spec.side_effect:
                return await self._run(served, attempt, correlation_id, timeout_s, Attempts())
            canonical = validated.model_dump(mode="json", by_alias=True)
            return await run_once(
                await self.store.get(),
                tool=name,
                key=canonical[KEY_ARGUMENT],
                fingerprint=fingerprint(canonical),
                lease_s=timeout_s + LEASE_MARGIN_S,
                correlation_id=correlation_id,
                run=functools.partial(self._run, served, attempt, correlation_id, timeout_s),
                reconcile=spec.reconcile,
                start_with_claim=served.start_with_claim,
            )
        finally:
            self.limits.leave(spec)

    async def _run(
        self,
        served: ServedTool,
        attempt: tuple[ServedTool, dict[str, Any], BaseModel, Context[Any, Any] | None],
        correlation_id: str,
        timeout_s: float,
        outcome: Attempts,
    ) -> Attempts:
        """Every attempt at the call, all inside the one time limit.

        The limit cancels the task as `asyncio.timeout` would (a sync body's thread is
        abandoned alike), from a timer all calls share (`_time_limit`); the server only
        runs on asyncio.
        """
        settings = self.app_settings
        limits = self._time_limits = time_limits(self._time_limits)
        deadline = limits.start(timeout_s)
        try:
            await run_with_retries(
                self._run_tool,
                attempt,
                outcome,
                tool_name=served.spec.name,
                correlation_id=correlation_id,
                side_effect=served.spec.side_effect,
                may_retry=served.may_retry,
                max_attempts=settings.retry_max_attempts,
                max_total_s=settings.retry_max_s,
            )
        except asyncio.CancelledError as exc:
            if deadline.caused(exc):
                outcome.failure = _past_time_limit(served.spec, timeout_s)
            elif self.shutdown.caused(exc):
                outcome.failure = _cut_at_shutdown(served.spec)
            else:
                raise  # the client's cancellation
        finally:
            limits.stop(deadline)
        return outcome

    async def _run_tool(
        self,
        served: ServedTool,
        arguments: dict[str, Any],
        validated: BaseModel,
        context: Context[Any, Any] | None,
    ) -> CallToolResult | InputRequiredResult:
        """One attempt: what the SDK's `Tool.run` does, with the arguments the core validated,
        and the result cut to the tool's size limit.

        Failures are raised as `Tool.run` raises them (ToolError, or UnexpectedToolError
        for a crash, with the tool's exception as `__cause__`), so `classify` reads both alike.
        """
        tool, spec = served.tool, served.spec
        if context is None and (tool.context_kwarg is not None or tool.resolved_params):
            context = Context(mcp_server=self, subscriptions=subscriptions_of(self))
        if tool.resolved_params:  # Resolve(...) parameters: only the SDK's own path fills them
            result = await tool.run(arguments, cast(Context[Any, Any], context), convert_result=True)
        else:
            kwargs = validated.model_dump_one_level()  # type: ignore[attr-defined]
            if tool.context_kwarg is not None:
                kwargs[tool.context_kwarg] = context
            try:
                result = served.convert_result(await tool.fn(**kwargs))
            except MCPError:
                raise  # a protocol error the tool raised on purpose
            except (UnexpectedToolError, UnexpectedResourceError) as exc:  # a nested call crashed
                raise UnexpectedToolError(f"Error executing tool {tool.name}: {exc}") from exc
            except (ToolError, ResourceError) as exc:
                raise ToolError(f"Error executing tool {tool.name}: {exc}") from exc
            except Exception as exc:
                raise UnexpectedToolError(f"Error executing tool {tool.name}") from exc
        if isinstance(result, InputRequiredResult):  # asks the client (2026-07-28): the next round runs it
            return result
        limit = spec.max_result_bytes or self.app_settings.max_result_bytes
        return fit_result(result, limit, spec.name, side_effect=spec.side_effect)

    def start_telemetry(self) -> None:
        """Exporters and the metrics listener, when configured; exit 78 if they cannot start."""
        try:
            self.telemetry = start_telemetry(self)
        except FatalError as exc:
            exit_fatal(exc)

    def stop_telemetry(self) -> None:
        if self.telemetry is not None:
            self.telemetry.stop()

    async def open_dependencies(self) -> None:
        """Start-up checks that need the event loop: the store and the owner's lifespans open,
        the owner's dependency checks run once; a FatalError from any of them exits 78."""
        try:
            await self.store.get()
            await self.resources.open()
            await self.resources.check_at_startup()
        except FatalError as exc:
            exit_fatal(exc)

    async def close_dependencies(self) -> None:
        """The owner's lifespans close (last opened first), then the store."""
        try:
            await self.resources.close()
        finally:
            await self.store.close()

    async def check_dependencies(self) -> dict[str, Any]:
        """Open every dependency, report health_check once, close them (`check`); exit 78 on failure."""
        await self.open_dependencies()
        try:
            report: dict[str, Any] = (await self.served["health_check"].spec.fn()).model_dump(mode="json")
            return report
        finally:
            await self.close_dependencies()

    async def serve_stdio(self, pipes: ProtocolPipes, *, handle_sigint: bool = True) -> None:
        """Serve JSON-RPC on the pipes `claim_stdio` set aside, driven from the event loop,
        until stdin ends or a signal has drained the calls in flight (`_shutdown`).

        `handle_sigint=False` leaves SIGINT to the caller (in a terminal, Ctrl+C exits at once).
        """
        self.start_telemetry()
        await self.open_dependencies()
        self.fatal_exit = FatalExit()
        try:
            async with anyio.create_task_group() as group:
                stop = functools.partial(self._stop_on_signal, group)
                with _stopped_by_signals(stop, sigint=handle_sigint):
                    async with open_stdio(pipes, self.fatal_exit, self._end_of_input) as streams:
                        # MCPServer.run_stdio_async does the same, on fds 0/1 it would restore at exit.
                        lowlevel = lowlevel_server_of(self)
                        await lowlevel.run(*streams, lowlevel.create_initialization_options())
                group.cancel_scope.cancel()  # a drain still waiting has nothing left to wait for
        finally:
            self.stop_telemetry()
            await self.close_dependencies()
        self.shutdown.finished()

    def _stop_on_signal(self, group: anyio.abc.TaskGroup, name: str) -> None:
        if self.shutdown.begin(name):
            group.start_soon(self._drain_then_stop, group.cancel_scope)

    async def _drain_then_stop(self, serving: anyio.CancelScope) -> None:
        await self.shutdown.drain()
        serving.cancel()

    async def _end_of_input(self) -> None:
        """stdin ended: the client sends nothing more, but may still read the answers in flight."""
        if self.shutdown.begin("end of input"):
            await self.shutdown.drain()
        else:
            await self.shutdown.drained.wait()

    async def serve_http(self, host: str, port: int) -> None:
        """Streamable HTTP on /mcp; a fatal call is answered, then the process exits."""
        from ._http_server import check_http_settings, serve_http

        check_http_settings(self, host, port)  # before any dependency opens: exit 78
        self.start_telemetry()
        await self.open_dependencies()
        self.fatal_exit = FatalExit(grace_s=1.0)
        try:
            await serve_http(self, host, port)
        finally:
            self.stop_telemetry()
            await self.close_dependencies()
        self.shutdown.finished()


@contextlib.contextmanager
def _stopped_by_signals(stop: Callable[[str], None], *, sigint: bool) -> Iterator[None]:
    """SIGTERM (and SIGINT) call `stop` on the event loop (uvicorn does this for HTTP itself)."""
    loop = asyncio.get_running_loop()
    handled = [signal.SIGTERM, signal.SIGINT] if sigint else [signal.SIGTERM]
    for signum in handled:
        loop.add_signal_handler(signum, stop, signum.name)
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
