"""stderr while serving: a host that pipes it and never reads it must not stall the server.

A blocking write to a full pipe stops the event loop, and with it every call: after about
250 call lines a host that does not read stderr would hang the server. So, while serving,
`sys.stderr` is a writer whose line goes out at once when the pipe has room for it (the
common case: same order, same moment as before), and otherwise into a bounded queue that a
thread writes as the pipe drains. Past the bound a line is dropped and counted; the
`log_stream` check of `health_check` and `/readyz` reports the count (degraded, not failing:
serving goes on). `flush` waits for the queue while the pipe has room, so an exit path
still writes its last lines, and a pipe that stays full costs it about `STALL_S`. Standard library
only: it is installed before anything else is imported.

Where stderr is a pipe (what a host gives a server), a line is one write that does not wait
(`pwritev2` with `RWF_NOWAIT`, Linux): no lock, no poll. A line of at most `PIPE_BUF` bytes is
then written whole or not at all (EAGAIN: the pipe is full, and the line queues as above). Only
that write waits for nothing: the file descriptor stays blocking for the host and any process
sharing it. Elsewhere (a terminal, a file, another system, a kernel without it) each line polls
for room under a lock, the plain path, which the test suite runs beside the fast one.
"""

from __future__ import annotations

import atexit
import collections
import errno
import io
import os
import select
import stat
import sys
import threading
import time

MAX_QUEUED_BYTES = 1 << 20  # lines kept while the pipe is full; past it they are dropped
STALL_S = 0.1  # a pipe full this long means nobody reads: an exit stops waiting for it
_ATOMIC_BYTES = select.PIPE_BUF  # a write this small into a pipe with room is whole and never blocks
_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)  # Linux: one write that returns EAGAIN rather than wait
_CURRENT_POSITION = -1  # pwritev2's offset for "as write() would": the only one a pipe takes


class NonBlockingStderr(io.TextIOBase):
    """A text stream on a file descriptor that never blocks its writer for long."""

    line_buffering = True  # every write is already on its way: callers need not flush per line

    def __init__(
        self,
        fd: int,
        encoding: str = "utf-8",
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        *,
        nowait: bool = True,
    ) -> None:
        """`nowait=False`: every line takes the plain path (lock, poll, write), even on a pipe."""
        self._fd = fd
        self._encoding = encoding
        self._max_queued = max_queued_bytes
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._writing = False  # the thread holds a line it has not finished writing
        # Re-entrant: a signal handler that logs may run while this thread holds it.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._room = select.poll()  # registered once: a poll per line costs half a select
        self._room.register(fd, select.POLLOUT)
        self.dropped = 0
        self._nowait = nowait and _NOWAIT != 0 and _is_pipe(fd)
        threading.Thread(target=self._drain_forever, name="stderr-writer", daemon=True).start()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # read-only here, as on sys.stderr
        return self._encoding

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, text: str) -> int:
        self.write_bytes(text.encode(self._encoding, "backslashreplace"))
        return len(text)

    def write_bytes(self, data: bytes) -> None:
        """Encoded lines: one write when nothing waits before them and the pipe has room."""
        # Read without the lock: the drain thread marks itself writing before it takes a line
        # off the queue, so an empty queue seen here with no write under way means none is due.
        if self._nowait and not self._queue and not self._writing and len(data) <= _ATOMIC_BYTES:
            try:
                os.pwritev(self._fd, (data,), _CURRENT_POSITION, _NOWAIT)  # whole, or EAGAIN
                return
            except BlockingIOError:  # the pipe is full: the line queues, as on the plain path
                pass
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise  # what the plain path's write would raise too (EPIPE: nobody reads)
                self._nowait = False  # a kernel (or an fd 2 swapped since) that cannot: plain from now on
        self.write_polled(data)

    def write_polled(self, data: bytes) -> None:
        """The plain path: under the lock, one `poll` for room, then the write or the queue."""
        with self._lock:
            idle = not self._queue and not self._writing
            if idle and len(data) <= _ATOMIC_BYTES and self._has_room():
                os.write(self._fd, data)
            elif self._queued_bytes + len(data) <= self._max_queued:
                self._queue.append(data)
                self._queued_bytes += len(data)
                self._changed.notify()
            else:
                self.dropped += 1

    def _has_room(self) -> bool:
        ready = self._room.poll(0)  # what select calls writable: room, or an error the write reports
        return bool(ready) and bool(ready[0][1] & (select.POLLOUT | select.POLLERR))

    def flush(self) -> None:
        """Wait for the queued lines while the pipe takes them; give up once it stays full.

        Only a full pipe is a stall: on a loaded machine the writer thread may wait long for a
        CPU while the pipe has room, and an exit path must not leave its last lines behind.
        """
        with self._lock:
            full_since: float | None = None
            while self._queue or self._writing:
                if self._has_room():
                    full_since = None
                elif full_since is None:
                    full_since = time.monotonic()
                elif time.monotonic() - full_since > STALL_S:
                    return
                self._changed.wait(0.01)

    def _drain_forever(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._changed.wait()
                self._writing = True  # before the line leaves the queue: see write_bytes
                data = self._queue.popleft()
                self._queued_bytes -= len(data)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError:  # stderr is gone: what is left cannot be written anywhere
                pass
            with self._lock:
                self._writing = False
                self._changed.notify_all()


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


_installed: NonBlockingStderr | None = None


def protect_stderr() -> None:
    """Make `sys.stderr` the non-blocking writer on fd 2 (once; not when stderr is not fd 2)."""
    global _installed
    if _installed is not None:
        return
    try:
        if sys.stderr.fileno() != 2:
            return
    except (AttributeError, OSError, ValueError):  # a test's captured stream: leave it be
        return
    sys.stderr.flush()
    _installed = NonBlockingStderr(2, getattr(sys.stderr, "encoding", None) or "utf-8")
    sys.stderr = _installed
    atexit.register(_installed.flush)


def dropped_lines() -> int:
    """How many log lines had to be dropped since serving began (0 when not protecting stderr)."""
    return _installed.dropped if _installed is not None else 0
