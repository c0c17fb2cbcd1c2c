"""`<command> list` and `<command> call TOOL`: this server's tools as a model sees them, from the shell.

Both speak MCP through the SDK's own `Client`, as a host does: over stdio they start this project's
server (`python -m <package> serve`, the command `diagnose` starts) or the command given after
`--`; with `--http URL` they reach a running Streamable HTTP server. The 2026-07-28 protocol is
the default; `--legacy` uses the 2025-11-25 `initialize` handshake instead.

Over HTTP the bearer token comes from the environment, never from an option (an option's value is
seen by every user of the machine in `ps` and kept in the shell's history): `<PREFIX>DIAGNOSE_TOKEN`,
else `<PREFIX>BEARER_TOKEN`, the rule `diagnose` follows, so a shell that started the server with
its token can ask it at once.

Exit codes (the same for `list` and `call`):
    0   answered (`call`: a result without isError)
    1   `call`: the tool answered with isError: true (its category is printed)
    2   usage error (unknown option, an --arg that is not NAME=VALUE, --args not a JSON object)
    3   the server refused the request with a JSON-RPC error (its code and message are printed)
    69  no answer: the server could not be started or reached, refused the connection (401,
        403, 421, ...), or did not answer within --timeout
    78  the server stopped at its start-up checks (its own exit 78 and FATAL line, over stdio)

The SDK is imported only when a command runs, never for `<command> --help`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from resilient_mcp.commands.diagnose.command import add_timeout_option, split_at_separator
from resilient_mcp.commands.diagnose.this_project import client_token, default_command, env_prefix
from resilient_mcp.project import this_project
from resilient_mcp.records import record

if TYPE_CHECKING:
    from mcp import Client

EXIT_ANSWERED = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_PROTOCOL_ERROR = 3
EXIT_UNREACHABLE = 69  # EX_UNAVAILABLE (sysexits.h)
EXIT_SERVER_FATAL = 78  # the server's own start-up FatalError code, passed through
DEFAULT_TIMEOUT_S = 120.0
STDERR_TAIL_LINES = 20


@record
class Target:
    """Where the server is: a stdio command to start, or a Streamable HTTP URL."""

    command: list[str]
    url: str | None

    def shown(self) -> str:
        return self.url if self.url is not None else " ".join(self.command)


@dataclass
class Refusal:
    """The last HTTP status over 399 the server answered (the SDK's error does not carry it)."""

    status: int | None = None


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """The options `list` and `call` share: where the server is and how long to wait for it."""
    prefix = env_prefix() or "<PREFIX>"
    parser.add_argument(
        "--http",
        metavar="URL",
        help="a running Streamable HTTP server (e.g. http://127.0.0.1:8000/mcp) instead of starting this "
        f"project's server over stdio; a token in {prefix}DIAGNOSE_TOKEN, else {prefix}BEARER_TOKEN, "
        "goes as `Authorization: Bearer`",
    )
    parser.add_argument(
        "--legacy",
        action="store_true",
        help="use the 2025-11-25 initialize handshake instead of the 2026-07-28 protocol",
    )
    add_timeout_option(parser, DEFAULT_TIMEOUT_S)
    parser.add_argument("--json", action="store_true", help="print the raw result as JSON (wire names)")


def epilog() -> str:
    doc = __doc__ or ""
    return (
        "exit codes:\n" + doc.split("Exit codes (the same for `list` and `call`):\n", 1)[1].split("\n\n")[0]
    )


def parse_target(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, Target] | int:
    """The options and where the server is; an exit code instead when argparse said no (or --help)."""
    arguments, command = split_at_separator(sys.argv[1:] if argv is None else argv)
    try:
        options = parser.parse_args(arguments)
        return options, target_of(parser, options, command or [])
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0


def target_of(parser: argparse.ArgumentParser, options: argparse.Namespace, command: list[str]) -> Target:
    if options.http is not None and command:
        parser.error("give either --http URL or a server command after --, not both")
    if options.http is not None and not options.http.startswith(("http://", "https://")):
        parser.error(
            f"--http {options.http!r} is not a URL: give the server's, e.g. http://127.0.0.1:8000/mcp"
        )
    return Target(command or default_command(), options.http)


def run(target: Target, options: argparse.Namespace, work: Callable[[Client], Awaitable[int]]) -> int:
    """Connect to `target`, run `work` with the client; its exit code, or the failure's, explained."""
    import anyio

    refusal = Refusal()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as server_stderr:
        try:
            return anyio.run(_connected, target, options, server_stderr, refusal, work)
        except Exception as exc:  # whatever the transport raised: the connection did not work
            return _unreachable(target, exc, server_stderr, refusal)


async def _connected(
    target: Target,
    options: argparse.Namespace,
    server_stderr: TextIO,
    refusal: Refusal,
    work: Callable[[Client], Awaitable[int]],
) -> int:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    async with _client(target, options, server_stderr, refusal) as client:
        try:
            return await work(client)
        except MCPError as exc:
            if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                raise
            data = f" {json.dumps(exc.data)}" if exc.data is not None else ""
            _say(f"the server refused the request: JSON-RPC error {exc.code}: {exc.message}{data}")
            return EXIT_PROTOCOL_ERROR


@contextlib.asynccontextmanager
async def _client(
    target: Target, options: argparse.Namespace, server_stderr: TextIO, refusal: Refusal
) -> AsyncIterator[Client]:
    import httpx2
    from mcp import Client, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    mode = "legacy" if options.legacy else "auto"
    if target.url is not None:
        token = client_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # The SDK's own HTTP timeouts: a tool's answer may stream for minutes.
        timeout = httpx2.Timeout(30.0, read=max(300.0, options.timeout))

        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                refusal.status = response.status_code

        hooks = {"response": [note_refusal]}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http_client,
            Client(
                streamable_http_client(target.url, http_client=http_client),
                mode=mode,
                read_timeout_seconds=options.timeout,
            ) as client,
        ):
            yield client
        return
    # The server gets this shell's whole environment (its <PREFIX> settings), as `diagnose` gives it.
    parameters = StdioServerParameters(
        command=target.command[0], args=target.command[1:], env=dict(os.environ)
    )
    transport = stdio_client(parameters, errlog=server_stderr)
    async with Client(transport, mode=mode, read_timeout_seconds=options.timeout) as client:
        yield client


