# Template-owned: `copier update` replaces this file; put your code in tools/.
"""What the SDK registers for a `@tool` function: the function, adapted in two ways.

- A sync function runs in a worker thread that a time limit can abandon; the SDK's
  own thread cannot be cancelled, so a hung sync tool would ignore its time limit.
- A `side_effect=True` tool gains a required `idempotency_key` argument; the function
  receives it only if it declares an `idempotency_key` parameter itself.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from pydantic import Field

from .idempotency import KEY_ARGUMENT
from .tool import ToolSpec

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
    is_async = inspect.iscoroutinefunction(fn)
    if is_async and not spec.side_effect:
        return fn
    signature = inspect.signature(fn, eval_str=True)
    takes_key = KEY_ARGUMENT in signature.parameters

    async def call(*args: Any, **kwargs: Any) -> Any:
        if spec.side_effect and not takes_key:
            kwargs.pop(KEY_ARGUMENT, None)
        if is_async:
            return await fn(*args, **kwargs)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=True)

    functools.update_wrapper(call, fn)
    if spec.side_effect:
        _require_key(call, signature)
    return call


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
