"""2026-07-28 caching hints (`ttlMs`, `cacheScope`) on `server/discover` and every list result."""

from __future__ import annotations

from mcp.server.caching import CacheableMethod, CacheHint

from resilient_mcp.authoring.settings import CoreSettings

# resources/read is cacheable too, but how long a resource stays fresh is the owner's to say.
HINTED_METHODS: tuple[CacheableMethod, ...] = (
    "server/discover",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
)


def cache_hints(settings: CoreSettings) -> dict[CacheableMethod, CacheHint]:
    """One hint from `LIST_TTL_MS` and `CACHE_SCOPE` for each method whose result lists the surface."""
    hint = CacheHint(ttl_ms=settings.list_ttl_ms, scope=settings.cache_scope)
    return dict.fromkeys(HINTED_METHODS, hint)
