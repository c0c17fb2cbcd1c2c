# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`ResilientServer`: the SDK's MCPServer with one seam that sees every tool call.

`call_tool` is the verified seam: it receives the tool's own exception (as the
`__cause__` of the SDK's ToolError), so here each call is validated, bounded in
time, retried when safe, classified, counted and logged in one line.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, cast

import anyio
import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult

from ._callers import caller, forbidden_message, missing_scopes
from ._entrypoints import entrypoint
from ._errors import FatalError, TransientError
from ._fatal_exit import FatalExit, WatchedWriter
from ._health import CallStats
from ._idempotency import KEY_ARGUMENT, StoreHandle, fingerprint
from ._idempotent_call import run_once
from ._logs import get_logger
from ._resilience import Attempts, Failure, classify, in_doubt_message, run_with_retries
from ._running import current_body
from ._settings import CoreSettings
from ._startup import exit_fatal
from ._stdio_guard import ProtocolPipes
from ._stdio_lines import AnsweringLines
from ._tool import ToolSpec
from ._validation import ArgumentValidator, harden_schema, unknown_tool_message

log = get_logger(__name__)
LEASE_MARGIN_S = 30.0  # a claim outlives the call's time limit by this much before it is in doubt
_NAME_IN_LOG = 100  # a client may send any name; the log keeps this much of it


@dataclass(frozen=True)
class ServedTool:
    spec: ToolSpec
    validator: ArgumentValidator


