"""The project's command started as an MCP host starts it: over stdio, with a host's environment.

For a project's smoke tests (the project is the one `use_project` set, as importing its `core`
package does): `host_parameters` for the SDK's `Client`, `StdoutNoise` to see any stdout line that
is not JSON-RPC while the client runs, and `HostSession`, raw JSON-RPC lines that also keep
whatever reaches stdout before the handshake and after the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import StdioServerParameters
from mcp.client.session import IncomingMessage

from resilient_mcp.commands.client_config import installed_launch
from resilient_mcp.commands.diagnose import RawStdioSession, unbuffered_free_env
from resilient_mcp.project import this_project

# How long a test waits for the server to start, answer or exit: generous, because on a loaded
# machine a server starting beside others took over 10 s to answer. Waiting is never what is tested.
ANSWER_TIMEOUT_S = 60.0


def host_command(*args: str) -> list[str]:
    """The command a host's configuration names (`<slug> install` writes it), then `args`.

    This installation's console script, else `python -m <package>`; the default `serve` is replaced
    by `args` when given.
    """
    launch = installed_launch({})
    return [launch.command, *launch.args[:-1], *(args or launch.args[-1:])]


def host_environment(**settings: str) -> dict[str, str]:
    """This environment as a host passes it (no PYTHONUNBUFFERED), plus settings by field name."""
    prefix = this_project().env_prefix
    return unbuffered_free_env({f"{prefix}{name.upper()}": value for name, value in settings.items()})


def host_parameters(*args: str, env: Mapping[str, str] | None = None) -> StdioServerParameters:
    """What the SDK's `Client` starts: `host_command(*args)` in `env` (default: `host_environment()`)."""
    command, *rest = host_command(*args)
    return StdioServerParameters(command=command, args=rest, env=dict(env or host_environment()))


class StdoutNoise:
    """A `Client` message handler that keeps what is not a server message: each stdout line that is
    not JSON-RPC reaches it as an exception (the SDK's stdio client logs it and goes on)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            self.lines.append(str(message))


class HostSession(RawStdioSession):
    """The command over stdio in raw JSON-RPC lines, with the generous time limits as defaults.

    `noise` holds every stdout line that was not JSON-RPC, over the process's whole life.
    """

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = ANSWER_TIMEOUT_S
    ) -> dict[str, Any]:
        return super().request(method, params, timeout=timeout)

    def wait_for(self, request_id: object, *, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        return super().wait_for(request_id, timeout=timeout)

    def close(self, timeout: float = ANSWER_TIMEOUT_S) -> int | None:
        return super().close(timeout)

    def __enter__(self) -> HostSession:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.close()
