"""`ServedTool.attempt`, the call's fast path, against its plain twin: the SDK's own `Tool.run`.

The fast path skips what the core already did (argument validation) and looks the output
adapter up once; for every return value and every failure it must give what `Tool.run`
gives: the same result, or the same exception with the same message and cause.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from resilient_mcp import ToolInputError, TransientError, tool
from resilient_mcp.authoring.tool import spec_of
from resilient_mcp.calls.served_tool import ServedTool, build_tool

pytestmark = pytest.mark.anyio
NO_LIMIT = 10**9  # the size limit is the fast path's own addition, not the twin's


class Reading(BaseModel):
    celsius: float
    place: str = "here"


RETURNED: list[Any] = [None]  # what the tools below return (or raise), set by each example


def returned() -> Any:
    if isinstance(RETURNED[0], BaseException):
        raise RETURNED[0]
    return RETURNED[0]


@tool
def as_text(n: int) -> str:
    """Text."""
    return returned()  # type: ignore[no-any-return]


@tool
async def as_number(n: int, label: str = "x") -> int:
    """A number."""
    return returned()  # type: ignore[no-any-return]


@tool
def as_mapping(n: int) -> dict[str, int]:
    """A mapping."""
    return returned()  # type: ignore[no-any-return]


@tool
async def as_list(n: int) -> list[str]:
    """A list."""
    return returned()  # type: ignore[no-any-return]


@tool
def as_model(n: int) -> Reading:
    """A model."""
    return returned()  # type: ignore[no-any-return]


@tool
async def as_result(n: int) -> CallToolResult:
    """A whole result."""
    return returned()  # type: ignore[no-any-return]


@tool
def unannotated(n: int):  # type: ignore[no-untyped-def]
    """Whatever it returns."""
    return returned()


TOOLS = [as_text, as_number, as_mapping, as_list, as_model, as_result, unannotated]
whole_results = st.builds(
    lambda text: CallToolResult(content=[TextContent(type="text", text=text)]), st.text(max_size=8)
)
values = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(st.text(max_size=5), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=4),
    st.builds(Reading, celsius=st.floats(allow_nan=False, allow_infinity=False), place=st.text(max_size=8)),
    whole_results,
)
failures = st.sampled_from(
    [
        ToolError("the tool said no"),
        ValueError("a crash with /home/someone/secret in it"),
        TransientError("try again"),
        ToolInputError("n must be positive"),
        MCPError(-32042, "a protocol answer"),
        KeyError("missing"),
    ]
)


def outcome_of_run(result: Any) -> Any:
    return result.model_dump(by_alias=True, exclude_none=True) if isinstance(result, BaseModel) else result


def outcome_of_raise(exc: BaseException) -> tuple[str, str, str]:
    return type(exc).__name__, str(exc), type(exc.__cause__).__name__


async def both(served: ServedTool, arguments: dict[str, Any]) -> tuple[Any, Any]:
    problem, validated = served.validator.check(arguments)
    assert problem is None
    assert validated is not None
    answers = []
    for run in (
        lambda: served.attempt(arguments, validated, None, NO_LIMIT),
        lambda: served.tool.run(arguments, Context(), convert_result=True),
    ):
        try:
            answers.append(outcome_of_run(await run()))
        except Exception as exc:
            answers.append(outcome_of_raise(exc))
    return answers[0], answers[1]


@pytest.mark.parametrize("function", TOOLS, ids=lambda function: function.__name__)
@settings(max_examples=60, deadline=None)
@given(value=st.one_of(values, failures), n=st.integers(min_value=-5, max_value=5))
async def test_the_fast_attempt_answers_as_the_sdks_tool_run(function: Any, value: Any, n: int) -> None:
    spec = spec_of(function)
    assert spec is not None
    _, served = build_tool(spec, strict=True)
    RETURNED[0] = value
    fast, plain = await both(served, {"n": n})
    assert fast == plain
