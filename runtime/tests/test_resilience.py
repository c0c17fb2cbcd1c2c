"""How a tool's exception becomes a category, and how transient ones are retried (in-process, fake clock)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent

from resilient_mcp.authoring.errors import (
    FatalError,
    PartialResult,
    ResultTooLargeError,
    TerminalError,
    ToolInputError,
    TransientError,
)
from resilient_mcp.authoring.outcomes import Attempts, Failure
from resilient_mcp.calls.resilience import backoff_s, classify, run_with_retries

OK = CallToolResult(content=[TextContent(type="text", text="done")])


def wrapped(cause: BaseException) -> UnexpectedToolError:
    """What the SDK raises around a tool's exception."""
    try:
        raise UnexpectedToolError("Error executing tool lookup") from cause
    except UnexpectedToolError as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "category"),
    [
        (TransientError("busy"), "transient"),
        (TerminalError("account frozen"), "terminal"),
        (ToolInputError("no such customer"), "invalid_input"),
        (FatalError("the database is gone"), "fatal"),
        (SystemExit(3), "fatal"),
        (ResultTooLargeError("too big"), "too_large"),
        (ConnectionError("db.internal:5432 refused"), "transient"),
        (TimeoutError("read timed out"), "transient"),
        (ValueError("bad date"), "invalid_input"),
        (RuntimeError("bug"), "internal"),
        (KeyError("k"), "internal"),
    ],
)
def test_each_exception_has_its_category(cause: BaseException, category: str) -> None:
    assert classify(wrapped(cause), "lookup", "c1").category == category


@pytest.mark.parametrize("cause", [RuntimeError("bug"), ConnectionError("reset"), ValueError("odd")])
def test_a_side_effect_that_failed_part_way_is_in_doubt(cause: Exception) -> None:
    failure = classify(wrapped(cause), "charge", "c1", side_effect=True)
    assert failure.category == "in_doubt"
    assert "may or may not have taken effect" in failure.message


@pytest.mark.parametrize(
    "cause", [TransientError("busy"), TerminalError("no"), ToolInputError("bad"), PartialResult([])]
)
def test_a_side_effect_keeps_the_categories_that_say_how_it_ended(cause: Exception) -> None:
    assert classify(wrapped(cause), "charge", "c1", side_effect=True).category != "in_doubt"


def test_what_the_model_is_told_hides_hosts_paths_and_internals() -> None:
    connection = classify(wrapped(ConnectionError("db.internal:5432 refused")), "lookup", "c1")
    value = classify(wrapped(ValueError("cannot parse /srv/app/conf/rates.toml")), "lookup", "c1")
    internal = classify(wrapped(RuntimeError("secret internals")), "lookup", "c7")

    assert "db.internal" not in connection.message
    assert "/srv/app" not in value.message
    assert "[path]" in value.message
    assert "secret internals" not in internal.message
    assert "c7" in internal.message  # the correlation id finds the traceback in the log


def test_a_long_message_is_clipped() -> None:
    failure = classify(wrapped(TerminalError("x" * 2000)), "lookup", "c1")
    assert len(failure.message) == 500
    assert failure.message.endswith("...")


def test_a_transient_errors_retry_after_is_kept() -> None:
    failure = classify(wrapped(TransientError("busy", retry_after=7.5)), "lookup", "c1")
    assert failure.retry_after_s == 7.5


def test_the_sdks_own_tool_error_is_terminal_with_its_message() -> None:
    failure = classify(ToolError("Error executing tool lookup: no such page"), "lookup", "c1")
    assert (failure.category, failure.message) == ("terminal", "no such page")


@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_doubles_with_jitter_up_to_its_cap(attempt: int) -> None:
    step = min(2.0, 0.1 * 2 ** (attempt - 1))
    for _ in range(50):
        assert step / 2 <= backoff_s(attempt, None) <= step


def test_backoff_is_never_shorter_than_the_hint() -> None:
    assert backoff_s(1, 30.0) == 30.0


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Flaky:
    """Fails `failures` times with `error`, then answers OK."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> CallToolResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise wrapped(self.error)
        return OK


def only_transient(failure: Failure) -> bool:
    return failure.category == "transient"


async def retried(attempt: Flaky, clock: FakeClock, **bounds: Any) -> Attempts:
    outcome = Attempts()
    await run_with_retries(
        attempt,
        (),
        outcome,
        tool_name="lookup",
        correlation_id="c1",
        side_effect=False,
        may_retry=bounds.pop("may_retry", only_transient),
        max_attempts=bounds.pop("max_attempts", 4),
        max_total_s=bounds.pop("max_total_s", 10.0),
        clock=clock,
        sleep=clock.sleep,
    )
    return outcome


@pytest.mark.anyio
async def test_a_transient_failure_is_retried_until_it_succeeds() -> None:
    clock, attempt = FakeClock(), Flaky(2, TransientError("busy"))
    outcome = await retried(attempt, clock)
    assert (outcome.result, outcome.failure, outcome.count) == (OK, None, 3)
    assert len(clock.slept) == 2


@pytest.mark.anyio
async def test_retries_stop_at_the_attempt_bound() -> None:
    clock, attempt = FakeClock(), Flaky(10, TransientError("busy"))
    outcome = await retried(attempt, clock, max_attempts=3)
    assert (attempt.calls, outcome.count) == (3, 3)
    assert outcome.failure is not None
    assert outcome.failure.category == "transient"


@pytest.mark.anyio
async def test_retries_stop_before_a_wait_would_pass_the_time_bound() -> None:
    clock, attempt = FakeClock(), Flaky(10, TransientError("busy", retry_after=4.0))
    outcome = await retried(attempt, clock, max_attempts=10, max_total_s=10.0)
    assert clock.slept == [4.0, 4.0]  # a third wait would end at 12 s
    assert outcome.count == 3


@pytest.mark.anyio
async def test_a_failure_the_caller_may_not_retry_is_answered_at_once() -> None:
    clock, attempt = FakeClock(), Flaky(1, TerminalError("account frozen"))
    outcome = await retried(attempt, clock)
    assert (attempt.calls, clock.slept) == (1, [])
    assert outcome.failure is not None
    assert outcome.failure.category == "terminal"


@pytest.mark.anyio
async def test_a_cancelled_attempt_is_not_retried_and_its_count_is_kept() -> None:
    clock = FakeClock()
    outcome = Attempts()

    async def hangs() -> CallToolResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.move_on_after(0.05):
        await run_with_retries(
            hangs,
            (),
            outcome,
            tool_name="lookup",
            correlation_id="c1",
            side_effect=False,
            may_retry=lambda _: True,
            max_attempts=4,
            max_total_s=10.0,
            clock=clock,
            sleep=clock.sleep,
        )
    assert outcome.count == 1
    assert clock.slept == []
