"""What `diagnose` waits for, said on stderr once a step takes longer than PROGRESS_AFTER_S.

A diagnosis starts the server once per era and bounds every read by --timeout: it can take
tens of seconds, and in silence it looks hung. The JSON report stays alone on stdout.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator

PROGRESS_AFTER_S = 2.0


class Progress:
    """Writes `diagnose: waiting for ...` through `write` when a step outlasts `after_s`."""

    def __init__(self, write: Callable[[str], object] | None, *, after_s: float = PROGRESS_AFTER_S) -> None:
        self._write = write
        self.after_s = after_s

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        if self._write is None:
            yield
            return
        timer = threading.Timer(self.after_s, self._write, args=(f"diagnose: waiting for {what}\n",))
        timer.daemon = True  # a step that never ends must not keep the process alive
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            # A line being written when the step ended is finished first: a daemon thread caught
            # inside stderr's lock at interpreter exit aborts the process (exit -6, no report).
            timer.join()


QUIET = Progress(None)


def to_stderr() -> Progress:
    def write(line: str) -> None:
        sys.stderr.write(line)
        sys.stderr.flush()

    return Progress(write)
