"""The `@tool` decorator: marks a function as an MCP tool and records how to serve it.

The decorator only attaches a `ToolSpec`; the app factory finds marked functions in
the tools/ modules and registers them, so importing a module twice or building two
servers in one process never registers a tool twice.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, TypeVar, overload

from mcp.types import ToolAnnotations

from resilient_mcp.records import record

F = TypeVar("F", bound=Callable[..., Any])
MIN_RESULT_BYTES = 1000  # room for the note and a little text; below this every answer is a note
SPEC_ATTRIBUTE = "__mcp_tool_spec__"

Reconciled = Literal["done", "not_done", "unknown"]
# Asked with the idempotency key of a call whose outcome is unknown; looks at the outside system.
Reconcile = Callable[[str], Reconciled] | Callable[[str], Awaitable[Reconciled]]
# Whether a call may run as a durable task (DESIGN.md "Tasks"): never, when the client can, always.
TaskSupport = Literal["forbidden", "optional", "required"]
TASK_SUPPORTS: tuple[TaskSupport, ...] = ("forbidden", "optional", "required")


@record
class ToolSpec:
    """What `@tool` recorded about one function."""

    fn: Callable[..., Any]
    name: str
    title: str | None = None
    read_only: bool = False
    idempotent: bool = False
    side_effect: bool = False
    destructive: bool | None = None
    open_world: bool | None = None
    timeout_s: float | None = None
    reconcile: Reconcile | None = None
    scopes: tuple[str, ...] = ()
    output_schema: Mapping[str, Any] | None = None  # the core's own tools: instead of pydantic's
    max_result_bytes: int | None = None
    rate_limit: float | None = None  # calls per minute per caller, for this tool
    max_concurrency: int | None = None  # calls of this tool running at once, all callers
    task_support: TaskSupport = "forbidden"
    # A JSON Schema the owner wrote: served as written and validated instead of the signature's.
    input_schema: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # parameter -> `Mcp-Param-<name>` header

    @property
    def description(self) -> str:
        """The docstring, dedented: indentation would cost bytes on every tools/list."""
        return inspect.getdoc(self.fn) or ""

    @property
    def safe_to_repeat(self) -> bool:
        """Whether any transient failure may be retried without doing anything twice.

        Not a side-effecting tool: it is retried only after raising TransientError itself.
        """
        return self.read_only or self.idempotent

    def annotations(self) -> ToolAnnotations | None:
        """The hints that differ from the spec's defaults; the defaults cost bytes on every tools/list.

        The spec's defaults: not read-only, destructive, not idempotent, open world;
        destructive and idempotent mean something only for a tool that is not read-only.
        The title is the tool's own `title`, not repeated here.
        """
        acts = not self.read_only
        annotations = ToolAnnotations(
            read_only_hint=True if self.read_only else None,
            destructive_hint=False if acts and self.destructive is False else None,
            # A side-effecting tool runs behind the idempotency table: repeats are harmless.
            idempotent_hint=True if acts and (self.idempotent or self.side_effect) else None,
            open_world_hint=False if self.open_world is False else None,
        )
        return annotations if annotations.model_dump(exclude_none=True) else None


@overload
def tool(name: F, /) -> F: ...


@overload
def tool(
    name: str | None = None,
    *,
    title: str | None = None,
    read_only: bool = False,
    idempotent: bool = False,
    side_effect: bool = False,
    destructive: bool | None = None,
    open_world: bool | None = None,
    timeout_s: float | None = None,
    reconcile: Reconcile | None = None,
    scopes: Sequence[str] = (),
    max_result_bytes: int | None = None,
    rate_limit: float | None = None,
    max_concurrency: int | None = None,
    task_support: TaskSupport = "forbidden",
    input_schema: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Callable[[F], F]: ...


def tool(
    name: str | Callable[..., Any] | None = None,
    *,
    title: str | None = None,
    read_only: bool = False,
    idempotent: bool = False,
    side_effect: bool = False,
    destructive: bool | None = None,
    open_world: bool | None = None,
    timeout_s: float | None = None,
    reconcile: Reconcile | None = None,
    scopes: Sequence[str] = (),
    max_result_bytes: int | None = None,
    rate_limit: float | None = None,
    max_concurrency: int | None = None,
    task_support: TaskSupport = "forbidden",
    input_schema: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """Mark a function as an MCP tool; `@tool` and `@tool(...)` both work.

    The docstring is the tool's description; describe each parameter with
    `Annotated[type, Field(description=...)]`.

    Args:
        name: the tool's name (default: the function's name).
        title: a human-readable title.
        read_only: the tool changes nothing (`readOnlyHint`); safe to retry.
        idempotent: calling it twice with the same arguments is harmless (`idempotentHint`).
        side_effect: the tool changes something outside that must not happen twice.
        destructive: it may destroy data (`destructiveHint`).
        open_world: it talks to an open world, e.g. the web (`openWorldHint`).
        timeout_s: its time limit per call (default: the TOOL_TIMEOUT_S setting).
        reconcile: for a side-effecting tool, `fn(idempotency_key)` (sync or async) that
            looks at the outside system and answers "done", "not_done" or "unknown" for a
            call whose outcome is in doubt; a retry of that key then settles itself.
        scopes: OAuth scopes a caller needs for this tool (HTTP with AUTH=oauth); a token
            without one gets HTTP 403 `insufficient_scope` naming it (2026-07-28: the client
            can step up) or a `forbidden` result naming it (2025-11-25).
        max_result_bytes: the largest result of this tool (default: the MAX_RESULT_BYTES
            setting); longer text is cut, larger structured content is `too_large`.
        rate_limit: calls per minute each caller may make to this tool (a token bucket,
            beside the RATE_LIMIT setting); more are `rate_limited` with a `retry_after`.
        max_concurrency: calls of this tool that may run at once (beside the
            MAX_CONCURRENT_CALLS setting); more are `rate_limited`, not queued.
        task_support: whether a call may run as a durable task (the tasks extension):
            "forbidden" (the default: always a normal call), "optional" (a task when the
            client declared the extension, else a normal call) or "required" (a task; a
            client without the extension gets -32021). The body is the same function.
        input_schema: the tool's input schema as a JSON Schema document (2020-12 unless its
            `$schema` says otherwise), served in tools/list as written instead of the one made
            from the signature, and validated strictly before the tool runs. Its top-level
            properties are the function's parameters, which receive the arguments by name as
            JSON values; a parameter the schema does not require needs a default. Checked at
            start-up: an invalid schema stops the server, naming the tool.
        headers: parameters mirrored into HTTP headers (SEP-2243), `{"region": "Region"}`: the
            schema says `"x-mcp-header": "Region"` on `region`, clients send its value as
            `Mcp-Param-Region` too (so a gateway can route on it), and a 2026-07-28 request
            whose header is missing or disagrees with the argument is refused (HTTP 400, -32020).
            Only str, int and bool parameters; names of letters, digits and `-`.
    """
    if read_only and side_effect:
        raise TypeError("a tool cannot be both read_only and side_effect: choose one")
    if timeout_s is not None and timeout_s <= 0:
        raise TypeError(f"timeout_s must be positive, got {timeout_s!r}")
    if max_result_bytes is not None and (
        isinstance(max_result_bytes, bool)
        or not isinstance(max_result_bytes, int)
        or max_result_bytes < MIN_RESULT_BYTES
    ):
        raise TypeError(
            f"max_result_bytes must be an integer of at least {MIN_RESULT_BYTES}, got {max_result_bytes!r}"
        )
    if rate_limit is not None and not _finite_positive(rate_limit):
        raise TypeError(f"rate_limit must be a positive number of calls per minute, got {rate_limit!r}")
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1
    ):
        raise TypeError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
    if task_support not in TASK_SUPPORTS:
        raise TypeError(f"task_support must be one of {', '.join(TASK_SUPPORTS)}, got {task_support!r}")
    if input_schema is not None and not isinstance(input_schema, Mapping):
        kind = type(input_schema).__name__
        raise TypeError(f"input_schema must be a JSON Schema object (a dict), got {kind}")
    if headers is not None and not (
        isinstance(headers, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise TypeError('headers must map parameter names to header names, e.g. {"region": "Region"}')
    if reconcile is not None and not side_effect:
        raise TypeError("reconcile is for side_effect=True tools: only they have keys in doubt")

    def mark(fn: F, tool_name: str | None = None) -> F:
        spec = ToolSpec(
            fn=fn,
            name=tool_name or fn.__name__,
            title=title,
            read_only=read_only,
            idempotent=idempotent,
            side_effect=side_effect,
            destructive=destructive,
            open_world=open_world,
            timeout_s=timeout_s,
            reconcile=reconcile,
            scopes=(scopes,) if isinstance(scopes, str) else tuple(scopes),
            max_result_bytes=max_result_bytes,
            rate_limit=rate_limit,
            max_concurrency=max_concurrency,
            task_support=task_support,
            input_schema=input_schema,
            headers=dict(headers or {}),
        )
        setattr(fn, SPEC_ATTRIBUTE, spec)
        return fn

    if callable(name):
        return mark(name)
    return lambda fn: mark(fn, name)


def _finite_positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def spec_of(obj: object) -> ToolSpec | None:
    """The ToolSpec `@tool` attached to obj, if any."""
    spec = getattr(obj, SPEC_ATTRIBUTE, None)
    return spec if isinstance(spec, ToolSpec) else None
