"""The stderr writer's fast path (one write that does not wait) against its plain twin (a lock,
a poll for room, a write), each writing into a pipe of its own.

Both must put the same bytes on the pipe in the same order, queue what a full pipe cannot take
and drop (and count) the same lines past the bound.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_mcp.telemetry.stderr_writer import NonBlockingStderr

TWINS = {"fast": True, "plain": False}
DEADLINE_S = 30.0

# Call lines and the odd traceback: longer than PIPE_BUF, it is always written by the thread.
line_sizes = st.lists(
    st.one_of(st.integers(1, 400), st.integers(select.PIPE_BUF - 2, select.PIPE_BUF + 300)),
    min_size=1,
    max_size=30,
)


def lines_of(sizes: list[int]) -> list[bytes]:
    return [(b"%d:" % n + b"x" * size)[:size] + b"\n" for n, size in enumerate(sizes)]


class CountingPoll:
    """The writer's poll, counted: the fast path must not need it while the pipe has room."""

    def __init__(self, poll: Any) -> None:
        self.poll_object, self.calls = poll, 0

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        self.calls += 1
        result: list[tuple[int, int]] = self.poll_object.poll(timeout)
        return result


def read_all(read_end: int, expected: int) -> bytes:
    """Everything the writer put on the pipe, once `expected` bytes came or the deadline passed."""
    received = bytearray()
    deadline = time.monotonic() + DEADLINE_S
    while len(received) < expected and time.monotonic() < deadline:
        ready, _, _ = select.select([read_end], [], [], 0.05)
        if ready:
            received.extend(os.read(read_end, 1 << 16))
    return bytes(received)


def collect(into: list[bytes], read_end: int, expected: int) -> None:
    into.append(read_all(read_end, expected))


def fill(write_end: int) -> int:
    """Fill the pipe as a host that stops reading leaves it: every page full."""
    filled, filler = 0, b"." * select.PIPE_BUF
    while select.select([], [write_end], [], 0)[1]:
        filled += os.write(write_end, filler)
    return filled


@pytest.fixture
def pipes() -> Iterator[dict[str, tuple[int, int]]]:
    opened = {name: os.pipe() for name in TWINS}
    yield opened
    for read_end, write_end in opened.values():
        os.close(read_end)
        os.close(write_end)


@settings(max_examples=15, deadline=None)
@given(sizes=line_sizes)
def test_with_room_both_twins_write_the_same_bytes_in_the_same_order(sizes: list[int]) -> None:
    lines = lines_of(sizes)
    received, polls = {}, {}
    for name, nowait in TWINS.items():
        read_end, write_end = os.pipe()
        try:
            writer = NonBlockingStderr(write_end, nowait=nowait)
            writer._room = counting = CountingPoll(writer._room)  # type: ignore[assignment]
            got: list[bytes] = []
            reader = threading.Thread(target=collect, args=(got, read_end, len(b"".join(lines))))
            reader.start()
            for line in lines:
                writer.write_bytes(line)
            writer.flush()
            reader.join(timeout=DEADLINE_S + 5)
            received[name], polls[name] = got[0], counting.calls
            assert writer.dropped == 0
            assert os.get_blocking(write_end), "the pipe's own description must stay blocking"
        finally:
            os.close(read_end)
            os.close(write_end)

    assert received["fast"] == received["plain"] == b"".join(lines)
    if all(len(line) <= select.PIPE_BUF for line in lines):
        assert polls["plain"] >= len(lines)
        assert polls["fast"] == 0, "a line the pipe had room for went through the plain path"


def test_a_full_pipe_queues_then_drops_the_same_lines_on_both_twins(
    pipes: dict[str, tuple[int, int]],
) -> None:
    lines = lines_of([150] * 40)
    outcome = {}
    for name, nowait in TWINS.items():
        read_end, write_end = pipes[name]
        writer = NonBlockingStderr(write_end, max_queued_bytes=10 * 151, nowait=nowait)
        filled = fill(write_end)
        writer.write_bytes(lines[0])
        deadline = time.monotonic() + DEADLINE_S
        while not writer._writing and time.monotonic() < deadline:  # its thread took it: blocked
            time.sleep(0.005)
        for line in lines[1:]:
            writer.write_bytes(line)
        kept = len(lines) - writer.dropped
        received = read_all(read_end, filled + kept * 151)
        outcome[name] = (received[filled:], writer.dropped)

    assert outcome["fast"] == outcome["plain"]
    written, dropped = outcome["fast"]
    assert dropped == len(lines) - 11  # the thread's line and ten queued ones; every later one dropped
    assert written == b"".join(lines[:11])
