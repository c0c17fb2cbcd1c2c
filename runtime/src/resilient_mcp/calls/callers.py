"""Who is calling: the subject of the HTTP caller's token, for the log line and scope checks."""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server.auth.middleware.auth_context import get_access_token

from resilient_mcp.store import LOCAL_CALLER


def caller() -> str | None:
    """The subject of an authenticated HTTP call's token; None over stdio or without auth."""
    token = get_access_token()
    if token is None:
        return None
    return token.subject or token.client_id


def key_caller(authenticated: bool) -> str:
    """Whose idempotency keys a call uses: `sub:<subject>` of its token, else `client:<client_id>`;
    LOCAL_CALLER, the one principal, over stdio or HTTP without auth (`authenticated` False).

    The prefixes keep a subject from ever naming the one principal, the legacy rows, or a
    client whose id is another token's subject.
    """
    if not authenticated:
        return LOCAL_CALLER
    token = get_access_token()
    if token is not None and token.subject:
        return f"sub:{token.subject}"
    if token is not None and token.client_id:
        return f"client:{token.client_id}"
    # Unreachable while the verifiers refuse such tokens; never share a key space among them.
    raise PermissionError("an authenticated call without a subject or client id")


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
