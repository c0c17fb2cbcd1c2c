"""Calls one tool of a server over Streamable HTTP with the SDK's own client and a bearer token.

The image tests import it, and also run it inside a container of the image (which has the SDK):
`python - URL TOOL ARGUMENTS_JSON < container_client.py`, the token in `MCP_BEARER_TOKEN`. It
prints the result as one JSON object: `is_error`, `text`, `structured` and `meta`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def call_tool(url: str, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call on a new connection, as a client that retries after a lost answer would.

    The tools are listed first, as a host does: the SDK's client would otherwise list them after
    the answer, to check it against the tool's output schema, and a server that drains after the
    call (the SIGTERM test) no longer answers that second request."""
    http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http_client)) as client:
        await client.list_tools()
        result = await client.call_tool(name, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    return {
        "is_error": result.is_error,
        "text": text,
        "structured": result.structured_content,
        "meta": result.meta,
    }


def main() -> int:
    url, name, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    answer = anyio.run(call_tool, url, os.environ["MCP_BEARER_TOKEN"], name, arguments)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
