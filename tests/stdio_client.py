"""Talks to a server over stdio with the SDK's own client, as an MCP host would.

`nox -s demo` runs it against a freshly created server: `python stdio_client.py CMD [ARG...]`.
It lists the tools, calls health_check, then shows what a model sees from the example
tools: a bad input (`invalid_input`), a side-effecting call, its retry with the same
idempotency key (answered from the idempotency table: `_meta.idempotency.replayed`, the
note written once), the same key with other arguments (`conflict`), and a new key.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

import anyio
from mcp import Client, StdioServerParameters


def outcome(result: Any) -> str:
    """One line: the failure's category and message, or the structured result; then `_meta`."""
    meta = result.meta or {}
    if result.is_error:
        text = next((block.text for block in result.content if hasattr(block, "text")), "")
        shown = f"isError {text}"
    else:
        shown = json.dumps(result.structured_content)
    extra = {key: meta[key] for key in ("error", "idempotency") if key in meta}
    return shown + (f"\n      _meta: {json.dumps(extra)}" if extra else "")


async def call(client: Client, label: str, name: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(name, arguments)
    print(f"  {label}\n    {name}({json.dumps(arguments)})\n    -> {outcome(result)}")
    return result


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
        names = {declared.name for declared in listed.tools}
        if not {"word_count", "append_note"} <= names:
            return 1 if health.is_error else 0

        print("What a model sees from the example tools:")
        await call(client, "a good call", "word_count", {"text": "the quick brown fox"})
        bad = await call(client, "bad input: a failure category, not a crash", "word_count", {"text": "  "})
        invalid = await call(
            client, "bad input the schema catches", "word_count", {"text": "a", "min_length": 0}
        )
        key = f"demo:{uuid.uuid4().hex[:8]}"
        note = {"notebook": "demo", "text": "written once", "idempotency_key": key}
        first = await call(client, "a side effect, with an idempotency key", "append_note", note)
        again = await call(
            client, "the client retries it with the same key (say its answer was lost)", "append_note", note
        )
        conflict = await call(
            client, "the same key with other arguments", "append_note", {**note, "text": "something else"}
        )
        await call(
            client, "a new operation gets a new key", "append_note", {**note, "idempotency_key": key + "-2"}
        )
        replayed = (again.meta or {}).get("idempotency", {}).get("replayed") is True
        same = again.structured_content == first.structured_content
        print(f"the retry was replayed: {replayed}; same answer, note written once: {same}")
        expected = bad.is_error and invalid.is_error and conflict.is_error and not first.is_error
        return 0 if expected and replayed and same and not health.is_error else 1


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    return anyio.run(show, sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
