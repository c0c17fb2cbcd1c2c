"""A JSON answer sent from an ASGI layer, before the request reaches the SDK."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.types import Send


async def send_json(
    send: Send, status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """`payload` as the whole response, with its length and any extra headers."""
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
