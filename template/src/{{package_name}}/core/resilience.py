# Template-owned: `copier update` replaces this file; put your code in tools/.
"""How a tool's exception becomes a category, and how transient failures are retried."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from pydantic import ValidationError

from .errors import FatalError, TerminalError, ToolInputError, TransientError
from .outcomes import Category, PartialResult, failure, partial_failure
from .validation import describe_validation_error

_BACKOFF_BASE_S = 0.1
_BACKOFF_CAP_S = 2.0
_MAX_MESSAGE_CHARS = 500


@dataclass(frozen=True)
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


def classify(exc: Exception, tool_name: str, correlation_id: str) -> Failure:
    """Map what the SDK raised (the tool's exception is its __cause__) to a category."""
    cause = exc.__cause__ if isinstance(exc, ToolError) and exc.__cause__ is not None else exc
    if isinstance(exc, ToolError) and not isinstance(exc, UnexpectedToolError):
        if isinstance(cause, ValidationError):  # the SDK's own (lenient) argument validation
            return Failure("invalid_input", describe_validation_error(cause), cause)
        # The tool raised the SDK's ToolError on purpose: its message is for the model.
        prefix = f"Error executing tool {tool_name}: "
        return Failure("terminal", _clip(str(exc).removeprefix(prefix)), exc)
    if isinstance(cause, PartialResult):
        return Failure("partial", str(cause), cause)
    if isinstance(cause, FatalError):
        return Failure(
            "fatal",
            "the server hit an unrecoverable error and is stopping; "
            "the client should restart it before calling again",
            cause,
        )
    if isinstance(cause, TransientError):
        return Failure("transient", _clip(f"{cause} (temporary: retry later)"), cause, cause.retry_after)
    if isinstance(cause, ConnectionError | TimeoutError):
        # The exception text may name hosts or paths: the model gets the kind only.
        return Failure("transient", "a dependency did not answer; this is temporary: retry later", cause)
    if isinstance(cause, TerminalError):
        return Failure("terminal", _clip(str(cause)), cause)
    if isinstance(cause, ToolInputError) or (
        isinstance(cause, ValueError) and not isinstance(cause, ValidationError | UnicodeError)
    ):
        return Failure("invalid_input", _clip(str(cause)) or "the arguments were rejected", cause)
    return Failure(
        "internal",
        f"the tool failed unexpectedly; the details are in the server log under correlation id "
        f"{correlation_id}: report it rather than retrying",
        cause,
    )


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 3] + "..."


def backoff_s(attempt: int, retry_after_s: float | None) -> float:
    """Exponential backoff with jitter (half to full of the step), never below a server's hint."""
    step = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempt - 1))
    delay: float = step * random.uniform(0.5, 1.0)
    return max(delay, retry_after_s or 0.0)


@dataclass
class Attempts:
    """The outcome of running a call with bounded retries."""

    result: CallToolResult | None = None
    failure: Failure | None = None
    count: int = 0


async def run_with_retries(
    attempt: Callable[[], Awaitable[CallToolResult]],
    outcome: Attempts,
    *,
    tool_name: str,
    correlation_id: str,
    may_retry: bool,
    max_attempts: int,
    max_total_s: float,
) -> None:
    """Run `attempt` until it succeeds, fails for good, or the retry bounds are spent.

    Only transient failures are retried, and only when `may_retry` (the tool is safe to
    repeat); attempts and the total time (including the waits) are both bounded.
    `outcome` is filled in place, so a caller whose time limit cancels this still
    knows how many attempts ran.
    """
    started = time.monotonic()
    while True:
        outcome.count += 1
        try:
            outcome.result = await attempt()
            outcome.failure = None
            return
        except (anyio.get_cancelled_exc_class(), MCPError):
            raise  # cancellation, and a protocol error the tool raised on purpose
        except Exception as exc:
            outcome.failure = classify(exc, tool_name, correlation_id)
        if outcome.failure.category != "transient" or not may_retry or outcome.count >= max_attempts:
            return
        delay = backoff_s(outcome.count, outcome.failure.retry_after_s)
        if time.monotonic() - started + delay > max_total_s:
            return
        await anyio.sleep(delay)
