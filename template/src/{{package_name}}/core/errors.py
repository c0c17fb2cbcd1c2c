# Template-owned: `copier update` replaces this file; put your code in tools/.
"""The errors a tool raises on purpose, one class per outcome the model must tell apart."""

from __future__ import annotations


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
