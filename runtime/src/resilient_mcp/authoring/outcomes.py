"""What a failed call looks like to the client: one shape, one table of categories.

Every failure is an `isError` CallToolResult whose first text block reads
`<category>: <message>` and whose `_meta.error` says the category, whether a retry
can help, and the correlation id that finds the call in the server's log. An `MCPError`
raised on purpose is answered as that JSON-RPC error, its texts shown as every message is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcp.shared.exceptions import MCPError
from mcp.types import URL_ELICITATION_REQUIRED, CallToolResult, InputRequiredResult, TextContent
from pydantic_core import to_jsonable_python

from resilient_mcp.authoring.errors import Part, PartialResult, ToolInputError
from resilient_mcp.records import record
from resilient_mcp.telemetry.redaction import redact_fields, redact_text, strip_paths

Category = Literal[
    "unknown_tool",
    "invalid_input",
    "transient",
    "timeout",
    "conflict",
    "in_doubt",
    "terminal",
    "internal",
    "fatal",
    "partial",
    "forbidden",
    "too_large",
    "rate_limited",
]

# The JSON-RPC code for "rate limited" that SEP-3304 proposes (open): an HTTP 429's, and a
# refused resource read's, prompt get's or completion's (a tool's refusal is its result).
RATE_LIMITED_CODE = -32023

# Whether retrying the same call can help, by category (conflict: only while in progress).
RETRYABLE: dict[Category, bool] = {
    "unknown_tool": False,
    "invalid_input": False,
    "transient": True,
    "timeout": True,
    "conflict": False,
    "in_doubt": False,
    "terminal": False,
    "internal": False,
    "fatal": False,
    "partial": False,
    "forbidden": False,
    "too_large": False,
    "rate_limited": True,
}


def shown(message: str) -> str:
    """A message as the model may see it: every one, the owner's own included, loses
    secret-shaped values and the server's absolute file paths (whatever raised it)."""
    return strip_paths(redact_text(message))


def shown_protocol_error(error: MCPError) -> MCPError:
    """An `MCPError` raised on purpose (by a tool, a resource, a prompt or a completer), as the
    client may see it: its message shown as every other, its data's texts too and its
    secret-named fields blanked. Changed in place: the SDK answers with the exception it gets.

    The data of `UrlElicitationRequiredError` (-32042) is left whole: its URLs are for the user
    to open, as they would be in an elicitation request.
    """
    code, data = error.error.code, error.error.data
    if data is not None and code != URL_ELICITATION_REQUIRED:
        data = redact_fields(to_jsonable_python(data, fallback=repr), shown)
    message = shown(error.error.message)
    error.error = error.error.model_copy(update={"message": message, "data": data})
    error.args = (code, message, data)
    return error


def error_meta(
    category: Category,
    correlation_id: str,
    *,
    retryable: bool | None = None,
    retry_after_s: float | None = None,
) -> dict[str, Any]:
    """What a failure tells a client besides its message: a tool result's `_meta.error`, a
    resource's or prompt's JSON-RPC `error.data`."""
    error: dict[str, Any] = {
        "category": category,
        "retryable": RETRYABLE[category] if retryable is None else retryable,
        "correlation_id": correlation_id,
    }
    if retry_after_s is not None:
        error["retry_after_s"] = round(retry_after_s, 3)
    return error


def failure(
    category: Category,
    message: str,
    correlation_id: str,
    *,
    retryable: bool | None = None,
    retry_after_s: float | None = None,
    structured: dict[str, Any] | None = None,
    content: Sequence[TextContent] = (),
) -> CallToolResult:
    """Build the one shape every failed call has."""
    error = error_meta(category, correlation_id, retryable=retryable, retry_after_s=retry_after_s)
    return CallToolResult(
        content=[TextContent(type="text", text=f"{category}: {shown(message)}"), *content],
        structured_content=structured,
        is_error=True,
        _meta={"error": error},
    )


def partial_failure(parts: Sequence[Part], correlation_id: str) -> CallToolResult:
    """Content for the parts that worked, isError, and a per-part status in structured content."""
    failed = [p for p in parts if not p.ok]
    message = f"{len(failed)} of {len(parts)} parts failed ({', '.join(p.name for p in failed)}); "
    message += "the other parts succeeded: do not redo them, retry only the failed ones"
    succeeded = [TextContent(type="text", text=f"{p.name}: {p.result}") for p in parts if p.ok]
    status = {
        p.name: {"status": "ok", "result": p.result} if p.ok else {"status": "error", "error": shown(p.error)}
        for p in parts
    }
    return failure(
        "partial",
        message,
        correlation_id,
        retryable=any(p.retryable for p in failed),
        structured={"parts": status},
        content=succeeded,
    )


@record
class Failure:
    """A classified failure: what the client is told, and the exception behind it."""

    category: Category
    message: str
    error: BaseException
    retry_after_s: float | None = None
    retryable: bool | None = None  # None: as the category says

    @classmethod
    def refusal(
        cls,
        category: Category,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after_s: float | None = None,
    ) -> Failure:
        """A failure found by the server itself, before or around the tool."""
        return cls(category, message, ToolInputError(message), retry_after_s, retryable)

    def result(self, correlation_id: str) -> CallToolResult:
        if isinstance(self.error, PartialResult):
            return partial_failure(self.error.parts, correlation_id)
        return failure(
            self.category,
            self.message,
            correlation_id,
            retryable=self.retryable,
            retry_after_s=self.retry_after_s,
        )


@dataclass
class Attempts:
    """The outcome of running a call with bounded retries."""

    result: CallToolResult | InputRequiredResult | None = None  # InputRequiredResult: asks the client first
    failure: Failure | None = None
    count: int = 0
    replayed: bool = False  # the result is a stored one: the tool did not run
