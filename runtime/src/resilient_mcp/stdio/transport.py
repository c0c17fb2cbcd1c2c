"""stdio served from the event loop: the protocol pipes are read and written without threads.

The SDK's stdio transport wraps the pipes in `anyio.wrap_file`, so every read, write and
flush hops to a worker thread, which costs far more CPU per call than the pipes themselves
(benchmarks/OVERHEAD.md, over stdio). Here the event loop drives the private descriptors
`claim_stdio` set aside (asyncio's `connect_read_pipe` / `connect_write_pipe`): requests
reach the SDK's server through the memory stream its `stdio_server` creates, and the task
that answers writes its answer to the pipe itself (`WireStream`). What the SDK's loop does is kept:
UTF-8 with replacement, a last line without a newline still counts, EOF ends the session
cleanly (once `end_of_input` returned: calls in flight may still answer); only a lone CR
ends no line here (MCP's stdio messages end in LF). Lines the SDK
would drop are answered (-32700/-32600) by `stdio.lines`, and each write waits until the
pipe took every byte, so a peer that stops reading holds the server back instead of
growing a buffer, and `FatalExit` learns when an answer is out.

Where the event loop cannot drive the pipes, the SDK's own transport serves them.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, cast

import anyio
import anyio.lowlevel
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCMessage, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from resilient_mcp.calls.fatal_exit import FatalExit, WatchedWriter
from resilient_mcp.sdk_fence import create_context_streams
from resilient_mcp.stdio.guard import ProtocolPipes
from resilient_mcp.stdio.lines import MAX_LINE_BYTES, AnsweringLines, line_too_long, read_line
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)
_CHUNK = 256 * 1024  # bytes per read: a burst of pipelined requests arrives in one
_READ_LIMIT = 1024 * 1024  # bytes buffered before the pipe is no longer read (back-pressure)

Streams = tuple[Any, Any]  # the SDK's read and write streams, as `stdio_server` yields them
EndOfInput = Callable[[], Awaitable[None]]


class RequestsInFlight:
    """The ids of requests handed to the session and not answered yet.

    At the end of stdin the SDK's session cancels whatever it has not answered, and a request
    read just before the end may not have reached its handler yet (nor the drain, which sees
    tool calls only once they run, and refuses those that start after it began): the requests
    read are answered first, as if stdin were still open.
    """

    def __init__(self) -> None:
        self._ids: set[str | int] = set()
        self._none_left = asyncio.Event()
        self._none_left.set()

    def received(self, message: JSONRPCMessage) -> None:
        if isinstance(message, JSONRPCRequest):
            self._ids.add(message.id)
            self._none_left.clear()
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            self._answered((message.params or {}).get("requestId"))  # never answered: the client gave up

    def sent(self, message: JSONRPCMessage) -> None:
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self._answered(message.id)

    def _answered(self, request_id: object) -> None:
        self._ids.discard(request_id)  # an id never received (a cancelled one, say) is not there
        if not self._ids:
            self._none_left.set()

    async def answered(self, within_s: float) -> None:
        """Wait until every request received is answered, at most `within_s` seconds."""
        with anyio.move_on_after(within_s):
            await self._none_left.wait()


def event_loop_unusable(pipes: ProtocolPipes) -> str | None:
    """Why the event loop cannot drive these pipes (None when it can).

    asyncio reads and writes pipes, sockets and terminals only, and sets O_NONBLOCK on
    them, a flag of the open file that every process sharing it sees. So only pipes and
    sockets are taken (a terminal belongs to the shell too; asyncio refuses a regular
    file or /dev/null), and stdout only when it is not stderr's pipe as well (`2>&1`),
    where stderr writes would start failing with EAGAIN. Windows has no such pipes for
    a selector loop. Elsewhere the SDK's transport serves.
    """
    if os.name != "posix":
        return "not a POSIX system"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "not an asyncio event loop"
    try:
        read_stat, write_stat = os.fstat(pipes.read_fd), os.fstat(pipes.write_fd)
    except OSError as exc:
        return f"the protocol descriptors cannot be inspected ({exc})"
    for name, mode in (("stdin", read_stat.st_mode), ("stdout", write_stat.st_mode)):
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return f"{name} is not a pipe or socket"
    try:
        stderr_stat = os.fstat(2)
    except OSError:
        return None
    if (write_stat.st_dev, write_stat.st_ino) == (stderr_stat.st_dev, stderr_stat.st_ino):
        return "stdout and stderr are the same pipe"
    return None


class LineSplitter:
    """Cuts stdin's bytes into lines, none kept past `MAX_LINE_BYTES`.

    A line that grows past the limit is reported (None) the moment it does, and the
    rest of it is dropped as it arrives: a client that never sends a newline costs the
    limit, not its whole stream.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self._limit = limit
        self._pending: list[bytes] = []
        self._size = 0
        self._dropping = False

    def feed(self, chunk: bytes) -> list[bytes | None]:
        """The complete lines (newline included) that `chunk` ends, None for each one too long."""
        lines: list[bytes | None] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._dropping:
                self._dropping = False
            elif self._size + end - start > self._limit:
                self._clear()
                lines.append(None)
            else:
                piece = chunk[start : end + 1]
                if self._pending:
                    piece = b"".join([*self._pending, piece])
                    self._clear()
                lines.append(piece)
            start = end + 1
        rest = len(chunk) - start
        if rest and not self._dropping:
            if self._size + rest > self._limit:
                self._clear()
                self._dropping = True
                lines.append(None)
            else:
                self._pending.append(chunk[start:])
                self._size += rest
        return lines

    def last_line(self) -> bytes:
        """What came after the last newline (a last line without one is still a line)."""
        line = b"".join(self._pending)
        self._clear()
        return line

    def _clear(self) -> None:
        self._pending.clear()
        self._size = 0


