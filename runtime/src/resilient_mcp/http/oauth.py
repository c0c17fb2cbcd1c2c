"""`AUTH=oauth`: an OAuth 2.1 resource server that accepts JWT access tokens.

PyJWT checks the signature against the issuer's keys, then `iss`, `exp`, `nbf` and the
audience: this server's resource URL (RFC 8707). The SDK's bearer middleware turns a refusal
into 401, and a token without the required scopes into 403. A token must name its caller
(`sub`, else `client_id` or `azp`): one that names nobody is refused, since callers are told
apart by it (sessions, rate limits, idempotency keys).

The keys come from the issuer's JWKS (PyJWT's `PyJWKClient` fetches and parses it) through
`SigningKeyCache` (`http/oauth_keys.py`): a key that verified keeps verifying while the issuer is
unreachable, and a token naming an unknown key waits at most a couple of seconds for one
refresh that all such tokens share, never delaying the others.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import jwt
from mcp.server.auth.provider import AccessToken

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.http.oauth_keys import SigningKeyCache
from resilient_mcp.project import this_project
from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.text import clip

log = get_logger(__name__)
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
LEEWAY_S = 30  # clocks of the issuer and this server may differ a little
FETCH_TIMEOUT_S = 10  # one fetch of metadata or keys; no request waits this long (see http/oauth_keys.py)
_NUMERIC_DATES = ("exp", "nbf", "iat")


class NoCallerError(jwt.InvalidTokenError):
    """The token names no caller: neither `sub` nor `client_id` (nor `azp`)."""


class JwtTokenVerifier:
    """A TokenVerifier for JWT access tokens signed by the issuer's keys."""

    def __init__(self, *, issuer: str, audience: str, jwks_url: str | None) -> None:
        self.issuer = issuer
        self.audience = audience
        self._jwks_url = jwks_url
        self._jwks: jwt.PyJWKClient | None = None
        self.keys = SigningKeyCache(self._fetch_keys)

    def _fetch_keys(self) -> list[jwt.PyJWK]:
        """The issuer's signing keys as its JWKS lists them now (blocking: the refresh's thread)."""
        if self._jwks is None:
            url = self._jwks_url or discover_jwks_url(self.issuer)
            self._jwks = jwt.PyJWKClient(url, cache_jwk_set=False, timeout=FETCH_TIMEOUT_S)
        return self._jwks.get_signing_keys(refresh=True)

    async def _claims(self, token: str) -> dict[str, Any]:
        kid = jwt.get_unverified_header(token).get("kid")
        if not isinstance(kid, str) or not kid:
            raise jwt.InvalidTokenError("the token's header names no key (kid)")
        key = await self.keys.signing_key(kid)
        # On the event loop: one signature check costs tens of microseconds.
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=ALGORITHMS,
            audience=self.audience,
            issuer=self.issuer,
            leeway=LEEWAY_S,
            options={"require": ["exp", "iss", "aud"]},  # a token without exp would never expire
        )
        for name in _NUMERIC_DATES:
            if name in claims and not is_numeric_date(claims[name]):
                raise jwt.InvalidTokenError(f"{name} is not a NumericDate")
        return claims

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = await self._claims(token)
            subject, client_id = token_caller(claims)
        except (jwt.PyJWTError, ValueError) as exc:
            # The reason, never the token.
            log.info("token_refused", reason=type(exc).__name__, detail=clip(str(exc), 200, mark=""))
            return None
        return AccessToken(
            token=token,
            client_id=client_id,
            scopes=token_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=subject,
            claims={"iss": claims["iss"]},
        )


def token_caller(claims: dict[str, Any]) -> tuple[str | None, str]:
    """The token's subject (`sub`) and client (`client_id`, else `azp`, else the subject).

    A `NoCallerError` when it names neither: such tokens would all share one caller.
    """
    subject = claims.get("sub") or None  # PyJWT has checked that a `sub` is a string
    client = next((claims[name] for name in ("client_id", "azp") if _is_named(claims.get(name))), None)
    if subject is None and client is None:
        raise NoCallerError("the token names no caller: it has no sub, client_id or azp claim")
    return subject, str(client or subject)


def _is_named(value: object) -> bool:
    return isinstance(value, str) and bool(value)


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
            with urllib.request.urlopen(base + well_known, timeout=FETCH_TIMEOUT_S) as response:
                metadata = json.load(response)
        except (OSError, ValueError):
            continue
        if isinstance(metadata, dict) and isinstance(metadata.get("jwks_uri"), str):
            return str(metadata["jwks_uri"])
    raise OSError(f"no jwks_uri in the metadata of {issuer}; set {this_project().env_prefix}OAUTH_JWKS_URL")


def oauth_verifier(settings: CoreSettings) -> JwtTokenVerifier:
    """The verifier for the configured issuer; a FatalError when a required setting is missing."""
    for name, value in (("OAUTH_ISSUER", settings.oauth_issuer), ("OAUTH_AUDIENCE", settings.oauth_audience)):
        if not value:
            raise FatalError(
                f"{this_project().env_prefix}AUTH=oauth but {this_project().env_prefix}{name} is not set",
                f"set {this_project().env_prefix}OAUTH_ISSUER to the authorization server's issuer URL and "
                f"{this_project().env_prefix}OAUTH_AUDIENCE to this server's URL (e.g. https://mcp.example.com/mcp)",
            )
    assert settings.oauth_issuer is not None
    assert settings.oauth_audience is not None
    return JwtTokenVerifier(
        issuer=settings.oauth_issuer, audience=settings.oauth_audience, jwks_url=settings.oauth_jwks_url
    )
