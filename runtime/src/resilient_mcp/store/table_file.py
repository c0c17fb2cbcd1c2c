"""The SQLite table's file, watched: no key is claimed in a file that is no longer the table.

A server keeps using the file it opened, whatever happens to its name. Deleted, renamed away
or replaced while the server runs, that file still takes every claim, but nobody else will
ever read it: the next server on the data directory makes a new table and runs every one of
those keys again. So the store compares the file at the path with the one it holds open
(device and inode: one `stat`) before each session, on each heartbeat and in each health
check. Once they differ the table is lost for good: nothing more is read from it or written
to it (a new server may share its -shm index by name), health says failing, and every
side-effecting call is refused until the server is restarted.

The loss is written down beside the table (`<file>.lost`), and no server starts on the data
directory while that note is there: a new table would not know the keys that already ran,
and only an operator can say whether that is acceptable. A -wal or -shm file without its
table is refused the same way: the table was deleted while a server had it open.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from resilient_mcp.authoring.errors import FatalError, TableLostError
from resilient_mcp.telemetry.logs import get_logger

_log = get_logger(__name__)

LOST_SUFFIX = ".lost"
SIDE_FILES = ("-wal", "-shm")  # SQLite's own, named after the table's file
HEADER_BYTES = 100  # an SQLite file holds at least its header once opened: shorter is truncated


def lost_note(path: Path) -> Path:
    """Where a server that lost the table at `path` says so."""
    return path.with_name(path.name + LOST_SUFFIX)


def refuse_untrusted_start(path: Path) -> None:
    """FatalError when a table at `path` could not know the keys already run (see the module docstring)."""
    note = lost_note(path)
    if note.exists():
        raise FatalError(
            f"the idempotency table {path} was deleted or replaced while a server was using it ({note} says"
            " when and by whom); a table here would not know the keys that already ran",
            f"read {note}, then delete it to start",
        )
    if path.exists():
        return
    for suffix in SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists():
            raise FatalError(
                f"the idempotency table {path} is missing but {side.name} is there: the table was deleted"
                " while a server had it open, and a new one would not know the keys that already ran",
                f"stop every server on {path.parent}; put the table back if you have it, else delete"
                f" {path.name}-wal and {path.name}-shm to start an empty table (used keys may run again)",
            )


class TableFile:
    """The table's file as this process opened it, and whether the path still names it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._had_header = False
        self._lost: str | None = None  # how the file was lost (names the path: the operator's log)
        self._word: str | None = None  # the same for clients: no path
        self._lock = threading.Lock()  # the serving loop and the heartbeat thread both look

    def hold(self) -> None:
        """Open the file (creating it) before SQLite does, and keep it open while the store is.

        Opened first, and writable (a container layer copies a file up on its first writable
        open), so what SQLite opens next is this very file, unless it changed in between:
        the first `ensure` sees that. Closed last (`release`): closing any descriptor of a
        file drops every POSIX lock this process holds on it, SQLite's too.
        """
        refuse_untrusted_start(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        held = os.fstat(self._fd)
        self._identity = (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Close the held file: call it once SQLite's connections are closed."""
        fd, self._fd = self._fd, None
        self._identity = None
        if fd is not None:
            os.close(fd)

    def ensure(self) -> None:
        """TableLostError once the path no longer names the table this store opened."""
        word = self.lost()
        if word is not None:
            raise TableLostError from RuntimeError(f"the table's file was {word}")

    def lost(self) -> str | None:
        """How the table's file was lost (for clients: no path), or None while the path names it."""
        if self._word is None and self._identity is not None:
            word = self._how_lost(self._identity)
            if word is not None:
                self._mark_lost(word)
        return self._word

    def _how_lost(self, identity: tuple[int, int]) -> str | None:
        try:
            now = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return "deleted" if self._unlinked() else "renamed or moved away"
        except OSError:
            return None  # cannot tell (permissions): the data_dir check says what is wrong
        if (now.st_dev, now.st_ino) != identity:
            return "replaced by another file"
        if now.st_size >= HEADER_BYTES:
            self._had_header = True
        elif self._had_header:
            return "truncated"
        return None

    def _unlinked(self) -> bool:
        fd = self._fd
        try:
            return fd is not None and os.fstat(fd).st_nlink == 0
        except OSError:
            return False

    def _mark_lost(self, word: str) -> None:
        with self._lock:
            if self._word is not None:
                return
            self._lost = f"the idempotency table {self.path} was {word} while this server ran"
            self._word = word
        _log.error(
            "idempotency_table_lost",
            problem=self._lost,
            fix="side-effecting calls are refused: stop this server, check the table, then start it again",
        )
        self._write_note()

    def _write_note(self) -> None:
        note = lost_note(self.path)
        held = f"/proc/{os.getpid()}/fd/{self._fd}" if self._fd is not None else "its open file"
        text = (
            f"{self._lost} (pid {os.getpid()} on {socket.gethostname()},"
            f" {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}).\n"
            "That server refuses every side-effecting call until it is restarted. The keys it recorded"
            f" are in the file it still holds open while it runs ({held} on Linux).\n"
            "A new table would not know them: a retry of any of them would run again. So no server"
            " starts on this directory while this note is here.\n"
            f"To start again: stop every server on {self.path.parent}; put the table back if you can;"
            f" otherwise delete {self.path.name}-wal and {self.path.name}-shm, which belong to the lost"
            " table (with no table file there, an empty one is made); then delete this note.\n"
        )
        try:
            fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        except OSError as exc:  # the directory went too: the log line above is all there is
            _log.warning("idempotency_table_lost_note_failed", note=str(note), error=exc.strerror or str(exc))
            return
        with os.fdopen(fd, "w") as out:
            out.write(text)
