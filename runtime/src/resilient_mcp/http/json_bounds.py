"""A request body's object members, counted before the SDK parses it.

The SDK parses an HTTP body on the event loop, and each object member costs it a key
string and a dict slot, so one body of a few hundred thousand keys held every client,
the probes included, before any check of ours could run. Members are counted here from
the raw bytes, far faster than parsing them, and a body with more than
`MAX_OBJECT_MEMBERS` is refused with a JSON-RPC error (HTTP 400) before it is parsed.
Arrays of numbers or strings cost the SDK little and are not counted; the body's size
stays `MAX_REQUEST_BYTES`' job. benchmarks/REQUEST_BOUNDS.md has the figures.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from resilient_mcp.http.asgi_json import send_json
from resilient_mcp.telemetry.logs import get_logger

log = get_logger(__name__)

# A model writes a few dozen keys in a call; this many still parse in a few milliseconds.
MAX_OBJECT_MEMBERS = 10_000
INVALID_REQUEST = -32600
_JSON_WHITESPACE = b" \t\r\n"


def object_members(body: bytes) -> int:
    """An upper bound on the object members in a JSON body: every `"` followed by `:`.

    A key's closing quote and its colon (whitespace aside) are one per member. Elsewhere
    a quote meets a colon only in a string: an escaped quote (`\\":`, as in JSON held in
    a string) or the opening quote of a string that begins with one (spaces aside): those count:
    a bound, never an undercount. Deleting the whitespace first keeps it to two passes in
    C over the bytes.
    """
    return body.translate(None, _JSON_WHITESPACE).count(b'":')


def too_many_members(members: int) -> str:
    return (
        f"Invalid request: {members} object members in one request, over the limit of "
        f"{MAX_OBJECT_MEMBERS}; send fewer keys, or split the data across calls"
    )


def count_members_after_auth(app: Starlette, path: str, max_body_bytes: int) -> None:
    """Count the members of the bodies posted to `path`, once auth has let the caller in.

    The route is wrapped rather than the app: a caller that auth turns away gets its 401
    without its body being read.
    """
    for route in app.routes:
        if isinstance(route, Route) and route.path == path:
            route.app = ObjectMemberLimit(route.app, max_body_bytes)
            return
    raise LookupError(f"the SDK's HTTP app has no route {path}")  # the SDK changed: fail loudly


class ObjectMemberLimit:
    """ASGI middleware: a POST whose body has too many object members gets 400, unparsed.

    The body is read here (the SDK reads it whole anyway) and handed on unchanged. Past
    `max_body_bytes` it is handed on as it is, uncounted, for the SDK's own 413.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")  # set by the auth middleware when auth is on
        turned_away = user is not None and not user.is_authenticated  # its 401 comes next
        if scope["type"] != "http" or scope["method"] != "POST" or turned_away:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                break
            if size > self.max_body_bytes:
                await self.app(scope, _replay(chunks, None, receive, more=True), send)
                return
        body = b"".join(chunks)
        members = object_members(body)
        if members > MAX_OBJECT_MEMBERS:
            log.warning("request_refused", reason="object_members", members=members, limit=MAX_OBJECT_MEMBERS)
            await _send_invalid_request(send, too_many_members(members))
            return
        await self.app(scope, _replay([body], None, receive), send)


def _replay(chunks: list[bytes], then: Message | None, receive: Receive, *, more: bool = False) -> Receive:
    """A receive() that gives the chunks read so far (or `then`), then reads on."""
    pending: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": more or i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    if then is not None:
        pending.append(then)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


async def _send_invalid_request(send: Send, message: str) -> None:
    error = {"code": INVALID_REQUEST, "message": message}
    await send_json(send, 400, {"jsonrpc": "2.0", "id": None, "error": error})
