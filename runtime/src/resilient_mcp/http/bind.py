"""The address `serve --transport http` binds, in the form each reader needs, and a bind that cannot work.

`--host` may be an IPv4 address, a name, or an IPv6 address bare (`::1`) or in brackets
(`[::1]`). The socket wants it bare; a URL and a `Host` header write an IPv6 address in
brackets (`http://[::1]:8000`). A bind that cannot work (a port in use, an address this
machine does not have, a name that does not resolve) is a FatalError found before any
dependency opens, rather than uvicorn's error after start-up.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from resilient_mcp.authoring.errors import FatalError

_EXAMPLES = "e.g. 127.0.0.1, ::1, 0.0.0.0 or ::"
_HOST_FIX = f"pass --host an address this machine has ({_EXAMPLES})"


def bind_address(host: str) -> str:
    """The address as the socket takes it: `[::1]` is `::1`; anything else as given."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def url_host(host: str) -> str:
    """The address as a URL or a `Host` header writes it: an IPv6 address in brackets."""
    bare = bind_address(host)
    try:
        version = ipaddress.ip_address(bare).version
    except ValueError:
        return bare  # a name, or a `name:port` already
    # A zone (`fe80::1%eth0`) has no place in a URL.
    return f"[{bare.partition('%')[0]}]" if version == 6 else bare


def check_bind(host: str, port: int) -> None:
    """FatalError unless `host`:`port` can be bound now, tried the way asyncio's server binds it."""
    where = f"{url_host(host)}:{port}"
    if not 0 <= port <= 65535:
        raise FatalError(f"--port {port} is not a TCP port", "pass --port a number from 1 to 65535")
    try:
        found = socket.getaddrinfo(
            bind_address(host) or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError, ValueError) as exc:
        raise FatalError(
            f"--host {host} is not an address of this machine ({_reason(exc)})",
            f"pass --host an address or name this machine has ({_EXAMPLES})",
        ) from None
    bound = 0
    for family, kind, proto, _, address in found:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:
            continue  # a family this machine lacks: asyncio skips it too
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise _bind_error(exc, where) from None
        bound += 1
    if not bound:
        raise FatalError(f"cannot listen on {where}: this machine has no network for that address", _HOST_FIX)


def _bind_error(exc: OSError, where: str) -> FatalError:
    if exc.errno == errno.EADDRINUSE:
        return FatalError(
            f"cannot listen on {where}: the port is in use", "stop what listens there or pass another --port"
        )
    if exc.errno == errno.EACCES:
        return FatalError(
            f"cannot listen on {where}: permission denied",
            "pass --port 1024 or above, or grant the privilege",
        )
    return FatalError(f"cannot listen on {where} ({_reason(exc)})", _HOST_FIX)


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
