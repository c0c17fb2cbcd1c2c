"""`@resource`, `@prompt` and `@completion`: the other MCP primitives, declared like `@tool`.

Each decorator only attaches a spec; the app factory finds marked functions in the tools/
modules (`server.discovery`) and the server serves them through the same core as tools
(`calls.primitive_calls`), so a module imported twice never registers anything twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from resilient_mcp.records import record

F = TypeVar("F", bound=Callable[..., Any])
SPEC_ATTRIBUTE = "__mcp_primitive_spec__"
MAX_COMPLETION_VALUES = 100  # what completion/complete may send at once (the spec's limit)

# `fn(argument, value, context) -> list[str]`, sync or async.
Completer = Callable[[str, str, dict[str, str]], list[str] | Awaitable[list[str]]]


def _description(fn: Callable[..., Any]) -> str:
    return inspect.getdoc(fn) or ""


@record
class ResourceSpec:
    """What `@resource` recorded: a fixed URI, or a URI template with `{params}`."""

    fn: Callable[..., Any]
    uri: str
    name: str
    title: str | None = None
    mime_type: str | None = None

    @property
    def description(self) -> str:
        return _description(self.fn)

    @property
    def is_template(self) -> bool:
        return "{" in self.uri


@record
class PromptSpec:
    """What `@prompt` recorded."""

    fn: Callable[..., Any]
    name: str
    title: str | None = None

    @property
    def description(self) -> str:
        return _description(self.fn)


@record
class CompletionSpec:
    """What `@completion` recorded: the completer of one prompt's or template's arguments."""

    fn: Completer
    target: str  # a prompt name, or a resource template's URI

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))


def resource(
    uri: str, *, name: str | None = None, title: str | None = None, mime_type: str | None = None
) -> Callable[[F], F]:
    """Mark a function as an MCP resource at `uri` (fixed, or a template such as `notes://{id}`).

    The docstring is its description. A template's `{params}` are the function's parameters
    (strings from the URI, validated against their annotations). It returns `str` (text)
    or `bytes` (binary, sent base64); raise `ToolInputError` for a URI that names nothing,
    `TransientError` when a dependency is down, as in a tool.
    """
    if not isinstance(uri, str) or "://" not in uri:
        raise TypeError(f"resource needs a URI with a scheme (e.g. 'notes://{{id}}'), got {uri!r}")

    def mark(fn: F) -> F:
        # The template's parameters are checked against the function's when the server is built.
        spec = ResourceSpec(fn=fn, uri=uri, name=name or fn.__name__, title=title, mime_type=mime_type)
        setattr(fn, SPEC_ATTRIBUTE, spec)
        return fn

    return mark


@overload
def prompt(name: F, /) -> F: ...


@overload
def prompt(name: str | None = None, *, title: str | None = None) -> Callable[[F], F]: ...


def prompt(name: str | Callable[..., Any] | None = None, *, title: str | None = None) -> Any:
    """Mark a function as an MCP prompt; `@prompt` and `@prompt(...)` both work.

    The docstring is its description, its parameters (strings) are the prompt's arguments.
    It returns a string, a message, or a list of messages (see the SDK's
    `mcp.server.mcpserver.prompts.base`).
    """

    def mark(fn: F, prompt_name: str | None = None) -> F:
        setattr(fn, SPEC_ATTRIBUTE, PromptSpec(fn=fn, name=prompt_name or fn.__name__, title=title))
        return fn

    if callable(name):
        return mark(name)
    return lambda fn: mark(fn, name)


def completion(target: str) -> Callable[[F], F]:
    """Mark `fn(argument, value, context) -> list[str]` (sync or async) as the completer of
    `target`: a prompt's name, or a resource template's URI.

    `context` holds the arguments the client already filled in. At most
    100 values are sent; the client is told when there are more.
    """
    if not isinstance(target, str) or not target:
        raise TypeError(f"completion needs a prompt name or a resource template URI, got {target!r}")

    def mark(fn: F) -> F:
        setattr(fn, SPEC_ATTRIBUTE, CompletionSpec(fn=fn, target=target))
        return fn

    return mark


def primitive_of(obj: object) -> ResourceSpec | PromptSpec | CompletionSpec | None:
    """The spec `@resource`, `@prompt` or `@completion` attached to obj, if any."""
    spec = getattr(obj, SPEC_ATTRIBUTE, None)
    return spec if isinstance(spec, ResourceSpec | PromptSpec | CompletionSpec) else None


@record
class Primitives:
    """The resources, prompts and completers of the tools/ modules, in discovery order."""

    resources: tuple[ResourceSpec, ...] = ()
    prompts: tuple[PromptSpec, ...] = ()
    completions: tuple[CompletionSpec, ...] = ()
