"""Resources, prompts and completions served through the same core as tools.

A resource read, a prompt get or a completion is not a tool call: its failure cannot be an
`isError` result, so it is a JSON-RPC error. It is still classified as a tool's failure
is (`_resilience.classify`), its message shown to the client only after redaction, its
details logged under a correlation id that the error's `data` carries:
`{"category", "retryable", "correlation_id"}`, plus the `uri` of a resource. Invalid
input and unknown names are `-32602`, everything else `-32603`. An `MCPError` the owner
raises on purpose is sent as raised, its message and data redacted as every text is.

The SDK registers and renders them (`MCPServer.resource`, `add_prompt`, `completion`);
`ResilientServer` overrides the public `read_resource` and `get_prompt` to call `answered`.
Each runs within the limits tool calls meet (`calls.primitive_bounds`): a refusal or a stop at the
time limit is `rate_limited` (code -32023, with `retry_after_s`) or `timeout`.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, UnexpectedResourceError
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)
from pydantic import ValidationError

from resilient_mcp.authoring.errors import FatalError, ToolInputError
from resilient_mcp.authoring.outcomes import (
    RATE_LIMITED_CODE,
    Failure,
    error_meta,
    shown,
    shown_protocol_error,
)
from resilient_mcp.authoring.primitives import MAX_COMPLETION_VALUES, CompletionSpec, Primitives
from resilient_mcp.calls.callers import caller
from resilient_mcp.calls.primitive_bounds import LimitRefusal, PrimitiveBounds
from resilient_mcp.calls.resilience import classify
from resilient_mcp.calls.validation import (
    describe_validation_error,
    unknown_arguments_message,
    unknown_name_message,
)
from resilient_mcp.telemetry.call_context import new_correlation_id
from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.redaction import redact_text
from resilient_mcp.telemetry.text import clip

log = get_logger(__name__)
T = TypeVar("T")
_SHOWN_NAMES = 20  # an unknown-name answer lists this many declared names
_TARGET_IN_LOG = 200  # a client may send any URI or name; the log keeps this much of it
_CODES = {"invalid_input": INVALID_PARAMS, "rate_limited": RATE_LIMITED_CODE}  # the rest: INTERNAL_ERROR


def register(server: MCPServer[Any], primitives: Primitives, bounds: PrimitiveBounds) -> dict[str, Prompt]:
    """Hand the owner's resources, prompts and completers to the SDK, which lists and renders them;
    the prompts by name, for their arguments to be checked before the SDK renders one.

    A template whose `{params}` differ from its function's parameters, or a URI the SDK
    cannot parse, stops the server at start-up with what to fix.
    """
    for spec in primitives.resources:
        try:
            server.resource(
                spec.uri,
                name=spec.name,
                title=spec.title,
                description=spec.description,
                mime_type=spec.mime_type,
            )(spec.fn)
        except (ValueError, TypeError) as exc:
            raise FatalError(
                f"resource {spec.uri!r} ({spec.fn.__module__}.{spec.name}) cannot be served: {exc}",
                "make the URI template's {params} the function's parameters",
            ) from None
    prompts: dict[str, Prompt] = {}
    for declared in primitives.prompts:
        prompts[declared.name] = Prompt.from_function(
            declared.fn, name=declared.name, title=declared.title, description=declared.description
        )
        server.add_prompt(prompts[declared.name])
    if primitives.completions:
        completers = {completer.target: completer for completer in primitives.completions}

        async def complete(
            ref: PromptReference | ResourceTemplateReference,
            argument: CompletionArgument,
            context: CompletionContext | None,
        ) -> Completion:
            target = ref.name if isinstance(ref, PromptReference) else ref.uri
            chosen = completers.get(target)
            if chosen is None:  # nothing to offer for this target: an empty answer, as the spec allows
                return Completion(values=[], has_more=False)
            filled = dict(context.arguments or {}) if context is not None else {}
            method = "completion/complete"
            run = bounds.within(method, functools.partial(_completed, chosen, argument, filled))
            return await bounds.counted(method, answered(method, target, run))

        server.completion()(complete)  # type: ignore[no-untyped-call]  # the SDK's decorator is untyped
    return prompts


async def _completed(
    spec: CompletionSpec, argument: CompletionArgument, filled: dict[str, str]
) -> Completion:
    call = functools.partial(spec.fn, argument.name, argument.value, filled)
    if inspect.iscoroutinefunction(spec.fn):
        values = call()
    else:
        # In a worker thread, as the SDK runs sync resources and prompts: on the event loop a slow
        # completer would hold up every other request, and no time limit could stop it.
        values = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    if inspect.isawaitable(values):
        values = await values
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise TypeError(f"completer {spec.name} must return a list of strings, got {type(values).__name__}")
    return Completion(
        values=values[:MAX_COMPLETION_VALUES],
        total=len(values),
        has_more=len(values) > MAX_COMPLETION_VALUES,
    )


def prompt_arguments(
    prompts: Mapping[str, Prompt], name: str, arguments: Mapping[str, Any] | None, *, strict: bool
) -> dict[str, Any]:
    """What prompt `name` is rendered with; ToolInputError for an unknown prompt, an argument it
    does not take (strict; dropped when lenient, as a tool's) or a required one missing."""
    prompt = prompts.get(name)
    if prompt is None:
        raise ToolInputError(unknown_name_message("prompt", name, prompts, listed_at_most=_SHOWN_NAMES))
    declared = {argument.name: argument.required for argument in prompt.arguments or ()}
    given = dict(arguments or {})
    problems = [
        unknown_arguments_message(given, declared) if strict else None,
        *(
            f"{argument!r} is required but missing"
            for argument, required in declared.items()
            if required and argument not in given
        ),
    ]
    problem = "; ".join(problem for problem in problems if problem)
    if problem:
        raise ToolInputError(problem)
    return given if strict else {key: value for key, value in given.items() if key in declared}


async def answered(
    method: str,
    target: str,
    run: Callable[[], Awaitable[T]],
    *,
    uri: str | None = None,
    known_uris: Iterable[str] = (),
    on_fatal: Callable[[], None] | None = None,
) -> T:
    """Run one read, get or completion; a failure becomes a JSON-RPC error the client can act on.

    `known_uris` name the resources, for the answer to an unknown URI; `on_fatal` stops the
    server after this answer, as a tool's `FatalError` does.
    """
    started = time.perf_counter()
    correlation_id = new_correlation_id()
    logged = redact_text(clip(target, _TARGET_IN_LOG, mark=""))
    try:
        result = await run()
    except MCPError as exc:  # the owner's on purpose, or the SDK's own answer: sent as it was, redacted
        code, message = exc.error.code, shown_protocol_error(exc).message
        _line(method, logged, correlation_id, "protocol_error", None, started, code=code, message=message)
        raise
    except Exception as exc:
        if isinstance(exc, ResourceNotFoundError):
            hint = "; resources/templates/list shows the URI templates"
            unknown = unknown_name_message("resource", target, known_uris, listed_at_most=_SHOWN_NAMES)
            failure = Failure.refusal("invalid_input", unknown + hint)
        else:
            failure = _classified(exc, target, correlation_id)
        _line(method, logged, correlation_id, "error", failure.category, started)
        if failure.category in ("internal", "fatal"):
            log.error(
                f"{method.replace('/', '_')}_failed",
                target=logged,
                correlation_id=correlation_id,
                exc_info=exc,
            )
        if failure.category == "fatal" and on_fatal is not None:
            on_fatal()
        code = _CODES.get(failure.category, INTERNAL_ERROR)
        raise MCPError(
            code=code,
            message=f"{failure.category}: {shown(failure.message)}",
            data=_data(failure, correlation_id, uri),
        ) from None
    _line(method, logged, correlation_id, "ok", None, started)
    return result


def _classified(exc: Exception, target: str, correlation_id: str) -> Failure:
    """The category of what the owner's function raised, out of the SDK's wrappers around it."""
    if isinstance(exc, LimitRefusal):  # refused or stopped by a limit before the owner's function ended
        return exc.failure
    cause = _owner_exception(exc)
    if isinstance(cause, ValidationError):  # a template parameter or prompt argument of the wrong type
        return Failure("invalid_input", describe_validation_error(cause), cause)
    if isinstance(cause, ResourceError) and not isinstance(cause, UnexpectedResourceError):
        return Failure("terminal", str(cause), cause)  # the SDK's ResourceError, raised on purpose
    return classify(cause, target, correlation_id)


def _owner_exception(exc: BaseException) -> BaseException:
    """`MCPServer.read_resource` raises UnexpectedResourceError from the owner's exception;
    `get_prompt` raises `ValueError(str(e)) from e`, e being `Prompt.render`'s
    `ValueError("Error rendering prompt ...")` from the owner's."""
    if isinstance(exc, UnexpectedResourceError):
        return exc.__cause__ or exc
    for _ in range(2):
        cause = exc.__cause__
        sdk_wrapper = type(exc) is ValueError and cause is not None
        if sdk_wrapper and (str(exc) == str(cause) or str(exc).startswith("Error rendering prompt")):
            assert cause is not None
            exc = cause
    return exc


def _data(failure: Failure, correlation_id: str, uri: str | None) -> dict[str, Any]:
    data = error_meta(
        failure.category, correlation_id, retryable=failure.retryable, retry_after_s=failure.retry_after_s
    )
    if uri is not None:
        data["uri"] = uri
    return data


def _line(
    method: str,
    target: str,
    correlation_id: str,
    outcome: str,
    category: str | None,
    started: float,
    *,
    code: int | None = None,
    message: str | None = None,
) -> None:
    log.info(
        "request",
        method=method,
        target=target,
        correlation_id=correlation_id,
        outcome=outcome,
        category=category,
        code=code,
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
        subject=caller(),
        **({} if message is None else {"message": message}),
    )
