"""`ResilientServer`: the SDK's MCPServer with one seam that sees every tool call.

`call_tool` is the verified seam: it receives the tool's own exception (as the
`__cause__` of the SDK's ToolError). It hands the call to `calls.tool_call`, where each call is
validated, bounded in time, retried when safe, classified, counted and logged in one line;
this module is the SDK's wiring: the tools registered, the seam, the dependencies opened and
closed. Serving it over stdio or HTTP is `commands.serve`'s.

Resources, prompts and completions pass through `calls.primitive_calls` from the public
`read_resource` and `get_prompt` overrides, as the owner's skills do (`skills.extension`); the
2025-11-25 methods MCPServer leaves unserved (`logging/setLevel`, `resources/subscribe`) come
from `server.handshake_era`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    SetLevelRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from mcp_types import InputResponseRequestParams

from resilient_mcp.authoring.checks import HealthCheck
from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.primitives import Primitives
from resilient_mcp.authoring.resources import Resources
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.callers import missing_scopes
from resilient_mcp.calls.fatal_exit import FatalExit
from resilient_mcp.calls.primitive_bounds import PrimitiveBounds, PrimitiveTelemetry
from resilient_mcp.calls.primitive_calls import answered, prompt_arguments, register
from resilient_mcp.calls.rate_limits import CallLimits
from resilient_mcp.calls.served_tool import build_tool
from resilient_mcp.calls.shutdown import Shutdown
from resilient_mcp.calls.stats import CallStats
from resilient_mcp.calls.tool_call import CallTelemetry, ToolCalls
from resilient_mcp.sdk_fence import lowlevel_server_of, sdk_logging_left_alone, subscriptions_of
from resilient_mcp.server.handshake_era import HandshakeEraMethods
from resilient_mcp.server.startup import exit_fatal
from resilient_mcp.store import StoreHandle
from resilient_mcp.store.task_table import TaskRow
from resilient_mcp.tasks.extension import TasksExtension
from resilient_mcp.tasks.handshake_era import HandshakeEraTasks
from resilient_mcp.tasks.runner import TaskRunner, TaskTelemetry
from resilient_mcp.tasks.task_context import ProgressSink, TaskContext
from resilient_mcp.telemetry.call_line import time_tool_calls

if TYPE_CHECKING:
    from resilient_mcp.skills.catalog import SkillCatalog
    from resilient_mcp.skills.extension import SkillsExtension


class ServerTelemetry(CallTelemetry, PrimitiveTelemetry, TaskTelemetry, Protocol):
    """What the telemetry is told: every tool call, every other primitive answered, every task ended."""


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
        skills: SkillCatalog | None = None,
        **kwargs: Any,
    ) -> None:
        built = [build_tool(spec, strict=strict) for spec in specs]
        # Advertised only when a tool can run as a task: a server without one answers as before.
        tasks = TasksExtension() if any(spec.task_support != "forbidden" for spec in specs) else None
        tasks_2025 = HandshakeEraTasks(tasks) if tasks is not None else None  # the same tasks, in 2025-11-25
        # Advertised only when skills/ holds a skill: a server without one answers as before.
        self.skills: SkillsExtension | None = None
        if skills is not None and skills.skills:
            from resilient_mcp.skills.extension import SkillsExtension  # a project with skills only

            self.skills = SkillsExtension(skills, app_settings)
        extensions = [extension for extension in (tasks, self.skills) if extension is not None]
        # The middleware times each call from the SDK's validation of it to its answer built.
        middleware = [time_tool_calls] if tasks_2025 is None else [time_tool_calls, tasks_2025.middleware]
        with sdk_logging_left_alone():
            super().__init__(
                name,
                tools=[tool for tool, _ in built],
                middleware=middleware,
                extensions=extensions or None,
                **kwargs,
            )
        self.served = {served.spec.name: served for _, served in built}
        self.shutdown = Shutdown(app_settings.shutdown_grace_s)
        self.limits = CallLimits(
            rate_limit=app_settings.rate_limit, max_concurrent_calls=app_settings.max_concurrent_calls
        )
        # Every tools/call, top to bottom, handed what the calls are served with.
        self.tool_calls = ToolCalls(
            self.served,
            settings=app_settings,
            sdk_settings=self.settings,
            stats=stats,
            store=store,
            limits=self.limits,
            shutdown=self.shutdown,
            new_context=functools.partial(Context, mcp_server=self, subscriptions=subscriptions_of(self)),
        )
        # Durable tasks: the runner runs their bodies, on the tool calls' own path.
        self.tasks = TaskRunner(self.tool_calls, store, self._task_context)
        if tasks is not None:
            tasks.bind(self.tool_calls, self.tasks, self._request_context)
        # Reads, gets and completions within the same limits, counted where tool calls are.
        self.bounds = PrimitiveBounds(limits=self.limits, stats=stats, timeout_s=app_settings.tool_timeout_s)
        if self.skills is not None:
            self.skills.bind(self.bounds)
        self.primitives = primitives or Primitives()
        self.strict = strict
        self.prompts = register(self, self.primitives, self.bounds)
        self._serve_handshake_era_methods()
        if tasks_2025 is not None:
            tasks_2025.serve_on(lowlevel_server_of(self))
        self.app_settings = app_settings
        self.stats = stats
        self.store = store
        self.resources = resources or Resources([], [])  # the owner's lifespans and dependency checks
        self.health_checks = dict(health_checks or {})  # what health_check reports; /readyz runs them
        self._telemetry: ServerTelemetry | None = None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        return await self.tool_calls.answer(name, arguments, context)

    def _task_context(self, row: TaskRow, progress: ProgressSink) -> TaskContext:
        """The Context a task's body runs with: its answers so far, what its client declared."""
        answers = InputResponseRequestParams.model_validate(
            {"inputResponses": row.decoded("answers"), "requestState": row.request_state}
        )
        return TaskContext(
            task_id=row.task_id,
            capabilities=row.decoded("capabilities"),
            progress=progress,
            mcp_server=self,
            input_params=answers,
            subscriptions=subscriptions_of(self),
        )

    def _request_context(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> Context[Any, Any]:
        """The Context the SDK gives a tools/call request (for a task's questions asked first)."""
        return Context(
            request_context=ctx, mcp_server=self, input_params=params, subscriptions=subscriptions_of(self)
        )

    # What serving arms is set here, as before; `tool_calls` holds it for every call to read.
    @property
    def telemetry(self) -> ServerTelemetry | None:
        """Started when serving, if METRICS or OTEL_* ask for it."""
        return self._telemetry

    @telemetry.setter
    def telemetry(self, telemetry: ServerTelemetry | None) -> None:
        self._telemetry = self.tool_calls.telemetry = self.bounds.telemetry = self.tasks.telemetry = telemetry

    @property
    def fatal_exit(self) -> FatalExit | None:
        """Armed only when serving a transport."""
        return self.tool_calls.fatal_exit

    @fatal_exit.setter
    def fatal_exit(self, fatal_exit: FatalExit | None) -> None:
        self.tool_calls.fatal_exit = fatal_exit

    @property
    def scopes_enforced(self) -> bool:
        """A tool's `scopes` apply with AUTH=oauth over HTTP."""
        return self.tool_calls.scopes_enforced

    @scopes_enforced.setter
    def scopes_enforced(self, enforced: bool) -> None:
        self.tool_calls.scopes_enforced = enforced

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """A resource read through the core: categorised failures, an unknown URI as -32602."""
        method = "resources/read"
        skills, target = self.skills, str(uri)
        skill_file = skills.file(target) if skills is not None else None
        read: Callable[[], Awaitable[Iterable[ReadResourceContents] | InputRequiredResult]]
        if skills is not None and skill_file is not None:  # a skill's file, listed or not
            read = self.bounds.within(method, functools.partial(skills.read, skill_file))
        else:
            read = self.bounds.within(method, functools.partial(MCPServer.read_resource, self, uri, context))
        skill_uris = (skill.uri for skill in skills.catalog.skills) if skills is not None else ()
        # Read only for an unknown URI.
        known = itertools.chain((spec.uri for spec in self.primitives.resources), skill_uris)
        fatal = self._fatal_after(context)
        answer = answered(method, target, read, uri=target, known_uris=known, on_fatal=fatal)
        return await self.bounds.counted(method, answer)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        """A prompt through the core: its name and arguments checked first, its failures categorised."""

        async def checked_then_rendered() -> GetPromptResult | InputRequiredResult:
            given = prompt_arguments(self.prompts, name, arguments, strict=self.strict)
            return await MCPServer.get_prompt(self, name, given, context)

        method = "prompts/get"
        rendered = self.bounds.within(method, checked_then_rendered)
        return await self.bounds.counted(
            method, answered(method, name, rendered, on_fatal=self._fatal_after(context))
        )

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

    async def open_dependencies(self) -> None:
        """Start-up checks that need the event loop: the store and the owner's lifespans open,
        the owner's dependency checks run once; a FatalError from any of them exits 78."""
        try:
            await self.store.get()
            await self.resources.open()
            await self.resources.check_at_startup()
        except FatalError as exc:
            exit_fatal(exc)
        self.tasks.watch()  # tasks of a process that died are taken over from now on

    async def close_dependencies(self) -> None:
        """Task runs left (past the shutdown's grace) stay for another process; the owner's
        lifespans close (last opened first), then the store."""
        try:
            await self.tasks.close()
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
