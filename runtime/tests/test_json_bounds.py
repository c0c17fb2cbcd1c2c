"""A body's object members, counted from its bytes before the SDK parses it (in-process ASGI, no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from resilient_mcp.http.json_bounds import MAX_OBJECT_MEMBERS, ObjectMemberLimit, object_members


def members(value: Any) -> int:
    """The plain twin: the object members a parser builds."""
    if isinstance(value, dict):
        return len(value) + sum(members(item) for item in value.values())
    if isinstance(value, list):
        return sum(members(item) for item in value)
    return 0


DOCUMENTS: list[Any] = [
    {},
    {"a": 1},
    {"a": {"b": {"c": [1, {"d": None}]}}},
    [{"k": "v"}, {"k": "v", "l": [{}]}],
    {"text": 'she said "yes": twice', "json": json.dumps({"inner": 1, "more": {"x": 2}})},
    {"spaced": '  : " : ', "colon:key": ":", '"': '":'},
    {"unicode": "é😀", "numbers": [1.5, -2, 3e10], "flags": [True, False, None]},
    {f"k{i}": i for i in range(200)},
]


@pytest.mark.parametrize("document", DOCUMENTS)
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indented"])
def test_the_count_never_falls_below_the_parsers(document: Any, indent: int | None) -> None:
    body = json.dumps(document, indent=indent).encode()
    assert object_members(body) >= members(document)


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if "json" not in d and '"' not in d])
def test_the_count_is_exact_when_no_string_holds_a_quote_before_a_colon(document: Any) -> None:
    assert object_members(json.dumps(document).encode()) == members(document)


def test_whitespace_between_a_key_and_its_colon_is_seen_through() -> None:
    assert object_members(b'{"a" :1, "b"\n\t:\r {"c"  :  2}}') == 3


class Recorded:
    """The app behind the limit: what body it read, whether it ran."""

    def __init__(self) -> None:
        self.body: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        self.body = b"".join(chunks)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def post(
    body: bytes, *, chunk: int = 1000, max_body_bytes: int = 4_000_000
) -> tuple[int, bytes, Recorded]:
    app = Recorded()
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    last = len(pieces) - 1
    incoming: list[Message] = [
        {"type": "http.request", "body": piece, "more_body": i < last} for i, piece in enumerate(pieces)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    await ObjectMemberLimit(app, max_body_bytes)(scope, receive, send)
    status = sent[0]["status"]
    return status, b"".join(m.get("body", b"") for m in sent[1:]), app


def many_members(count: int) -> bytes:
    arguments = {f"k{i}": 0 for i in range(count - 3)}  # params, name, arguments: 3 more
    return json.dumps({"params": {"name": "echo", "arguments": arguments}}).encode()


@pytest.mark.anyio
async def test_a_body_within_the_bound_reaches_the_app_unchanged_whatever_its_chunks() -> None:
    body = many_members(MAX_OBJECT_MEMBERS)
    status, _, app = await post(body, chunk=777)
    assert status == 200
    assert app.body == body


@pytest.mark.anyio
async def test_a_body_past_the_bound_is_refused_unparsed() -> None:
    status, answer, app = await post(many_members(MAX_OBJECT_MEMBERS + 1))
    assert status == 400
    error = json.loads(answer)
    assert (error["id"], error["error"]["code"]) == (None, -32600)
    assert f"{MAX_OBJECT_MEMBERS + 1} object members" in error["error"]["message"]
    assert app.body is None


@pytest.mark.anyio
async def test_a_body_past_the_size_limit_is_handed_on_uncounted_for_the_sdks_413() -> None:
    body = many_members(MAX_OBJECT_MEMBERS + 1)
    status, _, app = await post(body, max_body_bytes=len(body) // 2)
    assert status == 200
    assert app.body == body
