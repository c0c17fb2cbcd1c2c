"""Functions that cannot be served as written are refused at start-up, not served wrong.

A tool's arguments are one JSON object of named, typed fields, described by its docstring: a
`*args` would become a required string named `args`, an unannotated parameter a string, a
missing docstring a tool the model cannot choose, an `idempotency_key` on a tool without
`side_effect=True` a key that protects nothing, and a declared `input_schema` that is not valid
JSON Schema or does not list the function's parameters a tool no call could reach. A prompt's
arguments are named strings: only its variadic and positional-only parameters cannot be filled.
(Resources: the SDK already refuses parameters that are not the URI template's.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.primitives import PromptSpec
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.input_schema import declared_schema_problems
from resilient_mcp.store import KEY_ARGUMENT

Problem = tuple[str, str]  # what is wrong, how to fix it

_NAMED = "replace *args and **kwargs with named parameters (the arguments are one object of named fields)"
_POSITIONAL_ONLY = "drop the `/`: the arguments arrive by name"
_ANNOTATE = "annotate every parameter (`city: str`: the type is its schema; the context is `ctx: Context`)"
_DOCSTRING = "add a docstring: it is the tool's description, what the model reads to choose it"
_SCHEMA = (
    "make input_schema a valid JSON Schema (2020-12) of type object whose top-level properties are the "
    "function's parameters, with defaults for those it does not require"
)
_KEY = "add side_effect=True to its @tool(...) so a call runs once per key, or rename the parameter"


def check_signatures(tools: Iterable[ToolSpec], prompts: Iterable[PromptSpec]) -> None:
    """Raise one FatalError naming every tool and prompt (module:function) that cannot be served."""
    found = [(f"tool {_where(spec.fn)}", _tool_problems(spec)) for spec in tools]
    found += [(f"prompt {_where(spec.fn)}", _parameter_problems(spec.fn)) for spec in prompts]
    found = [(where, problems) for where, problems in found if problems]
    if not found:
        return
    what = "; ".join(f"{where} {', '.join(problem for problem, _ in problems)}" for where, problems in found)
    fixes = dict.fromkeys(fix for _, problems in found for _, fix in problems)  # each once, in order
    raise FatalError(f"cannot be served as written: {what}", "; ".join(fixes))


def _tool_problems(spec: ToolSpec) -> list[Problem]:
    problems = _parameter_problems(spec.fn, annotated=True)
    if not spec.description.strip():
        problems.append(("has no docstring", _DOCSTRING))
    if not spec.side_effect and KEY_ARGUMENT in inspect.signature(spec.fn).parameters:
        problems.append((f"takes {KEY_ARGUMENT} without side_effect=True", _KEY))
    problems += [(problem, _SCHEMA) for problem in declared_schema_problems(spec)]
    return problems


def _parameter_problems(fn: Callable[..., Any], *, annotated: bool = False) -> list[Problem]:
    problems: list[Problem] = []
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            problems.append((f"takes *{parameter.name}", _NAMED))
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            problems.append((f"takes **{parameter.name}", _NAMED))
        elif parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            problems.append((f"takes {parameter.name!r} positionally only", _POSITIONAL_ONLY))
        elif annotated and parameter.annotation is inspect.Parameter.empty:
            problems.append((f"has no type annotation on {parameter.name!r}", _ANNOTATE))
    return problems


def _where(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"
