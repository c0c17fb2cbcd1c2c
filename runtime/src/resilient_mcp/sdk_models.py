"""The SDK imported with its pydantic models built at their first use, not at its import.

Importing `mcp.server.mcpserver` defines some two hundred pydantic models (`mcp_types` and the
SDK's own), and pydantic builds each one's validator and serializer as the class is made: the
largest part of a server's start-up, for models a server mostly never uses (the client's
requests, sampling, elicitation, every result type of methods it does not serve). Deferred
(pydantic's `defer_build`), a model is built the first time something validates, dumps or
describes it, under pydantic's own lock, with the same result.

pydantic has no setting for that outside a model's `model_config`, and a class takes its
config from its bases when it is made: set on `BaseModel` while the SDK is imported, and
taken off again, it reaches the SDK's models alone (and their subclasses, defined later).
Models defined after, the owner's and the core's, are built as they are defined.

Only from pydantic 2.14 on, which builds a deferred model under a lock: before, a model whose
first use came from two threads at once (sync tools run in worker threads) could validate with
its parent's validator meanwhile (pydantic#11849, fixed by #13438). On an older pydantic the SDK
is imported as it is.
"""

from __future__ import annotations

import importlib
import sys

from pydantic import BaseModel
from pydantic.version import VERSION as PYDANTIC_VERSION

SDK_MODULE = "mcp.server.mcpserver"
LOCKED_REBUILDS_SINCE = (2, 14)  # the pydantic release whose model_rebuild takes a lock


def rebuilds_under_a_lock(version: str) -> bool:
    """Whether this pydantic version builds a deferred model under a lock (thread-safe)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= LOCKED_REBUILDS_SINCE


def import_sdk_with_deferred_models() -> None:
    """Import the SDK so that its models are built at their first use.

    Serving calls it before anything imports the SDK; where something already has, where
    pydantic is older than 2.14, where `defer_build` is already someone's choice, or where
    pydantic no longer lets its default config be changed, the SDK is imported as it is.
    """
    if SDK_MODULE in sys.modules:
        return
    config = BaseModel.model_config
    # Not over someone's own choice, nor into a mapping a later pydantic might make read-only.
    deferring = (
        rebuilds_under_a_lock(PYDANTIC_VERSION) and isinstance(config, dict) and "defer_build" not in config
    )
    if deferring:
        config["defer_build"] = True
    try:
        importlib.import_module(SDK_MODULE)
    finally:
        if deferring:
            del config["defer_build"]