def build_tool(spec: ToolSpec, *, strict: bool) -> tuple[Tool, ServedTool]:
    """The SDK Tool for a spec (schema hardened when strict) and what the seam needs to serve it."""
    tool = Tool.from_function(
        entrypoint(spec),
        name=spec.name,
        title=spec.title,
        description=spec.description,
        annotations=spec.annotations(),
    )
    if strict:
        tool.parameters = harden_schema(tool.parameters)
    validator = ArgumentValidator(tool.parameters, tool.fn_metadata, strict=strict, always=spec.side_effect)
    return tool, ServedTool(spec, validator)


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
        **kwargs: Any,
    ) -> None:
        built = [build_tool(spec, strict=strict) for spec in specs]
        super().__init__(name, tools=[tool for tool, _ in built], **kwargs)
        self.served = {served.spec.name: served for _, served in built}
        self.app_settings = app_settings
        self.stats = stats
        self.store = store
        self.fatal_exit: FatalExit | None = None  # armed only when serving a transport
        self.scopes_enforced = False  # a tool's `scopes` apply with AUTH=oauth over HTTP

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        started = time.perf_counter()
        correlation_id = os.urandom(8).hex()  # 16 hex digits, cheaper than a UUID
        self.stats.in_flight += 1
        # bind/reset rather than bound_contextvars: a plain call costs less on every tool call.
        tool = name[:_NAME_IN_LOG]
        tokens = structlog.contextvars.bind_contextvars(correlation_id=correlation_id, tool=tool)
        try:
            outcome = await self._call(name, arguments, context, correlation_id)
        except Exception as exc:  # a bug in this layer or a store: still an answer, never a leak
            outcome = Attempts(failure=classify(exc, name, correlation_id))
        finally:
            structlog.contextvars.reset_contextvars(**tokens)
            self.stats.in_flight -= 1
            self.stats.calls += 1
        failure = outcome.failure
        log.info(
            "tool_call",
            tool=tool,
            correlation_id=correlation_id,
            outcome="error" if failure else "replayed" if outcome.replayed else "ok",
            category=failure.category if failure else None,
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
            attempts=outcome.count,
            **caller(),
        )
        if failure is None:
            assert outcome.result is not None
            return outcome.result
        self.stats.errors[failure.category] += 1
        if failure.category in ("internal", "fatal"):
            log.error("tool_failed", tool=tool, correlation_id=correlation_id, exc_info=failure.error)
        if failure.category == "fatal" and self.fatal_exit is not None:
            self.fatal_exit.arm(context.request_id if context is not None else None)
        return failure.result(correlation_id)

    async def _call(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None, correlation_id: str
    ) -> Attempts:
        served = self.served.get(name)
        if served is None:
            return Attempts(failure=Failure.refusal("unknown_tool", unknown_tool_message(name, self.served)))
        if served.spec.scopes and self.scopes_enforced:
            missing = missing_scopes(served.spec.scopes)
            if missing:
                return Attempts(failure=Failure.refusal("forbidden", forbidden_message(name, missing)))
        problem, validated = served.validator.check(arguments)
        if problem is not None:
            return Attempts(failure=Failure.refusal("invalid_input", problem))
        spec, settings = served.spec, self.app_settings
        timeout_s = spec.timeout_s or settings.tool_timeout_s

        def may_retry(failure: Failure) -> bool:
            if failure.category != "transient":
                return False
            # A side-effecting tool's own TransientError promises nothing was applied.
            return spec.safe_to_repeat or (spec.side_effect and isinstance(failure.error, TransientError))

        async def run(outcome: Attempts) -> Attempts:
            with anyio.move_on_after(timeout_s):
                await run_with_retries(
                    lambda: self._run_tool(name, arguments, context),
                    outcome,
                    tool_name=name,
                    correlation_id=correlation_id,
                    side_effect=spec.side_effect,
                    may_retry=may_retry,
                    max_attempts=settings.retry_max_attempts,
                    max_total_s=settings.retry_max_s,
                )
                return outcome
            outcome.failure = _past_time_limit(spec, timeout_s)
            return outcome

        if not spec.side_effect:
            return await run(Attempts())
        assert validated is not None  # side-effect tools are always validated first
        canonical = validated.model_dump(mode="json", by_alias=True)
        return await run_once(
            await self.store.get(),
            tool=name,
            key=canonical[KEY_ARGUMENT],
            fingerprint=fingerprint(canonical),
            lease_s=timeout_s + LEASE_MARGIN_S,
            correlation_id=correlation_id,
            run=run,
            reconcile=spec.reconcile,
        )

    async def _run_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None
    ) -> CallToolResult:
        result = await super().call_tool(name, arguments, context)
        if not isinstance(result, CallToolResult):  # InputRequiredResult: not used by this core
            raise TypeError(f"tool {name} asked for client input, which this server does not support")
        return result

    async def open_dependencies(self) -> None:
        """The start-up checks that need the event loop: the idempotency store opens, or exit 78."""
        try:
            await self.store.get()
        except FatalError as exc:
            exit_fatal(exc)

    async def check_dependencies(self) -> None:
        """Open and close every dependency once, as `check` does; exit 78 on failure."""
        await self.open_dependencies()
        await self.store.close()

    async def serve_stdio(self, pipes: ProtocolPipes) -> None:
        """Serve JSON-RPC on the pipes `claim_stdio` set aside (the SDK's stdio loop, explicit streams)."""
        await self.open_dependencies()
        self.fatal_exit = FatalExit()
        writer = anyio.wrap_file(WatchedWriter(pipes.raw_writer(), self.fatal_exit))
        reader = cast(anyio.AsyncFile[str], AnsweringLines(anyio.wrap_file(pipes.reader()), writer))
        try:
            async with stdio_server(reader, writer) as (read_stream, write_stream):
                # MCPServer.run_stdio_async does the same, on fds 0/1 it would restore at exit.
                lowlevel = self._lowlevel_server
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
        finally:
            await self.store.close()

    async def serve_http(self, host: str, port: int) -> None:
        """Streamable HTTP on /mcp; a fatal call is answered, then the process exits."""
        from ._http_server import check_http_settings, serve_http

        check_http_settings(self, host, port)  # before any dependency opens: exit 78
        await self.open_dependencies()
        self.fatal_exit = FatalExit(grace_s=1.0)
        try:
            await serve_http(self, host, port)
        finally:
            await self.store.close()
