"""One tool per failure kind; each raises on purpose."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter
from typing import Annotated, Literal

import anyio
from pydantic import BaseModel, Field

from resilient_mcp import (
    FatalError,
    Part,
    PartialResult,
    TerminalError,
    ToolInputError,
    TransientError,
    cancelled,
    tool,
)

PLANTED_SECRET = "sk-planted-4f9c2e7b"  # must never reach a client
PLANTED_PATH = "/srv/app/secret/config.py"
CALLS: Counter[str] = Counter()  # attempts per key, for the retry tests

Key = Annotated[str, Field(description="A key that counts attempts")]
Failures = Annotated[int, Field(description="How many times to fail before succeeding")]


@tool(read_only=True)
def echo(text: Annotated[str, Field(description="Text to return")]) -> str:
    """Return the text unchanged."""
    return text


@tool(read_only=True)
def bad_input() -> str:
    """Always refuses its input."""
    raise ToolInputError("city 'Atlantis' is unknown: pass a real city name")


@tool(read_only=True)
def bad_value() -> str:
    """Raises ValueError."""
    raise ValueError("date must be in the future")


@tool(read_only=True)
def refused() -> str:
    """A business rule says no."""
    raise TerminalError("the account is closed; nothing was changed")


@tool(read_only=True)
def crash() -> str:
    """Fails with an unexpected exception that carries a secret and a path."""
    raise RuntimeError(f"db password {PLANTED_SECRET} rejected at /srv/app/secrets.py")


@tool(read_only=True)
def connection_down() -> str:
    """A dependency refuses connections."""
    raise ConnectionRefusedError(f"10.1.2.3:5432 refused ({PLANTED_SECRET})")


@tool(read_only=True)
def flaky(key: Key, failures: Failures) -> int:
    """Fails transiently `failures` times for a key, then returns the attempt count."""
    CALLS[key] += 1
    if CALLS[key] <= failures:
        raise TransientError("upstream busy", retry_after=0.01)
    return CALLS[key]


@tool
def flaky_unsafe(key: Key, failures: Failures) -> int:
    """Like flaky, but not safe to repeat: it is never retried."""
    CALLS[key] += 1
    if CALLS[key] <= failures:
        raise TransientError("upstream busy")
    return CALLS[key]


@tool(read_only=True, timeout_s=0.5)
async def slow(seconds: Annotated[float, Field(description="How long to sleep")]) -> str:
    """Sleeps (async) longer than its time limit."""
    await anyio.sleep(seconds)
    return "done"


@tool(read_only=True, timeout_s=0.5)
def slow_sync(seconds: Annotated[float, Field(description="How long to sleep")]) -> str:
    """Sleeps (blocking, in a worker thread) longer than its time limit."""
    time.sleep(seconds)
    return "done"


@tool(read_only=True)
def exits() -> str:
    """Calls sys.exit, as a library might."""
    sys.exit(3)


@tool(read_only=True)
async def interrupted() -> str:
    """Raises KeyboardInterrupt."""
    raise KeyboardInterrupt


class OwnBaseException(BaseException):
    """A library's own BaseException subclass: not an Exception, and not a request to stop."""


@tool(read_only=True)
async def raises_base_exception() -> str:
    """Raises a BaseException subclass whose message carries a secret."""
    raise OwnBaseException(f"token {PLANTED_SECRET} rejected")


@tool(read_only=True)
async def awaits_a_cancelled_task() -> str:
    """Awaits a task that something else cancelled: a CancelledError that is not this call's."""
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    task.cancel()
    await task
    return "unreachable"


@tool(read_only=True)
def raises_cancelled_sync() -> str:
    """Raises CancelledError in its worker thread, as a library wrapping a future might."""
    raise asyncio.CancelledError(f"lost {PLANTED_SECRET}")


@tool(side_effect=True)
def charge_then_raise_base_exception(cents: Annotated[int, Field(description="Amount")]) -> str:
    """A side-effecting tool that raises a BaseException subclass after its body began."""
    raise OwnBaseException(f"charged {cents} then lost track")


LEAKS: dict[str, type[Exception]] = {
    "value": ValueError,
    "transient": TransientError,
    "terminal": TerminalError,
    "input": ToolInputError,
}


@tool(read_only=True)
def leaky(
    kind: Annotated[Literal["value", "transient", "terminal", "input"], Field(description="Error class")],
) -> str:
    """Fails with a message that carries a secret and a path."""
    raise LEAKS[kind](f"db failure: api_key={PLANTED_SECRET} at {PLANTED_PATH} line 42")


@tool(read_only=True)
def leaky_library() -> int:
    """A library call fails with the secret in its own message."""
    return int(f"Bearer {PLANTED_SECRET}")


ATTEMPT_TIMES: dict[str, list[float]] = {}


@tool(read_only=True)
def throttled(key: Key) -> str:
    """Refused once with a Retry-After hint of 0.5 s, then works."""
    ATTEMPT_TIMES.setdefault(key, []).append(time.monotonic())
    if len(ATTEMPT_TIMES[key]) == 1:
        raise TransientError("rate limited", retry_after=0.5)
    return "ok"


STOPPED_EARLY: set[str] = set()


@tool(read_only=True, timeout_s=0.5)
def patient(key: Key) -> str:
    """Works in small steps for up to a minute, and stops early once its call gave up on it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cancelled():
            STOPPED_EARLY.add(key)
            return "stopped early"
        time.sleep(0.02)
    return "done"


RELEASE_STUCK = threading.Event()


@tool(read_only=True, timeout_s=0.2)
def stuck(label: Annotated[str, Field(description="Names the call")]) -> str:
    """Blocks, ignoring its time limit, until the test lets it go."""
    RELEASE_STUCK.wait(120)
    return f"{label} released"


@tool(read_only=True)
def fatal() -> str:
    """The server cannot go on."""
    raise FatalError("the license file vanished", "restore it and restart")


@tool(read_only=True)
def partly() -> str:
    """Two parts work, one does not."""
    raise PartialResult(
        [
            Part("a.txt", ok=True, result="120 words"),
            Part("b.txt", ok=False, error="not found"),
            Part("c.txt", ok=True, result="7 words"),
        ]
    )


class Address(BaseModel):
    street: str = Field(description="Street and number")
    zip_code: str = Field(description="Postal code")


class Order(BaseModel):
    item: str = Field(description="What to order")
    quantity: int = Field(description="How many", ge=1)
    address: Address = Field(description="Where to deliver")


@tool(read_only=True)
def place_order(order: Annotated[Order, Field(description="The order")]) -> str:
    """Validate an order (nothing is placed)."""
    return f"{order.quantity} x {order.item} to {order.address.zip_code}"


@tool(read_only=True)
def tag(
    tags: Annotated[list[str], Field(description="Tags to apply")],
    limit: Annotated[int, Field(description="Most tags to keep")] = 10,
) -> list[str]:
    """Return the tags, sorted, at most `limit`."""
    return sorted(tags)[:limit]
