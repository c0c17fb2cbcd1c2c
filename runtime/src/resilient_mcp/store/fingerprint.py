"""The fingerprint of a call's arguments: the same logical request always hashes the same."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_jsonable_python

KEY_ARGUMENT = "idempotency_key"


# Canonical: sorted keys, no whitespace, non-ASCII kept as is. Made once: `json.dumps` with
# options builds an encoder on every call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    default=to_jsonable_python,  # validated values: models, datetimes, decimals
)


def fingerprint(arguments: Mapping[str, Any]) -> str:
    """sha256 (hex) of the arguments as canonical JSON, leaving out the idempotency key itself.

    Canonical, so that key order and formatting on the wire never make one request look
    like another.
    """
    payload = {name: value for name, value in arguments.items() if name != KEY_ARGUMENT}
    text = _CANONICAL.encode(payload)
    # surrogatepass: a lone surrogate from a JSON "\ud800" escape must hash, not crash.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
