"""Talks to a server over stdio with the SDK's own client: lists its tools, calls health_check.

`nox -s demo` runs it against a freshly created server: `python stdio_client.py CMD [ARG...]`.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters


async def show(command: str, args: list[str]) -> int:
    # The whole environment, as an MCP client config's "env" would give it (the SDK passes
    # only a safe few variables by default): the demo's data directory setting included.
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with Client(params) as client:
        listed = await client.list_tools()
        print(f"tools/list: {len(listed.tools)} tools")
        for declared in listed.tools:
            first_line = (declared.description or "").partition("\n")[0]
            print(f"  {declared.name}: {first_line}")
        health = await client.call_tool("health_check", {})
        print("tools/call health_check:")
        print(json.dumps(health.structured_content, indent=2))
        return 1 if health.is_error else 0


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    return anyio.run(show, sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
