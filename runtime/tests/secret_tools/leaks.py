"""A tool, a resource, prompts and a completer that fail with the text they are given, in every
way each can fail (test_secrets_end_to_end)."""

from __future__ import annotations

from typing import Annotated, Literal

import structlog
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

from resilient_mcp import (
    Part,
    PartialResult,
    TerminalError,
    ToolInputError,
    TransientError,
    completion,
    prompt,
    resource,
    tool,
)

# The launcher's directory (tests/core) is on the server's sys.path: a resource's URI names a
# text of the corpus rather than carrying it.
from secrets_corpus import DATA_PASSWORD, FORMS, NEGATIVES, PATHS, PROTOCOL_ERROR_CODE, in_exception_group

PLANTED = {form.name: form.text for form in (*FORMS, *PATHS)} | {
    f"negative-{index}": text for index, text in enumerate(NEGATIVES)
}

How = Literal[
    "value",
    "tool_input",
    "terminal",
    "transient",
    "sdk_tool_error",
    "partial",
    "internal",
    "validation",
    "validation_shown",
    "logged",
    "mcp_error",
    "group",
]


class Port(BaseModel):
    port: int


def _validation_error(text: str) -> Exception:
    try:
        Port.model_validate({"port": text})
    except Exception as error:  # pydantic's ValidationError, its long input cut in the middle
        return error
    raise AssertionError("validated")


def _protocol_error(text: str) -> MCPError:
    """An MCPError raised on purpose, the text in its message and in its data, nested."""
    return MCPError(
        PROTOCOL_ERROR_CODE, text, {"detail": text, "attempts": [{"body": text}], "password": DATA_PASSWORD}
    )


# Not read_only: a transient failure is answered at once, not retried.
@tool
def leak(
    how: Annotated[How, Field(description="How to fail")],
    text: Annotated[str, Field(description="What the failure says")],
    tag: Annotated[str, Field(description="Names the call in the log")],
) -> str:
    """Fail with `text` in the way `how` names (or log it, nested, and succeed)."""
    structlog.get_logger("leaks").info("planted", tag=tag)
    if how == "value":
        raise ValueError(text)
    if how == "tool_input":
        raise ToolInputError(text)
    if how == "terminal":
        raise TerminalError(text)
    if how == "transient":
        raise TransientError(text)
    if how == "sdk_tool_error":
        raise ToolError(text)
    if how == "partial":
        raise PartialResult([Part("first", ok=True, result="done"), Part("second", ok=False, error=text)])
    if how == "internal":
        raise RuntimeError(text)
    if how == "validation":
        raise _validation_error(text)
    if how == "validation_shown":
        raise ToolInputError(f"the settings are invalid: {_validation_error(text)}")
    if how == "mcp_error":
        raise _protocol_error(text)
    if how == "group":
        raise in_exception_group(text)
    structlog.get_logger("leaks").warning(
        "upstream_refused", detail=text, request={"attempts": [{"body": text}], "headers": {"x-trace": text}}
    )
    return "logged"


@tool(read_only=True)
def count_to(count: Annotated[int, Field(description="How far to count")]) -> int:
    """Takes an integer: a text given instead is refused by the schema, its value quoted."""
    return count


@resource("leak://{how}/{name}", mime_type="text/plain")
def leak_resource(how: str, name: str) -> str:
    """Fail with the corpus's text `name` in the way `how` names."""
    text = PLANTED[name]
    if how == "error":
        raise ResourceError(text)
    if how == "transient":
        raise TransientError(text)
    if how == "mcp_error":
        raise _protocol_error(text)
    if how == "group":
        raise in_exception_group(text)
    raise AssertionError(f"no way to fail called {how!r}")


@prompt
def leak_prompt(text: str) -> str:
    """Fail with `text`: an MCPError raised on purpose."""
    raise _protocol_error(text)


@prompt
def count_prompt(count: int) -> str:
    """Takes an integer: a text given instead is refused, its value quoted."""
    return f"Count to {count}."


@completion("leak_prompt")
def complete_leak(argument: str, value: str, context: dict[str, str]) -> list[str]:
    """Fail with what was typed: an MCPError raised on purpose."""
    raise _protocol_error(value)
