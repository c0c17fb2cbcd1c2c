"""Handshake diagnostics over raw JSON-RPC: why a server will not connect.

Standard library only, so it still works when the server's own imports (or `mcp`)
are broken. Run it as `<command> diagnose` or `python -m <package>.diagnose`:

    diagnose [--timeout S]                  this project's server (`python -m <package> serve`)
    diagnose [--timeout S] -- CMD [ARG...]  any stdio server command
    diagnose [--timeout S] --http URL       a Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp

Over HTTP a token in `<PREFIX>DIAGNOSE_TOKEN` (else `<PREFIX>BEARER_TOKEN`) is sent as
`Authorization: Bearer`; a refusal (401, 403, 421, 413) gets a hint naming the server
setting that fixes it.

Each protocol era is tried on a fresh connection (a fresh process over stdio),
because the first request fixes a connection's era: the 2026-07-28 era
(`server/discover`, every request carrying the `_meta` envelope), then the
2025-11-25 `initialize` handshake. In each: `tools/list` (count and bytes of the
result JSON) and `tools/call health_check` when the server declares it. Every read
is bounded by --timeout, so a server that never answers costs at most about
2 x (timeout + a short grace to exit) in all.

This project's own server must answer both eras; another server passes with either
(a hint names the one missing). The server runs without PYTHONUNBUFFERED, as MCP
hosts start it, so buffered stdout leaks show up here as they would there.

One JSON report goes to stdout: verdict, exit_code, target, server_exit_code (after
its stdin was closed; null when it had to be killed), first_answer_ms, handshake,
eras (per era: ok, first_answer_ms, failure, ...), eras_ok, server_info (with its
description, websiteUrl and icons), instructions_bytes, tool_count,
tools_list_bytes (the largest tools/list result seen, compact JSON), health_check
(its structured result), stdout_noise (stdout lines that are not JSON-RPC),
stderr_tail, hints (the likely cause and the fix).

Exit codes:
    0   healthy
    1   unhealthy: answered, but health_check is not ok, tools/list or health_check
        failed, or the server did not exit cleanly when its stdin closed
    2   usage error
    3   no handshake: the server crashed, exited, refused, or could not be started
        (this project's own server: in either era)
    4   timeout: no answer within --timeout (this project's own server: in either era)
    5   stdout noise: lines on stdout that are not JSON-RPC (clients choke on them)
    78  the server stopped at its start-up checks (its own exit 78 and FATAL line)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from resilient_mcp.commands.diagnose.exit_codes import EXIT_USAGE
from resilient_mcp.commands.diagnose.progress import PROGRESS_AFTER_S, to_stderr
from resilient_mcp.commands.diagnose.report import diagnose_http, diagnose_stdio
from resilient_mcp.commands.diagnose.session import DEFAULT_TIMEOUT_S
from resilient_mcp.commands.diagnose.this_project import default_command, env_prefix, package


def _prog() -> str:
    invoked = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not invoked or invoked.endswith(".py") or invoked.startswith("-"):
        return "python -m resilient_mcp.commands.diagnose"
    return f"{invoked} diagnose"


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog=_prog(),
        usage="%(prog)s [--timeout S] [--http URL | -- CMD [ARG ...]]",
        description="Start an MCP server (default: this project's), try both protocol eras over raw\n"
        "JSON-RPC, and print one JSON report: handshake, tools, health_check, stdout noise,\n"
        "stderr tail, and hints that name the likely cause and the fix. A step that takes more\n"
        f"than {PROGRESS_AFTER_S:g} s is named on stderr while it waits.",
        epilog="exit codes:\n" + doc.split("Exit codes:\n", 1)[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_timeout_option(parser, DEFAULT_TIMEOUT_S)
    token = f"{env_prefix() or '<PREFIX>'}DIAGNOSE_TOKEN (else {env_prefix() or '<PREFIX>'}BEARER_TOKEN)"
    parser.add_argument(
        "--http",
        metavar="URL",
        help=f"diagnose a Streamable HTTP endpoint instead; the token in {token} goes as a bearer token",
    )
    return parser


def add_timeout_option(parser: argparse.ArgumentParser, default_s: float) -> None:
    """`--timeout S`, as `diagnose`, `list` and `call` take it."""
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=default_s,
        metavar="S",
        help=f"seconds to wait for each answer (default: {default_s:g})",
    )


def split_at_separator(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """The options before `--`, and the server command after it (None: no `--` was given)."""
    arguments = list(argv)
    if "--" not in arguments:
        return arguments, None
    split = arguments.index("--")
    return arguments[:split], arguments[split + 1 :]


def positive_seconds(text: str) -> float:
    """argparse's type for a time limit: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    arguments, command = split_at_separator(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        options = parser.parse_args(arguments)
        if command == []:
            parser.error("give the server command after --")
        if options.http and command:
            parser.error("give either --http URL or a command after --, not both")
        if not (options.http or command or package()):
            parser.error("run outside a project, it needs a server: give --http URL, or its command after --")
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    progress = to_stderr()
    if options.http:
        diagnosis = diagnose_http(options.http, timeout=options.timeout, progress=progress)
    else:
        diagnosis = diagnose_stdio(
            command or default_command(),
            timeout=options.timeout,
            require_all_eras=not command,
            progress=progress,
        )
    report = diagnosis.report()
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    exit_code: int = report["exit_code"]
    return exit_code
