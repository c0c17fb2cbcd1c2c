"""The server's store, opened once on first use in the serving event loop (or at start-up)."""

from __future__ import annotations

import anyio

from resilient_mcp.store.store import IdempotencyStore


class StoreHandle:
    """The store, opened once on first use in the serving event loop (or at start-up)."""

    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store
        self._opened = False
        self._lock: anyio.Lock | None = None

    async def get(self) -> IdempotencyStore:
        """The open store; FatalError when it cannot be opened."""
        if not self._opened:
            self._lock = self._lock or anyio.Lock()
            async with self._lock:
                if not self._opened:
                    await self.store.open()
                    await self.store.purge_expired(self.store.ttl_s)
                    self._opened = True
        return self.store

    async def close(self) -> None:
        if self._opened:
            self._opened = False
            await self.store.close()
