# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`AUTH=oauth`: an OAuth 2.1 resource server that accepts JWT access tokens.

PyJWT checks the signature against the issuer's JWKS (its `PyJWKClient` fetches and caches
the key set, and refetches when a token names a key it has not seen), then `iss`, `exp`,
`nbf` and the audience: this server's resource URL (RFC 8707). The SDK's bearer middleware
turns a refusal into 401, and a token without the required scopes into 403.

An issuer that cannot be reached refuses tokens (401, the only refusal a TokenVerifier has)
for a while after each failed fetch, so an outage costs one fetch's wait, not one per request.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import anyio
import jwt
from mcp.server.auth.provider import AccessToken

from ._errors import FatalError
from ._logs import get_logger
from ._project import ENV_PREFIX
from ._settings import CoreSettings
from ._text import clip

log = get_logger(__name__)
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
LEEWAY_S = 30  # clocks of the issuer and this server may differ a little
_FETCH_TIMEOUT_S = 10
_RETRY_AFTER_S = (5.0, 60.0)  # after a failed fetch: the first wait, doubling up to the cap
_NUMERIC_DATES = ("exp", "nbf", "iat")


class JwtTokenVerifier:
    """A TokenVerifier for JWT access tokens signed by the issuer's keys."""

    def __init__(self, *, issuer: str, audience: str, jwks_url: str | None) -> None:
        self.issuer = issuer
        self.audience = audience
        self._jwks_url = jwks_url
        self._keys: jwt.PyJWKClient | None = None
        # One fetch at a time: concurrent requests share its outcome instead of each waiting.
        self._fetching = threading.Lock()
        self._retry_at = 0.0
        self._retry_after_s = _RETRY_AFTER_S[0]

    def _client(self) -> jwt.PyJWKClient:
        if self._keys is None:
            url = self._jwks_url or discover_jwks_url(self.issuer)
            self._keys = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=_FETCH_TIMEOUT_S)
        return self._keys

    def _signing_key(self, token: str) -> jwt.PyJWK:
        """The token's key, from the cache or the issuer; refused at once while the issuer is backed off."""
        with self._fetching:
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise jwt.PyJWKClientConnectionError(f"the issuer failed; next try in {wait:.0f} s")
            try:
                key = self._client().get_signing_key_from_jwt(token)
            except (OSError, jwt.PyJWKClientConnectionError):
                self._retry_at = time.monotonic() + self._retry_after_s
                self._retry_after_s = min(2 * self._retry_after_s, _RETRY_AFTER_S[1])
                raise
            self._retry_after_s = _RETRY_AFTER_S[0]
            return key

    def _decode(self, token: str) -> dict[str, Any]:
        key = self._signing_key(token)
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=ALGORITHMS,
            audience=self.audience,
            issuer=self.issuer,
            leeway=LEEWAY_S,
            options={"require": ["exp", "iss", "aud"]},
        )
        for name in _NUMERIC_DATES:
            if name in claims and not is_numeric_date(claims[name]):
                raise jwt.InvalidTokenError(f"{name} is not a NumericDate")
        return claims

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            # PyJWKClient fetches with urllib: off the event loop.
            claims = await anyio.to_thread.run_sync(self._decode, token)
        except (jwt.PyJWTError, OSError, ValueError) as exc:
            # The reason, never the token.
            log.info("token_refused", reason=type(exc).__name__, detail=clip(str(exc), 200, mark=""))
            return None
        subject = str(claims.get("sub") or "")
        client_id = str(claims.get("client_id") or claims.get("azp") or subject)
        if not client_id:  # nobody to own its idempotency keys, tasks or rate limit
            log.info("token_refused", reason="no_subject", detail="the token has no sub, client_id or azp")
            return None
        return AccessToken(
            token=token,
            client_id=client_id,
            scopes=token_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=subject or None,
            claims={"iss": claims["iss"]},
        )


def is_numeric_date(value: object) -> bool:
    """RFC 7519: a JSON number; PyJWT alone also takes `"1767225600"` or `true`."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def token_scopes(claims: dict[str, Any]) -> list[str]:
    """`scope` (RFC 9068: space-separated) or `scp` (a list, as some issuers send)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [str(item) for item in scp]
    return []


def discover_jwks_url(issuer: str) -> str:
    """The `jwks_uri` of the issuer's metadata (RFC 8414, then OpenID Connect discovery)."""
    base = issuer.rstrip("/")
    for well_known in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        try:
            with urllib.request.urlopen(base + well_known, timeout=_FETCH_TIMEOUT_S) as response:
                metadata = json.load(response)
        except (OSError, ValueError):
            continue
        if isinstance(metadata, dict) and isinstance(metadata.get("jwks_uri"), str):
            return str(metadata["jwks_uri"])
    raise OSError(f"no jwks_uri in the metadata of {issuer}; set {ENV_PREFIX}OAUTH_JWKS_URL")


def oauth_verifier(settings: CoreSettings) -> JwtTokenVerifier:
    """The verifier for the configured issuer; a FatalError when a required setting is missing."""
    for name, value in (("OAUTH_ISSUER", settings.oauth_issuer), ("OAUTH_AUDIENCE", settings.oauth_audience)):
        if not value:
            raise FatalError(
                f"{ENV_PREFIX}AUTH=oauth but {ENV_PREFIX}{name} is not set",
                f"set {ENV_PREFIX}OAUTH_ISSUER to the authorization server's issuer URL and "
                f"{ENV_PREFIX}OAUTH_AUDIENCE to this server's URL (e.g. https://mcp.example.com/mcp)",
            )
    assert settings.oauth_issuer is not None
    assert settings.oauth_audience is not None
    return JwtTokenVerifier(
        issuer=settings.oauth_issuer, audience=settings.oauth_audience, jwks_url=settings.oauth_jwks_url
    )
