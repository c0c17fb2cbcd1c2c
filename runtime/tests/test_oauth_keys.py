"""`SigningKeyCache`'s policy on a clock the test moves: known keys, one refresh, back-off, age."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import jwt
import pytest

from oauth_issuer import Issuer
from resilient_mcp.http.oauth_keys import (
    MAX_AGE_S,
    MIN_INTERVAL_S,
    RETRY_AFTER_S,
    SigningKeyCache,
    UnknownKeyError,
)

pytestmark = pytest.mark.anyio
KID = "test-key-1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class KeySet:
    """The issuer's JWKS as a fetch sees it: its keys, down, or hanging until released."""

    def __init__(self) -> None:
        self.issuer = Issuer("https://issuer.example")
        self.down = False
        self.released = threading.Event()
        self.released.set()
        self.fetches = 0

    def fetch(self) -> list[jwt.PyJWK]:
        self.fetches += 1
        self.released.wait()
        if self.down:
            raise jwt.PyJWKClientConnectionError("Fail to fetch data from the url, err: 503")
        return list(jwt.PyJWKSet.from_dict(self.issuer.jwks()).keys)


@pytest.fixture
def key_set() -> Iterator[KeySet]:
    key_set = KeySet()
    yield key_set
    key_set.released.set()  # no fetch thread outlives the test


def cache(key_set: KeySet, clock: Clock, *, wait_s: float = 60.0) -> SigningKeyCache:
    """Generous waits by default: a test never depends on a short timeout."""
    return SigningKeyCache(key_set.fetch, clock=clock, wait_s=wait_s)


async def refused(keys: SigningKeyCache, kid: str) -> str:
    with pytest.raises(UnknownKeyError) as refusal:
        await keys.signing_key(kid)
    return str(refusal.value)


async def test_a_known_key_is_answered_while_a_refresh_hangs_and_an_unknown_kid_waits_at_most_the_bound(
    key_set: KeySet,
) -> None:
    clock = Clock()
    keys = cache(key_set, clock, wait_s=0.05)
    assert (await keys.signing_key(KID)).key_id == KID
    clock.now += MIN_INTERVAL_S
    key_set.released.clear()
    assert "did not answer within 0.05 s" in await refused(keys, "unknown")  # the fetch goes on
    for _ in range(3):
        assert (await keys.signing_key(KID)).key_id == KID
    assert key_set.fetches == 2


async def test_unknown_kids_share_one_refresh(key_set: KeySet) -> None:
    clock = Clock()
    keys = cache(key_set, clock)
    key_set.released.clear()
    found: list[str] = []

    async def look_up() -> None:
        found.append((await keys.signing_key(KID)).key_id or "")

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(look_up)
        await anyio.sleep(0.1)  # let them all wait on the refresh
        key_set.released.set()
    assert found == [KID] * 20
    assert key_set.fetches == 1


async def test_a_new_key_is_fetched_once_the_minimum_interval_passed(key_set: KeySet) -> None:
    clock = Clock()
    keys = cache(key_set, clock)
    await keys.signing_key(KID)
    key_set.issuer.publish_new_key("rotated")
    clock.now += MIN_INTERVAL_S / 2
    assert "next fetch in" in await refused(keys, "rotated")
    assert key_set.fetches == 1
    clock.now += MIN_INTERVAL_S / 2
    assert (await keys.signing_key("rotated")).key_id == "rotated"
    assert key_set.fetches == 2


async def test_failed_refreshes_back_off_for_unknown_kids_only_and_keep_the_known_keys(
    key_set: KeySet,
) -> None:
    clock = Clock()
    keys = cache(key_set, clock)
    await keys.signing_key(KID)
    key_set.down = True
    clock.now += MIN_INTERVAL_S
    assert "key set failed: PyJWKClientConnectionError" in await refused(keys, "attacker-1")
    for wait in (RETRY_AFTER_S[0], 2 * RETRY_AFTER_S[0]):
        clock.now += wait - 0.1
        assert "next try in" in await refused(keys, "attacker-2")  # no fetch
        assert (await keys.signing_key(KID)).key_id == KID
        clock.now += 0.1
        await refused(keys, "attacker-3")  # one fetch, failed: the next wait doubles
    assert key_set.fetches == 4
    clock.now += 1000 * RETRY_AFTER_S[1]  # an outage longer than the key set's age
    assert (await keys.signing_key(KID)).key_id == KID


async def test_a_key_leaves_when_a_key_set_that_answered_no_longer_lists_it(key_set: KeySet) -> None:
    clock = Clock()
    keys = cache(key_set, clock)
    await keys.signing_key(KID)
    key_set.issuer.published["rotated"] = key_set.issuer.key
    key_set.issuer.kid = "rotated"  # the old kid is gone from the set
    clock.now += MAX_AGE_S
    key_set.released.clear()
    assert (await keys.signing_key(KID)).key_id == KID  # at once, though the refresh it started hangs
    key_set.released.set()
    assert (await keys.signing_key("rotated")).key_id == "rotated"  # waits for that refresh
    assert "in the issuer's key set" in await refused(keys, KID)
    assert key_set.fetches == 2
    assert (await keys.signing_key("rotated")).key_id == "rotated"
