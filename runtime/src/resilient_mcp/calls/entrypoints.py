"""What the SDK registers for a `@tool` function: the function, adapted where it must be.

- A sync function runs in a worker thread (`calls.tool_threads`) that a time limit can abandon; the SDK's
  own thread cannot be cancelled, so a hung sync tool would ignore its time limit. An
  abandoned thread sees `cancelled()` turn true, and is counted and bounded.
- A `side_effect=True` tool gains a required `idempotency_key` argument; the function
  receives it only if it declares an `idempotency_key` parameter itself. Its start is
  recorded right before the body runs: in the worker thread for a sync tool (not while the
  call waits for a thread), on the loop for an async one (whose claim may record it already),
  so a call that never got there can run again.
- `SystemExit` and `KeyboardInterrupt` from a tool become a FatalError: answered, then
  the process exits, instead of unwinding the event loop with the client left waiting.
- Any other `BaseException` the tool raised (a `CancelledError` that is not this call's
  own cancellation, `GeneratorExit`, a class of its own) becomes an ordinary crash of this
  call: escaping, it would end the stdio session or break the HTTP session manager.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio
from pydantic import Field

from resilient_mcp.authoring.errors import FatalError, TransientError
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.running import (
    MAX_ABANDONED_THREADS,
    Body,
    abandoned_threads,
    current_body,
    is_own_cancellation,
    reset_body,
    set_body,
)
from resilient_mcp.calls.tool_threads import run_in_thread
from resilient_mcp.store import KEY_ARGUMENT

KEY_DESCRIPTION = (
    "Idempotency key of this operation, 1-255 printable characters. Reuse the SAME key for every "
    "retry of one logical operation (for example '<run id>:<step index>') so it happens at most "
    "once; use a NEW key for a new operation."
)
IdempotencyKey = Annotated[
    str, Field(description=KEY_DESCRIPTION, min_length=1, max_length=255, pattern=r"^[ -~]+$")
]


def entrypoint(spec: ToolSpec) -> Callable[..., Any]:
    """The async callable to register for this spec, with the signature the schema comes from."""
    fn = spec.fn
    if inspect.iscoroutinefunction(fn) and not spec.side_effect:
        return functools.update_wrapper(_plain_async(fn), fn)
    is_async = inspect.iscoroutinefunction(fn)
    signature = inspect.signature(fn, eval_str=True)
    takes_key = KEY_ARGUMENT in signature.parameters

    async def call(*args: Any, **kwargs: Any) -> Any:
        if spec.side_effect and not takes_key:
            kwargs.pop(KEY_ARGUMENT, None)
        body = current_body() or Body()
        if is_async:
            await body.begin()
            return await _awaited(fn(*args, **kwargs))
        _refuse_past_the_thread_bound()
        return await _in_thread(body, functools.partial(fn, *args, **kwargs))

    functools.update_wrapper(call, fn)
    if spec.side_effect:
        _require_key(call, signature)
    return call


def _plain_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An async tool without side effects: only what is not an `Exception` is caught."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        return await _awaited(fn(*args, **kwargs))

    return call


async def _awaited(body: Awaitable[Any]) -> Any:
    """An async tool's body awaited; what it raises that is not an `Exception` made one."""
    try:
        return await body
    except Exception:
        raise
    except BaseException as exc:
        if is_own_cancellation(exc):
            raise
        raise _as_exception(exc) from exc


async def _in_thread(body: Body, work: Callable[[], Any]) -> Any:
    """Run a sync body in a worker thread that the call may abandon (time limit, cancellation)."""

    loop = asyncio.get_running_loop()

    def run() -> Any:
        if not body.enter_thread():
            return None  # the call gave up before this thread began: no one awaits it, so no effect
        try:
            if not body.begin_in_thread(loop):
                return None  # the call gave up while the start was recorded: the body never ran
            return work()
        except Exception:
            raise
        except BaseException as exc:  # nothing cancels a thread: whatever this is, the tool raised it
            raise _as_exception(exc) from exc
        finally:
            body.leave_thread()

    token = set_body(body)  # the thread runs in a copy of this context: cancelled() finds its body
    try:
        return await run_in_thread(run)
    except anyio.get_cancelled_exc_class():
        body.abandon()
        raise
    finally:
        reset_body(token)


def _refuse_past_the_thread_bound() -> None:
    stuck = abandoned_threads()
    if stuck >= MAX_ABANDONED_THREADS:
        raise TransientError(
            f"{stuck} earlier calls are still running past their time limit, the most this server "
            "lets pile up; nothing was run. Retry in a minute; if it persists, restart the server",
            retry_after=30.0,
        )


class ToolRaisedBaseException(Exception):
    """The tool raised a BaseException that asks nothing of the server: this call crashed."""


def _as_exception(exc: BaseException) -> Exception:
    """What a tool's BaseException becomes: a stop of the server, or a crash of this call."""
    if isinstance(exc, SystemExit | KeyboardInterrupt):
        return FatalError(f"the tool raised {type(exc).__name__}", "the server stops after answering")
    return ToolRaisedBaseException(f"the tool raised {type(exc).__name__}")


def _require_key(wrapper: Callable[..., Any], signature: inspect.Signature) -> None:
    """Give the wrapper the function's signature with a required keyword `idempotency_key`."""
    parameters = [p for name, p in signature.parameters.items() if name != KEY_ARGUMENT]
    key = inspect.Parameter(KEY_ARGUMENT, inspect.Parameter.KEYWORD_ONLY, annotation=IdempotencyKey)
    variadic = [p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD]
    others = [p for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
    wrapper.__signature__ = signature.replace(parameters=[*others, key, *variadic])  # type: ignore[attr-defined]
    annotations = {p.name: p.annotation for p in others if p.annotation is not inspect.Parameter.empty}
    annotations[KEY_ARGUMENT] = IdempotencyKey
    if signature.return_annotation is not inspect.Signature.empty:
        annotations["return"] = signature.return_annotation
    wrapper.__annotations__ = annotations