class PeerGone(Exception):
    """The client closed its end of stdout: nothing can be answered any more."""


class _WireProtocol(asyncio.Protocol):
    """Flow control for the protocol's stdout: writable again once the pipe took every byte."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()
        self.lost = False

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writable.set()


class Wire:
    """The protocol's stdout: whole lines, each on the pipe before `send_line` returns."""

    def __init__(
        self, transport: asyncio.WriteTransport, protocol: _WireProtocol, fatal_exit: FatalExit
    ) -> None:
        # Any byte the pipe did not take at once pauses the writer until all of it is taken.
        transport.set_write_buffer_limits(high=0)
        self._transport = transport
        self._protocol = protocol
        self._fatal_exit = fatal_exit

    async def send_line(self, line: str) -> None:
        if self._protocol.lost:
            raise PeerGone
        self._transport.write((line + "\n").encode("utf-8"))
        if not self._protocol.writable.is_set():
            await self._protocol.writable.wait()
            if self._protocol.lost:
                raise PeerGone
        if self._fatal_exit.armed:
            self._fatal_exit.written(line)


class WireStream:
    """The SDK session's write stream: the task that answers puts its line on the wire itself.

    It fits the SDK's `WriteStream` protocol, and saves the hop to a writer task that a
    memory stream would need for every message.
    """

    def __init__(
        self, wire: Wire, serving: anyio.CancelScope, in_flight: RequestsInFlight | None = None
    ) -> None:
        self._wire = wire
        self._serving = serving
        self._in_flight = in_flight
        self._closed = False

    async def send(self, item: SessionMessage) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self.send_line(item.message.model_dump_json(by_alias=True, exclude_unset=True))
        if self._in_flight is not None:
            self._in_flight.sent(item.message)

    async def send_line(self, line: str) -> None:
        try:
            await self._wire.send_line(line)
        except PeerGone:
            # The client closed stdout: nothing more can be answered, so serving ends (exit 0).
            self._serving.cancel()
            await anyio.lowlevel.checkpoint()
            raise anyio.BrokenResourceError from None

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> WireStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@asynccontextmanager
async def open_stdio(
    pipes: ProtocolPipes, fatal_exit: FatalExit, end_of_input: EndOfInput, *, answer_within_s: float
) -> AsyncIterator[Streams]:
    """The SDK server's read and write streams over the protocol pipes. At the end of stdin the
    requests read before it are answered first (for at most `answer_within_s`, as if stdin were
    still open), then `end_of_input` is awaited (the drain), then the session is told (which
    ends whatever is still in flight)."""
    reason = event_loop_unusable(pipes)
    log.debug("stdio_transport", driver="sdk" if reason else "event_loop", reason=reason)
    if reason is None:
        async with _event_loop_stdio(pipes, fatal_exit, end_of_input, answer_within_s) as streams:
            yield streams
    else:
        async with _sdk_stdio(pipes, fatal_exit, end_of_input) as streams:
            yield streams


