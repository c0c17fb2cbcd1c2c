"""`<command> call TOOL [--arg NAME=VALUE ...] [--args JSON] [--http URL | -- CMD ...] [--json]`.

Calls one tool and prints what the model receives: whether it is an error (with its category),
the content, the structured content and `_meta` (an idempotency replay, an error's correlation
id, a cut text); `--json` prints the result as it travels. Progress the server reports goes to
stderr. Connection, options and exit codes: `tool_client`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from resilient_mcp.commands.tool_client import (
    EXIT_ANSWERED,
    EXIT_TOOL_ERROR,
    add_target_options,
    as_wire,
    epilog,
    parse_target,
    run,
)
from resilient_mcp.commands.tool_view import result_text
from resilient_mcp.project import this_project

if TYPE_CHECKING:
    from mcp import Client


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} call",
        usage="%(prog)s TOOL [--arg NAME=VALUE ...] [--args JSON] [--http URL] [--legacy] [--timeout S] "
        "[--json] [-- CMD [ARG ...]]",
        description="Call one tool of this server and print what the model receives: isError and its "
        "category, the content, the structured content and _meta. Starts this project's server over "
        "stdio (or the command after --), or calls a running one with --http.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("tool", metavar="TOOL", help="the tool's name, as `list` shows it")
    parser.add_argument(
        "--arg",
        dest="pairs",
        action="append",
        default=[],
        type=argument_pair,
        metavar="NAME=VALUE",
        help='one argument; VALUE is read as JSON when it is JSON (3, true, null, [1,2], {"a":1}, '
        "'\"3\"' for the string 3), else taken as a string (hello world). Repeat for more",
    )
    parser.add_argument(
        "--args",
        dest="object",
        type=argument_object,
        default={},
        metavar="JSON",
        help="all arguments as one JSON object; --arg values are added to it (and win)",
    )
    add_target_options(parser)
    return parser


def argument_pair(text: str) -> tuple[str, Any]:
    name, equals, raw = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. --arg text=hello)")
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw


def argument_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"is not JSON ({exc}); quote it: --args '{{\"a\": 1}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f'is a JSON {type(value).__name__}, not an object like {{"a": 1}}')
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_target(build_parser(), argv)
    if isinstance(parsed, int):
        return parsed
    options, target = parsed
    tool_arguments = {**options.object, **dict(options.pairs)}

    async def calling(client: Client) -> int:
        result = as_wire(await client.call_tool(options.tool, tool_arguments, progress_callback=progress))
        if options.json:
            sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(result_text(result))
        return EXIT_TOOL_ERROR if result.get("isError") else EXIT_ANSWERED

    return run(target, options, calling)


async def progress(progress: float, total: float | None, message: str | None) -> None:
    """The server's progress notifications, on stderr while the call runs."""
    of = f"/{total:g}" if total is not None else ""
    said = f": {message}" if message else ""
    sys.stderr.write(f"progress {progress:g}{of}{said}\n")
