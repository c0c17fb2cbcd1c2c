"""Who may reach the HTTP server: DNS-rebinding checks on every bind, and the start-up refusals.

The SDK arms its Host/Origin checks only for loopback binds; here they are armed for every
bind, from `ALLOWED_HOSTS` / `ALLOWED_ORIGINS`, so `--host 0.0.0.0` is never silently open.
The SDK matches `name:*` as a prefix (`localhost:1@evil.example` passes); `ExactValues`
makes it `name`, a colon and a numeric port, nothing else.
"""

from __future__ import annotations

import ipaddress

from mcp.server.transport_security import TransportSecuritySettings

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.http.bind import bind_address, url_host
from resilient_mcp.project import this_project

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]


class ExactValues(list[str]):
    """Allowed Host or Origin values, whole: the SDK asks `value in allowed` before its prefix match.

    Only the exact values are list items, so the SDK's `:*` prefix loop finds nothing to match.
    """

    def __init__(self, values: list[str]) -> None:
        super().__init__(value for value in values if not value.endswith(":*"))
        self.any_port = {value.removesuffix(":*") for value in values if value.endswith(":*")}

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        base, colon, port = value.rpartition(":")
        any_port = bool(colon) and port.isascii() and port.isdigit() and base in self.any_port
        return any_port or super().__contains__(value)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind_address(host)).is_loopback
    except ValueError:
        return False


def check_exposure(settings: CoreSettings, host: str) -> None:
    """Refuse a non-loopback bind that a browser or a stranger on the network could use."""
    if is_loopback(host):
        return
    if not settings.allowed_hosts:
        raise FatalError(
            f"{this_project().env_prefix}ALLOWED_HOSTS is not set for a bind to {host}",
            f"set {this_project().env_prefix}ALLOWED_HOSTS to the names clients use to reach this server "
            "(e.g. mcp.example.com,mcp.example.com:8000)",
        )
    if settings.auth == "none" and not settings.allow_unauthenticated:
        prefix = this_project().env_prefix
        raise FatalError(
            f"{prefix}AUTH=none on a bind to {host} lets anyone on the network call the tools",
            f"set {prefix}AUTH=bearer (with {prefix}BEARER_TOKEN) or oauth, or "
            f"{prefix}ALLOW_UNAUTHENTICATED=true if a proxy in front authenticates",
        )


def transport_security(settings: CoreSettings, host: str) -> TransportSecuritySettings:
    """The SDK's Host/Origin checks for this bind: 421 for a bad Host, 403 for a bad Origin."""
    hosts = [url_host(name) for name in settings.allowed_hosts]  # `::1` arrives as `Host: [::1]`
    origins = list(settings.allowed_origins)
    if is_loopback(host):
        # The bound address too: a client that reaches 127.0.0.2 or [::1] sends it as Host.
        names = dict.fromkeys([*LOOPBACK_HOSTS, url_host(host)])
        hosts += names
        origins += [f"http://{name}:*" for name in names]
    allowed: list[str] = []
    for name in hosts:
        # A bare name is accepted with or without a port, as proxies send either.
        allowed += [name] if ":" in name.removeprefix("[").split("]")[-1] else [name, f"{name}:*"]
    # model_construct keeps the ExactValues (validation would copy them into plain lists).
    return TransportSecuritySettings.model_construct(
        enable_dns_rebinding_protection=True,
        allowed_hosts=ExactValues(allowed),
        allowed_origins=ExactValues(origins),
    )
