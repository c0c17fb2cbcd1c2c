"""Sealing MRTR `requestState` with shared keys, so a confirmation begun on one replica ends on another."""

from __future__ import annotations

from mcp.server.mcpserver import RequestStateSecurity

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import MAKE_A_REQUEST_STATE_KEY, CoreSettings
from resilient_mcp.project import this_project


def request_state_security(settings: CoreSettings) -> RequestStateSecurity | None:
    """The shared key ring from `REQUEST_STATE_KEYS`; None leaves the SDK's key of this process alone."""
    if not settings.request_state_keys:
        return None
    return RequestStateSecurity(keys=[key.get_secret_value() for key in settings.request_state_keys])


def check_shared_request_state(settings: CoreSettings) -> None:
    """Stateless replicas must share keys: each one's own key refuses the state another sealed."""
    if settings.http_stateless and not settings.request_state_keys:
        prefix = this_project().env_prefix
        raise FatalError(
            f"{prefix}HTTP_STATELESS=true needs {prefix}REQUEST_STATE_KEYS, or a confirmation "
            "begun on one replica is refused by the next",
            f"set {prefix}REQUEST_STATE_KEYS to the same secret on every replica; "
            f"make one with {MAKE_A_REQUEST_STATE_KEY}",
        )
