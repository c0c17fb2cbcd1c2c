"""The issuer's signing keys by `kid`: kept through outages, refreshed one fetch at a time.

- A known key is answered at once, without a lock or a wait, whatever the issuer is doing. It
  stays known until a key set that answered no longer lists it: a failed fetch changes nothing.
- An unknown `kid` starts a refresh unless one ran within `MIN_INTERVAL_S` (a new signing key
  is accepted seconds after it is published) or the last ones failed (then a back-off, doubling).
  At most one refresh runs at a time; its fetch runs in a thread of its own, and a request
  waits for it at most `WAIT_S`, then is refused while the fetch goes on.
- A key set older than `MAX_AGE_S` is refreshed in the background by the next request with a
  known key, which does not wait for it: a key the issuer removed stops verifying soon after.

State changes only on the event loop (the fetching thread hands its outcome back to it), so no
lock is shared with the known-key path.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import jwt

from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.text import clip

log = get_logger(__name__)
WAIT_S = 2.0  # the longest a request waits for a refresh it needs
MIN_INTERVAL_S = 2.0  # after a refresh that answered: no other before this
RETRY_AFTER_S = (5.0, 60.0)  # after a failed refresh: the first wait, doubling up to the cap
MAX_AGE_S = 300.0  # a key set older than this is refreshed in the background


class UnknownKeyError(jwt.PyJWKClientError):
    """The token names a key that the issuer's key set does not hold (or could not be fetched)."""


@dataclass
class _Refresh:
    """One fetch of the key set in flight, on the loop its waiters run on."""

    loop: asyncio.AbstractEventLoop
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class SigningKeyCache:
    """The issuer's signing keys, by kid, as the last key set that answered listed them."""

    def __init__(
        self,
        fetch: Callable[[], list[jwt.PyJWK]],
        *,
        clock: Callable[[], float] = time.monotonic,
        wait_s: float = WAIT_S,
        min_interval_s: float = MIN_INTERVAL_S,
        retry_after_s: tuple[float, float] = RETRY_AFTER_S,
        max_age_s: float = MAX_AGE_S,
    ) -> None:
        self._fetch = fetch  # blocking; called in the refresh's own thread
        self._clock = clock
        self._wait_s = wait_s
        self._min_interval_s = min_interval_s
        self._retry_after_s = retry_after_s
        self._max_age_s = max_age_s
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # when a key set last answered
        self._next_refresh_at = float("-inf")  # the minimum interval or the back-off
        self._failures = 0  # refreshes failed in a row
        self._last_failure = ""
        self._refresh: _Refresh | None = None

    async def signing_key(self, kid: str) -> jwt.PyJWK:
        """The key named `kid`; an `UnknownKeyError` saying why when there is none."""
        key = self._keys.get(kid)
        if key is not None:
            if self._fetched_at is not None and self._clock() - self._fetched_at >= self._max_age_s:
                self._start_refresh()  # in the background: this request does not wait for it
            return key
        refresh = self._refresh or self._start_refresh()
        if refresh is None:
            raise UnknownKeyError(f'no key "{kid}" in the issuer\'s key set; {self._why_no_refresh()}')
        with anyio.move_on_after(self._wait_s):
            await refresh.ended.wait()
        key = self._keys.get(kid)
        if key is not None:
            return key
        if not refresh.ended.is_set():
            raise UnknownKeyError(
                f'no key "{kid}" yet: the issuer\'s key set did not answer within {self._wait_s:g} s'
            )
        if self._failures:
            raise UnknownKeyError(f'no key "{kid}": the issuer\'s key set failed: {self._last_failure}')
        raise UnknownKeyError(f'no key "{kid}" in the issuer\'s key set, fetched just now')

    def _why_no_refresh(self) -> str:
        wait = max(self._next_refresh_at - self._clock(), 0.0)
        if self._failures:
            return f"fetching it failed ({self._last_failure}); next try in {wait:.0f} s"
        return f"it was fetched {self._min_interval_s:g} s ago or less; next fetch in {wait:.1f} s"

    def _start_refresh(self) -> _Refresh | None:
        """A new refresh, unless one runs or the minimum interval or back-off has not passed."""
        if self._refresh is not None or self._clock() < self._next_refresh_at:
            return None
        refresh = _Refresh(asyncio.get_running_loop())
        self._refresh = refresh
        thread = threading.Thread(
            target=self._fetch_in_thread, args=(refresh,), name="oauth-key-refresh", daemon=True
        )
        thread.start()
        return refresh

    def _fetch_in_thread(self, refresh: _Refresh) -> None:
        outcome: list[jwt.PyJWK] | Exception
        try:
            outcome = self._fetch()
        except Exception as exc:  # any failure leaves the known keys as they are
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server has stopped
            refresh.loop.call_soon_threadsafe(self._finish, refresh, outcome)

    def _finish(self, refresh: _Refresh, outcome: list[jwt.PyJWK] | Exception) -> None:
        """On the loop: the refresh's outcome becomes the cache's state."""
        now = self._clock()
        if isinstance(outcome, Exception):
            self._failures += 1
            retry_after_s = min(self._retry_after_s[0] * 2 ** (self._failures - 1), self._retry_after_s[1])
            self._next_refresh_at = now + retry_after_s
            self._last_failure = clip(f"{type(outcome).__name__}: {outcome}", 200, mark="")
            log.warning(
                "oauth_keys_unavailable",
                detail=self._last_failure,
                known_keys=len(self._keys),
                retry_after_s=retry_after_s,
            )
        else:
            keys = {key.key_id: key for key in outcome if key.key_id}
            if keys.keys() != self._keys.keys():
                log.info("oauth_keys_fetched", keys=len(keys))
            self._keys = keys
            self._fetched_at = now
            self._failures = 0
            self._next_refresh_at = now + self._min_interval_s
        self._refresh = None
        refresh.ended.set()
