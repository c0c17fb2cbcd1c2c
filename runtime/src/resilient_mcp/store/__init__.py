"""The idempotency table: a side-effecting call with a given key runs at most once.

The interface is in `store.py`; one SQL layer, `sql.py`, implements it for both backends,
each adding its dialect: `sqlite.py` (a file in the data directory) and, in projects
rendered with the postgres backend, `postgres.py` (shared by replicas). The rules both
follow are in `rules.py`, owner liveness in `instances.py`. The resilience layer claims a
key before the side effect and records how it ended; `<slug> keys` lets an operator settle
the keys whose outcome is unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resilient_mcp.project import this_project
from resilient_mcp.store.fingerprint import KEY_ARGUMENT, fingerprint
from resilient_mcp.store.handle import StoreHandle
from resilient_mcp.store.store import (
    BODY_ENDED,
    BODY_NOT_STARTED,
    BODY_RUNNING,
    DB_FILENAME,
    DEFAULT_TTL_S,
    HEARTBEAT_S,
    LEGACY_CALLER,
    LOCAL_CALLER,
    MAX_RETRY_AFTER_S,
    Claim,
    ClaimKind,
    IdempotencyStore,
    KeyRecord,
    KeyState,
    Outcome,
    settled_result,
)

if TYPE_CHECKING:
    from resilient_mcp.authoring.settings import CoreSettings


def create_store(settings: CoreSettings) -> IdempotencyStore:
    """The store of the backend chosen at `copier copy` (`project.IDEMPOTENCY_BACKEND`); not yet opened.

    postgres: the database at `DATABASE_URL`; sqlite: a file in `DATA_DIR`.
    """
    if this_project().idempotency_backend == "postgres":
        from resilient_mcp.store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]

        store: IdempotencyStore = PostgresStore(
            settings.database_url, ttl_s=settings.idempotency_ttl_s, task_ttl_s=settings.task_ttl_s
        )
        return store
    from resilient_mcp.store.sqlite import SQLiteStore

    return SQLiteStore(
        settings.data_dir / DB_FILENAME, ttl_s=settings.idempotency_ttl_s, task_ttl_s=settings.task_ttl_s
    )


__all__ = [
    "BODY_ENDED",
    "BODY_NOT_STARTED",
    "BODY_RUNNING",
    "DB_FILENAME",
    "DEFAULT_TTL_S",
    "HEARTBEAT_S",
    "KEY_ARGUMENT",
    "LEGACY_CALLER",
    "LOCAL_CALLER",
    "MAX_RETRY_AFTER_S",
    "Claim",
    "ClaimKind",
    "IdempotencyStore",
    "KeyRecord",
    "KeyState",
    "Outcome",
    "StoreHandle",
    "create_store",
    "fingerprint",
    "settled_result",
]