def _unreachable(target: Target, exc: Exception, server_stderr: TextIO, refusal: Refusal) -> int:
    """Why there was no answer, with the server's own last lines over stdio; 69, or 78 for a FATAL."""
    server_stderr.seek(0)
    lines = [line.rstrip("\n") for line in server_stderr.readlines()]
    fatal = next((line for line in lines if line.startswith("FATAL:")), None)
    if fatal is not None:
        _say(f"the server stopped at its start-up checks: {fatal}")
        return EXIT_SERVER_FATAL
    status = f" (HTTP {refusal.status})" if refusal.status is not None else ""
    _say(f"no answer from {target.shown()}: {_reason(exc)}{status}")
    hint = _hint(target, refusal.status)
    if hint:
        _say(hint)
    if lines:
        sys.stderr.write(f"the server's last {min(len(lines), STDERR_TAIL_LINES)} lines on stderr:\n")
        sys.stderr.writelines(f"  {line}\n" for line in lines[-STDERR_TAIL_LINES:])
    return EXIT_UNREACHABLE


def _reason(exc: BaseException) -> str:
    """The innermost meaningful message of an exception (task groups wrap the transport's)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _hint(target: Target, status: int | None) -> str:
    prefix = env_prefix() or "<PREFIX>"
    if status == 401:
        token = "the token sent was refused" if client_token() else "no token was sent"
        return (
            f"the server wants a bearer token ({token}): export {prefix}DIAGNOSE_TOKEN (or "
            f"{prefix}BEARER_TOKEN) with the server's token, then run this again"
        )
    if status == 421:
        return f"the server refused this Host: add it to the server's {prefix}ALLOWED_HOSTS"
    if status == 403:
        return f"the server refused the caller (a missing scope, or an Origin not in {prefix}ALLOWED_ORIGINS)"
    if target.url is None:
        return f"try `{this_project().slug} diagnose` for the handshake in both protocol eras and hints"
    return f"is the server running? `{this_project().slug} diagnose --http {target.url}` says more"


def _say(message: str) -> None:
    sys.stderr.write(f"{this_project().slug}: {message}\n")


def as_wire(model: Any) -> dict[str, Any]:
    """A result as it travels: camelCase names, no unset fields."""
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dumped
