"""A separate server process for the idempotency tests, sharing the test's table.

    python idempotency_worker.py BACKEND TARGET TOOL FINGERPRINT HEARTBEAT_S STAGE KEY...

Opens a store and prints "ready"; on a line from stdin claims every KEY (lease 60 s),
marks each new claim started when STAGE is "started" (as a tool body about to run
does; "claimed" stops before that; "with-claim" has each claim record the start itself,
as an async tool's does), and prints the claims' kinds as one JSON list. With
STAGE "later" it then waits for another line, marks them started and prints, as a JSON
list, "started" or "lost" (the claim was taken over). It holds its claims until stdin
closes (it closes the store and exits 0) or it is killed.
"""

from __future__ import annotations

import json
import sys

import anyio

from idempotency_support import new_store
from resilient_mcp.authoring.errors import ClaimLostError
from resilient_mcp.store import IdempotencyStore


async def main(argv: list[str]) -> int:
    backend, target, tool, fingerprint, heartbeat_s, stage, *keys = argv
    store = new_store(backend, target, heartbeat_s=float(heartbeat_s))
    await store.open()
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await anyio.to_thread.run_sync(sys.stdin.readline)
        started = stage == "with-claim"
        kinds = [(await store.claim(tool, key, fingerprint, 60.0, started=started)).kind for key in keys]
        if stage == "started":
            for key, kind in zip(keys, kinds, strict=True):
                if kind == "new":
                    await store.mark_started(tool, key)
        sys.stdout.write(json.dumps(kinds) + "\n")
        sys.stdout.flush()
        if stage == "later":
            await anyio.to_thread.run_sync(sys.stdin.readline)
            marks = [await _mark(store, tool, key) for key in keys]
            sys.stdout.write(json.dumps(marks) + "\n")
            sys.stdout.flush()
        await anyio.to_thread.run_sync(sys.stdin.read)
    finally:
        await store.close()
    return 0


async def _mark(store: IdempotencyStore, tool: str, key: str) -> str:
    try:
        await store.mark_started(tool, key)
    except ClaimLostError:
        return "lost"
    return "started"


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
