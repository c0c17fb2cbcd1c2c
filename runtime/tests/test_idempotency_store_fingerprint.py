"""The arguments' fingerprint: one logical request, one fingerprint, however it was sent."""

from __future__ import annotations

import hashlib
from decimal import Decimal

from resilient_mcp.store import fingerprint


def test_key_order_and_the_idempotency_key_do_not_matter() -> None:
    sent_once = {"to": "ana@example.com", "subject": "Hi", "idempotency_key": "run-1:step-1"}
    sent_again = {"idempotency_key": "run-1:step-1:retry", "subject": "Hi", "to": "ana@example.com"}

    assert fingerprint(sent_once) == fingerprint(sent_again)


def test_any_other_difference_changes_the_fingerprint() -> None:
    base = {"amount": 10, "tags": ["a", "b"], "meta": {"x": None}}

    variants = [
        {**base, "amount": 11},
        {**base, "amount": "10"},
        {**base, "tags": ["b", "a"]},
        {**base, "meta": {"x": 0}},
        {**base, "extra": True},
    ]

    assert len({fingerprint(base), *(fingerprint(v) for v in variants)}) == len(variants) + 1


def test_fingerprint_is_sha256_of_canonical_json() -> None:
    canonical = '{"a":1,"b":"ключ"}'

    assert fingerprint({"b": "ключ", "a": 1}) == hashlib.sha256(canonical.encode()).hexdigest()


def test_unusual_values_still_fingerprint() -> None:
    assert len(fingerprint({"text": "\ud800 lone surrogate", "price": Decimal("1.10")})) == 64
