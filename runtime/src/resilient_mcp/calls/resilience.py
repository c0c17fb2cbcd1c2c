"""How a tool's exception becomes a category, and how transient failures are retried."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from resilient_mcp.authoring.errors import (
    FatalError,
    PartialResult,
    ResultTooLargeError,
    TerminalError,
    ToolInputError,
    TransientError,
)
from resilient_mcp.authoring.outcomes import Attempts, Failure
from resilient_mcp.calls.validation import describe_validation_error
from resilient_mcp.project import this_project
from resilient_mcp.telemetry.redaction import strip_paths
from resilient_mcp.telemetry.text import clip

_BACKOFF_BASE_S = 0.1
_BACKOFF_CAP_S = 2.0
_MAX_MESSAGE_CHARS = 500


def classify(
    exc: BaseException, tool_name: str, correlation_id: str, *, side_effect: bool = False
) -> Failure:
    """Map what the SDK raised (the tool's exception is its __cause__) to a category.

    For a side-effecting tool, only the errors that say how it ended (TerminalError,
    PartialResult, a result too large to send) or that promise nothing was applied
    (ToolInputError, TransientError) keep their category; anything else came from a body
    that may have had its effect.
    """
    cause = exc.__cause__ if isinstance(exc, ToolError) and exc.__cause__ is not None else exc
    if isinstance(exc, ToolError) and not isinstance(exc, UnexpectedToolError):
        if isinstance(cause, ValidationError):  # the SDK's own (lenient) argument validation
            return Failure("invalid_input", describe_validation_error(cause), cause)
        # The tool raised the SDK's ToolError on purpose: its message is for the model.
        prefix = f"Error executing tool {tool_name}: "
        return Failure("terminal", clip(str(exc).removeprefix(prefix), _MAX_MESSAGE_CHARS), exc)
    if isinstance(cause, PartialResult):
        return Failure("partial", str(cause), cause)
    if isinstance(cause, FatalError | SystemExit | KeyboardInterrupt):
        return Failure(
            "fatal",
            "the server hit an unrecoverable error and is stopping; "
            "the client should restart it before calling again",
            cause,
        )
    if isinstance(cause, TransientError):
        message = clip(f"{cause} (temporary: retry later)", _MAX_MESSAGE_CHARS)
        return Failure("transient", message, cause, cause.retry_after)
    if isinstance(cause, TerminalError):
        return Failure("terminal", clip(str(cause), _MAX_MESSAGE_CHARS), cause)
    if isinstance(cause, ToolInputError):
        message = clip(str(cause), _MAX_MESSAGE_CHARS)
        return Failure("invalid_input", message or "the arguments were rejected", cause)
    if isinstance(cause, ResultTooLargeError):  # the tool finished; only its answer was refused
        return Failure("too_large", str(cause), cause)
    if side_effect:
        return Failure("in_doubt", in_doubt_message(tool_name, "it failed part-way"), cause)
    if isinstance(cause, ConnectionError | TimeoutError):
        # The exception text may name hosts or paths: the model gets the kind only.
        return Failure("transient", "a dependency did not answer; this is temporary: retry later", cause)
    if isinstance(cause, ValueError) and not isinstance(cause, ValidationError | UnicodeError):
        # Often a library's text: paths in it describe the server's machine, not the arguments.
        message = clip(strip_paths(str(cause)), _MAX_MESSAGE_CHARS)
        return Failure("invalid_input", message or "the arguments were rejected", cause)
    return Failure(
        "internal",
        f"the tool failed unexpectedly; the details are in the server log under correlation id "
        f"{correlation_id}: report it rather than retrying",
        cause,
    )


def in_doubt_message(tool_name: str, what_happened: str) -> str:
    """What the model is told when a side effect may or may not have happened."""
    return (
        f"{tool_name} may or may not have taken effect ({what_happened}); it will not be run again "
        "on its own. Check the outside system before doing anything else, and do not "
        f"repeat the operation with a new key until you know; an operator can settle the key with "
        f"`{this_project().slug} keys settle`"
    )


def backoff_s(attempt: int, retry_after_s: float | None) -> float:
    """Exponential backoff with jitter (half to full of the step), never below a server's hint."""
    step = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempt - 1))
    delay: float = step * random.uniform(0.5, 1.0)
    return max(delay, retry_after_s or 0.0)


async def run_with_retries(
    attempt: Callable[..., Awaitable[CallToolResult | InputRequiredResult]],
    args: tuple[Any, ...],
    outcome: Attempts,
    *,
    tool_name: str,
    correlation_id: str,
    side_effect: bool,
    may_retry: Callable[[Failure], bool],
    max_attempts: int,
    max_total_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> None:
    """Run `attempt(*args)` until it succeeds, fails for good, or the retry bounds are spent.

    Only failures that `may_retry` accepts are retried; attempts and the total time
    (including the waits, never shorter than a `retry_after` hint) are both bounded.
    `outcome` is filled in place, so a caller whose time limit cancels this still
    knows how many attempts ran. `clock` and `sleep` are the tests' to replace.
    """
    started = clock()
    while True:
        outcome.count += 1
        try:
            outcome.result = await attempt(*args)
            outcome.failure = None
            return
        except (anyio.get_cancelled_exc_class(), MCPError):
            raise  # cancellation, and a protocol error the tool raised on purpose
        except Exception as exc:
            outcome.failure = classify(exc, tool_name, correlation_id, side_effect=side_effect)
        if not may_retry(outcome.failure) or outcome.count >= max_attempts:
            return
        delay = backoff_s(outcome.count, outcome.failure.retry_after_s)
        if clock() - started + delay > max_total_s:
            return
        await sleep(delay)
