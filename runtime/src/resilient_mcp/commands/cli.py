"""The `<slug>` command: serve (stdio or HTTP) and check; other commands are delegated.

Only `serve`, `check`, `budget`, `keys`, `tasks`, `contract`, `list` and `call` load the SDK:
`--help`, `--version`, `client-config`, `diagnose` and `dev` answer without it (`dev`'s children
load it), and still work when it is broken.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from resilient_mcp.commands.inspector_pin import INSPECTOR
from resilient_mcp.project import Project, this_project, use_project

if TYPE_CHECKING:
    from resilient_mcp.server.app import OwnerCode

# Commands whose module parses its own arguments (`<command> --help`): name -> (module, summary).
DELEGATED = {
    "diagnose": (
        "resilient_mcp.commands.diagnose",
        "handshake diagnostics of this (or any) server; one JSON report",
    ),
    "budget": ("resilient_mcp.commands.budget", "the tools/list budget table; non-zero when over budget"),
    "keys": ("resilient_mcp.commands.keys", "list idempotency keys and settle the ones in doubt"),
    "tasks": ("resilient_mcp.commands.tasks", "list durable tasks, show one, cancel one"),
    "contract": (
        "resilient_mcp.commands.contract",
        "record the tools, resources and prompts in contract.json; --check",
    ),
    "list": (
        "resilient_mcp.commands.list_tools",
        "list this server's tools, over stdio or --http URL, as a model sees them",
    ),
    "call": (
        "resilient_mcp.commands.call_tool",
        "call one tool (--arg NAME=VALUE), over stdio or --http URL, printing what a model sees",
    ),
    "client-config": (
        "resilient_mcp.commands.client_config",
        "the exact config for an MCP client (claude-desktop, claude-code, cursor, vscode, windsurf, "
        "gemini-cli, goose, codex); --install",
    ),
    "dev": (
        "resilient_mcp.commands.dev",
        "serve with the MCP Inspector; --http: Streamable HTTP, restarted on each edit",
    ),
}
# They read the owner's settings; budget and contract build the server too.
NEEDS_OWNER_CODE = {"budget", "keys", "tasks", "contract"}


class InstalledVersion(argparse.Action):
    """`--version`: the installed version, looked up only when asked for (serving has its own
    look-up for serverInfo, and each costs milliseconds of start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help="show the version and exit"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {this_project().installed_version()}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=this_project().slug,
        description=this_project().description,
    )
    parser.add_argument("--version", action=InstalledVersion)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve MCP (the default; stdio unless --transport http)")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="HTTP port (default: 8000)")
    commands.add_parser("check", help="run the start-up checks only; exit 0 or 78")
    for name, (_, summary) in DELEGATED.items():
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def run(project: Project, argv: Sequence[str] | None = None) -> int:
    """The `<slug>` command of `project`: what its `cli.main` calls."""
    use_project(project)
    return main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in DELEGATED:
        return run_delegated(args_list[0], args_list[1:])
    args = build_parser().parse_args(args_list)
    if args.command == "check":
        return check()
    return serve(
        getattr(args, "transport", "stdio"),
        getattr(args, "host", "127.0.0.1"),
        getattr(args, "port", 8000),
    )


def run_delegated(command: str, argv: list[str]) -> int:
    module = importlib.import_module(DELEGATED[command][0])
    result: int = module.main(argv, owner_code()) if command in NEEDS_OWNER_CODE else module.main(argv)
    return result


def owner_code() -> OwnerCode:
    """The owner's settings class and tools package, imported here at the edge: the core never
    imports an owner module by name, so it has no import circle through them."""
    from resilient_mcp.server.app import OwnerCode

    package = this_project().package
    tools = importlib.import_module(f"{package}.tools")
    settings_class = importlib.import_module(f"{package}.settings").Settings
    return OwnerCode(settings_class=settings_class, tools=tools)


def serve(transport: str, host: str, port: int) -> int:
    with no_collection_until_serving():
        from resilient_mcp.stdio.guard import claim_stdio
        from resilient_mcp.telemetry.stderr_writer import protect_stderr

        protect_stderr()  # a host that never reads stderr must not stall the server

        in_terminal = transport == "stdio" and os.isatty(0)
        # First, before any import of the owner's code can print: stdout is the wire.
        pipes = claim_stdio() if transport == "stdio" else None

        import anyio

        from resilient_mcp.sdk_models import import_sdk_with_deferred_models

        import_sdk_with_deferred_models()
        from resilient_mcp.commands.serve import serve_http, serve_stdio
        from resilient_mcp.server.app import build_from_environment

        server = build_from_environment(owner_code())
    if in_terminal:
        # The thread reading a terminal cannot be interrupted: Ctrl+C would wait for a line.
        signal.signal(signal.SIGINT, _stop_at_ctrl_c)
        sys.stderr.write(terminal_hint())
        sys.stderr.flush()
    if pipes is not None:
        anyio.run(functools.partial(serve_stdio, server, pipes, handle_sigint=not in_terminal))
    else:
        anyio.run(serve_http, server, host, port)
    return 0


@contextlib.contextmanager
def no_collection_until_serving() -> Iterator[None]:
    """No cyclic garbage collection while the server is built; its objects frozen out of it after.

    Start-up makes objects that live as long as the process: modules, classes, the tools'
    models. The collector would walk them again at every collection while they pile up, and
    at every full one after; frozen (the recipe of `gc.freeze`'s documentation), they are not.
    """
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def terminal_hint() -> str:
    """What someone who typed the command in a terminal needs: it serves MCP on stdin, not a prompt."""
    slug = this_project().slug
    return (
        f"{slug} is serving MCP over stdio: it waits for an MCP client's JSON-RPC on stdin, "
        "not for typed commands.\n"
        f"  Try it:  {slug} diagnose   (starts it, handshakes, prints one JSON report)\n"
        f"           {slug} dev --http   (the MCP Inspector on it, restarted on each edit)\n"
        f"           {slug} list   (its tools as a model sees them; `{slug} call TOOL --arg NAME=VALUE`)\n"
        f"           npx {INSPECTOR} {slug}   (the MCP Inspector, in a browser)\n"
        f"  Use it:  {slug} client-config claude-desktop --install   (or claude-code, cursor, codex, ...)\n"
        "  Stop it: Ctrl+D (end of input) or Ctrl+C\n"
    )


def _stop_at_ctrl_c(signum: int, frame: object) -> None:
    # os.write, not sys.stderr: the signal may come while the main thread is inside a
    # sys.stderr.write (the hint above), and a buffered writer refuses a reentrant call.
    os.write(2, f"\n{this_project().slug}: stopped (Ctrl+C)\n".encode())
    os._exit(128 + signal.SIGINT)


def check() -> int:
    import anyio

    from resilient_mcp.server.app import build_from_environment

    server = build_from_environment(owner_code())
    report = anyio.run(server.check_dependencies)
    sys.stdout.write(
        f"OK: settings valid, data directory {server.app_settings.data_dir} writable, "
        f"{len(server.served)} tools load\n"
    )
    for name, result in report["checks"].items():
        detail = f" - {result['detail']}" if result["detail"] else ""
        sys.stdout.write(f"  {name}: {result['status']}{detail}\n")
    return 0
