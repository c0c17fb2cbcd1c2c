"""In stdio mode stdout belongs to the protocol, from the first line of `main` to exit.

The SDK diverts fd 1 only while a session runs and restores it afterwards, so an
unflushed `print` (in a tool or at import) still reaches the wire at exit. Here the
wire moves to private descriptors once, for good: fd 1 and `sys.stdout` point at
stderr for the rest of the process, and fd 0 at the null device, so prints, child
processes and C code can neither corrupt nor steal the protocol stream.
"""

from __future__ import annotations

import io
import os
import sys

from resilient_mcp.records import record


@record
class ProtocolPipes:
    """Private duplicates of the original stdin and stdout: the JSON-RPC wire."""

    read_fd: int
    write_fd: int

    def reader(self) -> io.TextIOWrapper:
        raw = os.fdopen(self.read_fd, "rb", closefd=False)
        return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")

    def raw_writer(self) -> io.BufferedWriter:
        return os.fdopen(self.write_fd, "wb", closefd=False)


def claim_stdio() -> ProtocolPipes:
    """Move the wire off fds 0/1 and send everything else that writes to stdout to stderr."""
    sys.stdout.flush()
    pipes = ProtocolPipes(read_fd=os.dup(0), write_fd=os.dup(1))
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # print() looks sys.stdout up at each call; stderr is line-buffered or unbuffered.
    sys.stdout = sys.stderr
    return pipes
