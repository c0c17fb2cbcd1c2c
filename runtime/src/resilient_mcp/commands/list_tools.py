"""`<command> list [--http URL | -- CMD ...] [--json]`: the tools this server declares, as a model sees them.

Each tool's name and title, annotations, description, parameters (type, required or default,
description) and whether it returns structured content; `--json` prints the tools/list result
as it travels. Connection, options and exit codes: `tool_client`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from resilient_mcp.commands.tool_client import (
    EXIT_ANSWERED,
    add_target_options,
    as_wire,
    epilog,
    parse_target,
    run,
)
from resilient_mcp.commands.tool_view import tools_text
from resilient_mcp.project import this_project

if TYPE_CHECKING:
    from mcp import Client


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} list",
        usage="%(prog)s [--http URL] [--legacy] [--timeout S] [--json] [-- CMD [ARG ...]]",
        description="List this server's tools as a model sees them: name, annotations, description, "
        "parameters. Starts this project's server over stdio (or the command after --), or asks a "
        "running one with --http.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_target_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_target(build_parser(), argv)
    if isinstance(parsed, int):
        return parsed
    options, target = parsed

    async def listing(client: Client) -> int:
        tools = [as_wire(tool) for tool in await all_tools(client)]
        if options.json:
            sys.stdout.write(json.dumps({"tools": tools}, indent=2, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(tools_text(tools))
        return EXIT_ANSWERED

    return run(target, options, listing)


async def all_tools(client: Client) -> list[object]:
    """Every page of tools/list."""
    page = await client.list_tools()
    tools: list[object] = list(page.tools)
    while page.next_cursor is not None:
        page = await client.list_tools(cursor=page.next_cursor)
        tools += page.tools
    return tools
