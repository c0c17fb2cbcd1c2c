"""Every stdin line gets an answer: what the SDK would drop is answered here (in-process, no server)."""

from __future__ import annotations

import io
import json
from typing import Any

import anyio
import pytest
from mcp.types import JSONRPCRequest

from resilient_mcp.stdio.lines import MAX_LINE_BYTES, AnsweringLines, read_line, rejection

PING = '{"jsonrpc": "2.0", "id": 7, "method": "ping"}'


def error_of(line: str | None) -> tuple[Any, int]:
    assert line is not None
    answer = json.loads(line)
    assert answer["jsonrpc"] == "2.0"
    return answer["id"], answer["error"]["code"]


def test_a_valid_message_goes_to_the_sdk_unanswered() -> None:
    message, answer = read_line(PING)
    assert answer is None
    assert isinstance(message, JSONRPCRequest)
    assert message.id == 7


@pytest.mark.parametrize("line", ["", "   ", "\n"])
def test_a_blank_line_is_neither_passed_on_nor_answered(line: str) -> None:
    assert read_line(line) == (None, None)


@pytest.mark.parametrize(
    ("line", "request_id", "code"),
    [
        ("not json at all", None, -32700),
        ('{"jsonrpc": "2.0", "id": 3, "method": ', None, -32700),
        ("[" * 100_000, None, -32700),  # deeper than any parser goes
        ('{"jsonrpc": "2.0", "id": 3}', 3, -32600),  # JSON, but no method
        ('{"jsonrpc": "1.0", "id": "a-1", "method": "ping"}', "a-1", -32600),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', None, -32600),  # the SDK's "notification"
        ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', None, -32600),
        ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', None, -32600),
        ("[1, 2]", None, -32600),
        ("42", None, -32600),
    ],
)
def test_a_line_the_sdk_would_drop_is_answered_with_its_id(line: str, request_id: Any, code: int) -> None:
    assert error_of(rejection(line)) == (request_id, code)


def test_a_notification_goes_to_the_sdk() -> None:
    assert rejection('{"jsonrpc": "2.0", "method": "notifications/initialized"}') is None


async def answered(stdin: str) -> tuple[list[str], list[str], bool]:
    """What AnsweringLines passes on, what it writes on the wire, and whether it saw the end."""
    ended = False

    async def end_of_input() -> None:
        nonlocal ended
        ended = True

    wire = io.StringIO()
    lines = AnsweringLines(anyio.wrap_file(io.StringIO(stdin)), anyio.wrap_file(wire), end_of_input)
    passed = [line async for line in lines]
    return passed, wire.getvalue().splitlines(), ended


@pytest.mark.anyio
async def test_lines_in_order_valid_ones_passed_on_the_others_answered() -> None:
    passed, wire, ended = await answered(f"{PING}\nnonsense\n\n{PING}\n")
    assert passed == [f"{PING}\n", f"{PING}\n"]  # a blank line is neither passed on nor answered
    assert [error_of(line) for line in wire] == [(None, -32700)]
    assert ended


@pytest.mark.anyio
async def test_a_line_too_long_is_answered_and_dropped_and_the_next_one_read() -> None:
    too_long = '{"jsonrpc": "2.0", "id": 9, "method": "ping", "pad": "' + "x" * MAX_LINE_BYTES + '"}'
    passed, wire, _ = await answered(f"{too_long}\n{PING}\n")
    assert passed == [f"{PING}\n"]
    assert [error_of(line) for line in wire] == [(None, -32600)]
    assert f"over {MAX_LINE_BYTES} bytes" in wire[0]


@pytest.mark.anyio
async def test_a_line_of_exactly_the_limit_is_kept() -> None:
    line = '{"jsonrpc": "2.0", "id": 9, "method": "ping", "pad": "'
    line += "x" * (MAX_LINE_BYTES - len(line) - 2) + '"}'
    assert len(line) == MAX_LINE_BYTES
    passed, wire, _ = await answered(f"{line}\n")
    assert passed == [f"{line}\n"]
    assert wire == []
