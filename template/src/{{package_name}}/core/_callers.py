# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Who is calling: the subject of the HTTP caller's token, for the log line and scope checks."""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server.auth.middleware.auth_context import get_access_token


def caller() -> str | None:
    """The subject of an authenticated HTTP call's token; None over stdio or without auth."""
    token = get_access_token()
    if token is None:
        return None
    return token.subject or token.client_id


def missing_scopes(required: Sequence[str]) -> list[str]:
    """The scopes the caller's token lacks (all of them when there is no token)."""
    token = get_access_token()
    held = set(token.scopes) if token is not None else set()
    return [scope for scope in required if scope not in held]


def forbidden_message(tool: str, missing: Sequence[str]) -> str:
    needed = ", ".join(missing)
    return (
        f"calling {tool} needs the OAuth scope {needed}, which this token does not carry; "
        "ask the authorization server for a token with it"
    )
