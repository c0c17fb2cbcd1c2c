"""Exit 70 after a tool raised FatalError, but only once its answer is on the wire.

Cancelling the server does not stop a stdio process while the client keeps stdin
open (stdin is read in a worker thread), so the exit is `os._exit`, taken right
after the response to the fatal call is flushed, or after a short grace period.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading

from resilient_mcp.authoring.errors import EXIT_FATAL_WHILE_SERVING

_GRACE_S = 5.0


class FatalExit:
    """Arms once; exits the process when the armed request's response has been written."""

    def __init__(self, grace_s: float = _GRACE_S) -> None:
        self.grace_s = grace_s
        self._request_id: str | None = None
        self._lock = threading.Lock()

    @property
    def armed(self) -> bool:
        return self._request_id is not None

    def arm(self, request_id: str | None) -> None:
        with self._lock:
            if self.armed:
                return
            self._request_id = request_id or ""
        timer = threading.Timer(self.grace_s, self.exit_now)
        timer.daemon = True
        timer.start()

    def written(self, line: str) -> None:
        """Called with each protocol line after it was flushed."""
        if not self.armed:
            return
        try:
            request_id = json.loads(line).get("id")
        except (ValueError, AttributeError):
            return
        if request_id is not None and str(request_id) == self._request_id:
            self.exit_now()

    def exit_now(self) -> None:
        logging.shutdown()
        sys.stderr.flush()
        os._exit(EXIT_FATAL_WHILE_SERVING)


class WatchedWriter(io.TextIOWrapper):
    """The protocol's text stream: whole lines, one writer at a time; tells FatalExit what was flushed."""

    def __init__(self, buffer: io.BufferedWriter, fatal_exit: FatalExit) -> None:
        super().__init__(buffer, encoding="utf-8", write_through=True)
        self._fatal_exit = fatal_exit
        self._last = ""
        self._lock = threading.Lock()  # the SDK's writer and AnsweringLines write from worker threads

    def write(self, text: str) -> int:
        with self._lock:
            if self._fatal_exit.armed:
                self._last = text
            return super().write(text)

    def flush(self) -> None:
        super().flush()
        if self._last:
            line, self._last = self._last, ""
            self._fatal_exit.written(line)