@asynccontextmanager
async def _sdk_stdio(
    pipes: ProtocolPipes, fatal_exit: FatalExit, end_of_input: EndOfInput
) -> AsyncIterator[Streams]:
    """The SDK's stdio loop on the private pipes: a worker thread per read, write and flush."""
    writer = anyio.wrap_file(WatchedWriter(pipes.raw_writer(), fatal_exit))
    lines = AnsweringLines(anyio.wrap_file(pipes.reader()), writer, end_of_input)
    reader = cast(anyio.AsyncFile[str], lines)
    async with stdio_server(reader, writer) as streams:
        yield streams


@asynccontextmanager
async def _event_loop_stdio(
    pipes: ProtocolPipes, fatal_exit: FatalExit, end_of_input: EndOfInput, answer_within_s: float
) -> AsyncIterator[Streams]:
    loop = asyncio.get_running_loop()
    # closefd=False: the descriptors stay open until the process ends, as the SDK keeps them.
    stdin = os.fdopen(pipes.read_fd, "rb", buffering=0, closefd=False)
    stdout = os.fdopen(pipes.write_fd, "wb", buffering=0, closefd=False)
    blocking = (os.get_blocking(pipes.read_fd), os.get_blocking(pipes.write_fd))
    reader = asyncio.StreamReader(limit=_READ_LIMIT)
    read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    write_transport, protocol = await loop.connect_write_pipe(_WireProtocol, stdout)
    serving = anyio.CancelScope()
    wire = Wire(write_transport, protocol, fatal_exit)
    in_flight = RequestsInFlight()
    write_stream = WireStream(wire, serving, in_flight)
    read_stream_writer, read_stream = create_context_streams[SessionMessage | Exception](0)

    async def take(raw: bytes) -> None:
        message, answer = read_line(raw.decode("utf-8", "replace"))
        if answer is not None:
            await write_stream.send_line(answer)
        elif message is not None:
            in_flight.received(message)  # before the session has it: its answer may come at once
            await read_stream_writer.send(SessionMessage(message))

    async def read_requests() -> None:
        lines = LineSplitter()
        with suppress(anyio.BrokenResourceError):  # the session ended: nobody takes requests
            async with read_stream_writer:
                while chunk := await reader.read(_CHUNK):
                    for line in lines.feed(chunk):
                        if line is None:
                            await write_stream.send_line(line_too_long())
                        else:
                            await take(line)
                if last := lines.last_line():
                    await take(last)
                await in_flight.answered(within_s=answer_within_s)  # as if stdin were still open
                await end_of_input()

    try:
        with serving:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_requests)
                yield read_stream, write_stream
    finally:
        read_transport.close()
        write_transport.close()
        # Give the pipes back as they came: another process may share them.
        os.set_blocking(pipes.read_fd, blocking[0])
        os.set_blocking(pipes.write_fd, blocking[1])
