# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`<command> client-config CLIENT [--http URL]`: the entry an MCP client needs for this server.

Prints the JSON to merge into the client's configuration file on stdout, and on stderr
the file it goes in on this operating system. Standard library only: it must answer
even when the SDK is broken. Over stdio the entry starts this installation's command
by its absolute path (clients do not search the PATH of your shell) with the
`<PREFIX>*` settings of the current environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .project import ENV_PREFIX, IDEMPOTENCY_BACKEND, PACKAGE, SLUG

CLIENTS = ("claude-desktop", "claude-code", "cursor", "vscode")
EXIT_USAGE = 2
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|DATABASE_URL|API_KEY", re.IGNORECASE)


class UsageError(Exception):
    """The arguments cannot give a configuration; the message says what to do instead."""


@dataclass(frozen=True)
class ClientConfig:
    """What to add, and where."""

    snippet: dict[str, Any]
    path: Path
    how: str


@dataclass(frozen=True)
class Launch:
    """How a client starts this server over stdio."""

    command: str
    args: list[str]
    env: dict[str, str]


def installed_launch(environ: Mapping[str, str]) -> Launch:
    """This installation's console script by absolute path, else `python -m <package>`."""
    suffix = ".exe" if sys.platform == "win32" else ""
    script = Path(sysconfig.get_path("scripts")) / f"{SLUG}{suffix}"
    env = {name: value for name, value in sorted(environ.items()) if name.startswith(ENV_PREFIX)}
    if IDEMPOTENCY_BACKEND == "postgres":
        env.setdefault(f"{ENV_PREFIX}DATABASE_URL", "postgresql://USER:PASSWORD@HOST:5432/DBNAME")
    if script.is_file():
        return Launch(os.path.abspath(script), ["serve"], env)
    return Launch(os.path.abspath(sys.executable), ["-m", PACKAGE, "serve"], env)


def _config_home(environ: Mapping[str, str], home: Path) -> Path:
    if sys.platform == "win32":
        return Path(environ.get("APPDATA", home / "AppData" / "Roaming"))
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config")


def config_for(
    client: str, launch: Launch, http_url: str | None, *, environ: Mapping[str, str], home: Path, cwd: Path
) -> ClientConfig:
    """The entry for one client; `http_url` points it at a running Streamable HTTP server instead."""
    stdio = {"command": launch.command, "args": launch.args, "env": launch.env}
    if client == "claude-desktop":
        if http_url is not None:
            raise UsageError(
                "Claude Desktop does not read HTTP servers from its configuration file: add "
                f"{http_url} under Settings > Connectors > Add custom connector, or drop --http"
            )
        linux = sys.platform.startswith("linux")
        unofficial = " (Claude Desktop has no official Linux build)" if linux else ""
        return ClientConfig(
            {"mcpServers": {SLUG: stdio}},
            _config_home(environ, home) / "Claude" / "claude_desktop_config.json",
            f'merge it into the file\'s "mcpServers", then restart Claude Desktop{unofficial}',
        )
    if client == "claude-code":
        entry = {"type": "http", "url": http_url} if http_url else {"type": "stdio", **stdio}
        command = (
            f"claude mcp add --transport http --scope project {SLUG} {http_url}"
            if http_url
            else f"claude mcp add --scope project {SLUG} -- {launch.command} {' '.join(launch.args)}"
        )
        return ClientConfig(
            {"mcpServers": {SLUG: entry}},
            cwd / ".mcp.json",
            f'merge it into the file\'s "mcpServers" (project scope), or run: {command}',
        )
    if client == "cursor":
        entry = {"url": http_url} if http_url else stdio
        return ClientConfig(
            {"mcpServers": {SLUG: entry}},
            home / ".cursor" / "mcp.json",
            'merge it into the file\'s "mcpServers" (or into .cursor/mcp.json of one project)',
        )
    if client == "vscode":
        entry = {"type": "http", "url": http_url} if http_url else {"type": "stdio", **stdio}
        return ClientConfig(
            {"servers": {SLUG: entry}},
            cwd / ".vscode" / "mcp.json",
            'merge it into the file\'s "servers" (for every workspace: "MCP: Open User Configuration")',
        )
    raise UsageError(f"unknown client {client!r}: choose one of {', '.join(CLIENTS)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{SLUG} client-config",
        description="Print the configuration entry that starts this server in an MCP client.",
    )
    parser.add_argument("client", choices=CLIENTS, metavar="CLIENT", help=f"one of: {', '.join(CLIENTS)}")
    parser.add_argument("--http", metavar="URL", help="a running server's /mcp URL instead of stdio")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    http_url: str | None = args.http
    try:
        if http_url is not None and not re.match(r"^https?://[^\s/]+", http_url):
            raise UsageError(
                f"--http {http_url!r} is not a URL: give the server's, e.g. http://127.0.0.1:8000/mcp"
            )
        launch = installed_launch(os.environ)
        config = config_for(
            args.client, launch, http_url, environ=os.environ, home=Path.home(), cwd=Path.cwd()
        )
    except UsageError as exc:
        sys.stderr.write(f"{SLUG} client-config: {exc}\n")
        return EXIT_USAGE
    sys.stdout.write(json.dumps(config.snippet, indent=2) + "\n")
    sys.stderr.write(f"# goes in {config.path}: {config.how}\n")
    secrets = sorted(name for name in launch.env if _SECRET_NAME.search(name)) if http_url is None else []
    if secrets:
        sys.stderr.write(f"# it holds {', '.join(secrets)}: keep that file private\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
