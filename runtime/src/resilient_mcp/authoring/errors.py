"""Every exception the package raises on purpose, one class per outcome the model must tell apart.

ServerError
├── ToolInputError          invalid_input: the model can fix its arguments
├── TransientError          transient: worth retrying (for a side effect: nothing was applied)
│   ├── StoreUnavailableError   the idempotency table could not be read or written just now
│   │   └── TableLostError      its file was deleted or replaced: nothing more until a restart
│   └── ClaimLostError          another server took this key over: the body did not run
├── TerminalError           terminal: a business rule said no
├── FatalError              fatal: the server cannot go on (exit 78 before serving, 70 after)
└── PartialResult           partial: what worked and what did not, as one isError result
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resilient_mcp.records import record

# How a FatalError ends the process (sysexits.h): before serving, the configuration is at fault
# (EX_CONFIG); while serving, the software (EX_SOFTWARE).
EXIT_FATAL_AT_STARTUP = 78
EXIT_FATAL_WHILE_SERVING = 70


class ServerError(Exception):
    """Base of every error this package raises on purpose."""


class ToolInputError(ServerError):
    """The arguments are wrong in a way the model can fix; the message is shown as is."""


class TransientError(ServerError):
    """A dependency failed in a way that may pass; the call is worth repeating.

    Tools that are safe to repeat (`read_only`, `idempotent`) are retried automatically.
    For a `side_effect=True` tool, raising it is a promise: nothing was applied. Its
    idempotency key is released and the call may be retried, in-process and by the
    client. Raise it only before the effect (or when the outside system said no); on
    any other exception after the claim the key is left in doubt and never re-run.

    `retry_after` (seconds) is a hint from the dependency, e.g. a 429's Retry-After;
    no automatic retry comes sooner.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TerminalError(ServerError):
    """A business rule said no; the message is shown as is and retrying will not help."""


class FatalError(ServerError):
    """The server cannot go on.

    Raised before serving (bad settings, unwritable data directory, unreachable
    database), it stops the process with exit 78 and one `FATAL: <what> - <fix>` line.
    Raised by a tool while serving, that call is answered and the process exits 70.
    """

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(f"{problem} - {fix}" if fix else problem)
        self.problem = problem
        self.fix = fix


class StoreUnavailableError(TransientError):
    """The table could not be read or written just now (locked, connection lost)."""

    def __init__(self, operation: str) -> None:
        super().__init__(f"the idempotency table is unavailable ({operation} failed); try again shortly")


class TableLostError(StoreUnavailableError):
    """The table's file was deleted or replaced while the server ran: it answers no key until restarted."""

    def __init__(self) -> None:
        TransientError.__init__(
            self,
            "the idempotency table's file was deleted or replaced while this server ran, so it can no "
            "longer tell which calls already happened; nothing was run. The server must be restarted on "
            "a table it can trust: retry once it has been",
        )


class ClaimLostError(TransientError):
    """Our pending claim was taken over (this process looked dead to another): do not run the body."""

    def __init__(self) -> None:
        super().__init__(
            "another server took over this idempotency key while this one was paused; nothing was run "
            "here. Retry with the same key to get the outcome"
        )


class ResultTooLargeError(ServerError):
    """A tool's structured result is over the size limit: cutting it would break its schema."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


@record
class Part:
    """One part of a multi-part operation: what it was called, and how it went."""

    name: str
    ok: bool
    result: Any = None
    error: str = ""
    retryable: bool = False


class PartialResult(ServerError):
    """Raise from a tool to return what worked and what did not, as one isError result.

    Example: `raise PartialResult([Part("a.txt", True, 120), Part("b.txt", False, error="not found")])`.
    Raising (rather than returning) keeps the tool's declared return type honest.
    """

    def __init__(self, parts: Sequence[Part]) -> None:
        failed = [p for p in parts if not p.ok]
        super().__init__(f"{len(failed)} of {len(parts)} parts failed")
        self.parts = list(parts)
