"""The event-loop stdio transport against its plain twin: the SDK's `stdio_server` (with the
lines it would drop answered), fed the same bytes in the same pieces.

Both must hand the session the same messages, answer the same lines, and put the same bytes
on the wire for what the session sends back. Only a lone CR differs by design (MCP's stdio
messages end in LF; the SDK's text reader also ends a line at a lone CR), so none is sent.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage

from resilient_mcp.calls.fatal_exit import FatalExit
from resilient_mcp.stdio.guard import ProtocolPipes
from resilient_mcp.stdio.transport import Streams, _event_loop_stdio, _sdk_stdio

pytestmark = pytest.mark.anyio
Driver = Callable[..., AbstractAsyncContextManager[Streams]]

lines = st.one_of(
    st.integers(min_value=0, max_value=99).map(
        lambda n: f'{{"jsonrpc": "2.0", "id": {n}, "method": "ping"}}'
    ),
    st.text(max_size=12).map(
        lambda text: f'{{"jsonrpc":"2.0","method":"notifications/x","params":{{"t":{text!r}}}}}'
    ),
    st.sampled_from(
        [
            "",
            "   ",
            "{not json",
            '{"a": 1}',
            "[]",
            '{"jsonrpc": "2.0", "id": "s", "method": "tools/list", "params": {}}',
            '{"jsonrpc": "2.0", "id": 3, "result": {}}',
            "\t{}\t",
        ]
    ),
)
raw_lines = st.one_of(
    lines.map(str.encode), st.binary(max_size=8).filter(lambda b: b"\r" not in b and b"\n" not in b)
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Bytes a host writes to stdin (LF or CRLF line ends, maybe no end on the last line), and
    where the writes cut them."""
    chosen = draw(st.lists(raw_lines, min_size=1, max_size=10))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(chosen), max_size=len(chosen)))
    data = b"".join(line + end for line, end in zip(chosen, ends, strict=True))
    if draw(st.booleans()):
        data = data.removesuffix(b"\n").removesuffix(b"\r")
    cuts = sorted(set(draw(st.lists(st.integers(min_value=1, max_value=max(1, len(data) - 1)), max_size=4))))
    return data, cuts


def write_in_pieces(fd: int, data: bytes, cuts: list[int]) -> None:
    edges = [0, *(cut for cut in cuts if cut < len(data)), len(data)]
    for start, end in itertools.pairwise(edges):
        os.write(fd, data[start:end])
    os.close(fd)


def read_all(fd: int, into: list[bytes]) -> None:
    while chunk := os.read(fd, 65536):
        into.append(chunk)
    os.close(fd)


async def through(driver: Driver, data: bytes, cuts: list[int]) -> tuple[list[str], bytes]:
    """What the session receives from `data`, and every byte written back, once each message
    received is sent back as the session would answer it."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    written: list[bytes] = []
    host = threading.Thread(target=write_in_pieces, args=(stdin_write, data, cuts))
    reader = threading.Thread(target=read_all, args=(stdout_read, written))
    host.start()
    reader.start()

    async def nothing_to_finish() -> None:
        return None

    received: list[str] = []
    try:
        pipes = ProtocolPipes(read_fd=stdin_read, write_fd=stdout_write)
        async with driver(pipes, FatalExit(), nothing_to_finish) as (read_stream, write_stream):
            echoes: list[SessionMessage] = []
            async for item in read_stream:
                if isinstance(item, SessionMessage):
                    received.append(item.message.model_dump_json(by_alias=True, exclude_unset=True))
                    echoes.append(item)
                else:
                    received.append(f"exception {type(item).__name__}")
            for echo in echoes:
                await write_stream.send(echo)
            await write_stream.aclose()  # as the session does when it ends: the writer may stop
    finally:
        os.close(stdin_read)
        os.close(stdout_write)
        await anyio.to_thread.run_sync(host.join)
        await anyio.to_thread.run_sync(reader.join)
    return received, b"".join(written)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams())
async def test_the_event_loop_transport_reads_and_writes_as_the_sdks_stdio(
    stream: tuple[bytes, list[int]],
) -> None:
    data, cuts = stream
    # This session answers only once stdin has ended: the event loop's wait for answers is not asked for.
    event_loop = functools.partial(_event_loop_stdio, answer_within_s=0)
    assert await through(event_loop, data, cuts) == await through(_sdk_stdio, data, cuts)
