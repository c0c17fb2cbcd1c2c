"""`AUTH=bearer`: static tokens, checked by the SDK's bearer middleware through a TokenVerifier.

One token (`BEARER_TOKEN`, subject `bearer`) or a file of `subject token` lines
(`BEARER_TOKENS_FILE`). Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from mcp.server.auth.provider import AccessToken

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.project import this_project

MIN_TOKEN_CHARS = 32


class StaticTokenVerifier:
    """A TokenVerifier for a fixed set of (subject, token) pairs."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._tokens = [(subject, token.encode()) for subject, token in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        offered = token.encode()
        found: str | None = None
        for subject, known in self._tokens:  # every entry is compared: timing says nothing
            if hmac.compare_digest(offered, known):
                found = subject
        if found is None:
            return None
        return AccessToken(token=token, client_id=found, subject=found, scopes=[])


def bearer_verifier(settings: CoreSettings) -> StaticTokenVerifier:
    """The verifier for the configured token(s); a FatalError when none is usable."""
    tokens: dict[str, str] = {}
    if settings.bearer_token is not None:
        tokens["bearer"] = settings.bearer_token.get_secret_value()
    if settings.bearer_tokens_file is not None:
        tokens.update(read_tokens_file(settings.bearer_tokens_file))
    if not tokens:
        raise FatalError(
            f"{this_project().env_prefix}AUTH=bearer but neither {this_project().env_prefix}BEARER_TOKEN nor "
            f"{this_project().env_prefix}BEARER_TOKENS_FILE is set",
            f"set {this_project().env_prefix}BEARER_TOKEN to 32+ random characters (openssl rand -hex 32)",
        )
    return StaticTokenVerifier(tokens)


def read_tokens_file(path: Path) -> dict[str, str]:
    """`subject token` per line; blank lines and `#` comments are skipped."""
    variable = f"{this_project().env_prefix}BEARER_TOKENS_FILE"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FatalError(
            f"{variable} {path} cannot be read ({exc.strerror or exc})", "point it at a readable file"
        ) from None
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2 or len(fields[1]) < MIN_TOKEN_CHARS:
            # The line's token is not shown: it may be a real one, mistyped.
            raise FatalError(
                f"{variable} line {number} is not `subject token` with a token of {MIN_TOKEN_CHARS}+ "
                "characters",
                "fix that line (one subject and one token, separated by a space)",
            )
        tokens[fields[0]] = fields[1]
    if not tokens:
        raise FatalError(f"{variable} {path} holds no tokens", "add `subject token` lines")
    return tokens
