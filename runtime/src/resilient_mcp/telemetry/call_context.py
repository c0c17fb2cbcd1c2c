"""The call being served, as every log line and metric sees it: its correlation id and tool.

A context variable, so a worker thread running a sync tool body sees its own call. The body's
state (`calls.running`) rides along as an opaque slot: the log needs only the id and the name.
"""

from __future__ import annotations

import random
from contextvars import ContextVar, Token
from typing import Protocol

from resilient_mcp.records import record


class CallBody(Protocol):
    """What this layer knows of a running tool body (calls.running.Body): whether it was told to stop."""

    @property
    def stopped(self) -> bool: ...


@record(slots=True)
class Call:
    """The tool call being served: what its log lines and its tool body need."""

    correlation_id: str
    tool: str
    body: CallBody | None = None


_CALL: ContextVar[Call | None] = ContextVar("tool_call", default=None)


def new_correlation_id() -> str:
    """16 hex digits that find a call, read or get in the log; no system call per call."""
    return f"{random.getrandbits(64):016x}"


def current_call() -> Call | None:
    return _CALL.get()


def enter_call(call: Call) -> Token[Call | None]:
    """Make `call` the current one; returns the token for `leave_call`."""
    return _CALL.set(call)


def leave_call(token: Token[Call | None]) -> None:
    _CALL.reset(token)
