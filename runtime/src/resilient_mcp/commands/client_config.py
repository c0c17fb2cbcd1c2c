"""`<command> client-config CLIENT [--http URL] [--install [--dry-run]] [--file PATH]`.

The entry an MCP client needs for this server. Prints it on stdout in the format of the client's
configuration file (JSON; TOML for Codex, YAML for Goose: `client_config_text`), and on stderr the
file it goes in on this operating system; `--install` merges it into a JSON file
(`client_config_file`), `--dry-run` shows the change instead. Standard library only: it must
answer even when the SDK is broken. Over stdio the entry starts this installation's command by
its absolute path (clients do not search the PATH of your shell) with the `<PREFIX>*` settings
of the current environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from resilient_mcp.commands.client_config_file import UnreadableConfig, merge, write
from resilient_mcp.commands.client_config_text import as_toml, as_yaml
from resilient_mcp.project import this_project
from resilient_mcp.records import record

# `generic`: the "mcpServers" file most other clients read, at the path given with --file.
CLIENTS = (
    "claude-desktop",
    "claude-code",
    "cursor",
    "vscode",
    "windsurf",
    "gemini-cli",
    "goose",
    "codex",
    "generic",
)
# Clients whose file is not JSON: the entry is printed in their format, and `--install` leaves the
# merge to the client's own command (Codex) or to the owner (Goose), rather than round-tripping a
# hand-edited TOML or YAML file through a library that would drop its comments.
NOT_JSON = {"codex": "toml", "goose": "yaml"}
GOOSE_TIMEOUT_S = 300  # Goose's own default for an extension's calls
EXIT_USAGE = 2
EXIT_REFUSED = 1
PLACEHOLDER_DATABASE_URL = "postgresql://USER:PASSWORD@HOST:5432/DBNAME"
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|DATABASE_URL|API_KEY", re.IGNORECASE)


class UsageError(Exception):
    """The arguments cannot give a configuration; the message says what to do instead."""


@record
class ClientConfig:
    """What to add, and where."""

    snippet: dict[str, Any]
    path: Path | None  # None: no standard file (generic without --file)
    how: str
    then: str  # what to do once it is installed
    install_command: str = ""  # the client's own command that installs it, for files not merged here

    @property
    def servers_key(self) -> str:
        return next(iter(self.snippet))


@record
class Launch:
    """How a client starts this server over stdio."""

    command: str
    args: list[str]
    env: dict[str, str]


def installed_launch(environ: Mapping[str, str]) -> Launch:
    """This installation's console script by absolute path, else `python -m <package>`."""
    suffix = ".exe" if sys.platform == "win32" else ""
    script = Path(sysconfig.get_path("scripts")) / f"{this_project().slug}{suffix}"
    env = {
        name: value for name, value in sorted(environ.items()) if name.startswith(this_project().env_prefix)
    }
    if this_project().idempotency_backend == "postgres":
        env.setdefault(f"{this_project().env_prefix}DATABASE_URL", PLACEHOLDER_DATABASE_URL)
    if script.is_file():
        return Launch(os.path.abspath(script), ["serve"], env)
    return Launch(os.path.abspath(sys.executable), ["-m", this_project().package, "serve"], env)


def _config_home(environ: Mapping[str, str], home: Path) -> Path:
    if sys.platform == "win32":
        return Path(environ.get("APPDATA", home / "AppData" / "Roaming"))
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config")


def _goose_config_home(environ: Mapping[str, str], home: Path) -> Path:
    if sys.platform == "win32":
        return Path(environ.get("APPDATA", home / "AppData" / "Roaming")) / "Block" / "goose" / "config"
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "goose"


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
            {"mcpServers": {this_project().slug: stdio}},
            _config_home(environ, home) / "Claude" / "claude_desktop_config.json",
            f'merge it into the file\'s "mcpServers", then restart Claude Desktop{unofficial}',
            f"restart Claude Desktop{unofficial}",
        )
    if client == "claude-code":
        entry = {"type": "http", "url": http_url} if http_url else {"type": "stdio", **stdio}
        slug = this_project().slug
        command = (
            f"claude mcp add --transport http --scope project {slug} {http_url}"
            if http_url
            else f"claude mcp add --scope project {slug} -- {launch.command} {' '.join(launch.args)}"
        )
        return ClientConfig(
            {"mcpServers": {this_project().slug: entry}},
            cwd / ".mcp.json",
            f'merge it into the file\'s "mcpServers" (project scope), or run: {command}',
            "Claude Code asks to approve the project's servers when it next starts in this directory",
        )
    if client == "cursor":
        entry = {"url": http_url} if http_url else stdio
        return ClientConfig(
            {"mcpServers": {this_project().slug: entry}},
            home / ".cursor" / "mcp.json",
            'merge it into the file\'s "mcpServers" (or into .cursor/mcp.json of one project)',
            "Cursor lists it under Settings > MCP",
        )
    if client == "vscode":
        entry = {"type": "http", "url": http_url} if http_url else {"type": "stdio", **stdio}
        return ClientConfig(
            {"servers": {this_project().slug: entry}},
            cwd / ".vscode" / "mcp.json",
            'merge it into the file\'s "servers" (for every workspace: "MCP: Open User Configuration")',
            'start it from VS Code\'s "MCP: List Servers"',
        )
    if client == "windsurf":
        entry = {"serverUrl": http_url} if http_url else stdio
        return ClientConfig(
            {"mcpServers": {this_project().slug: entry}},
            home / ".codeium" / "windsurf" / "mcp_config.json",
            "merge it into the file's \"mcpServers\", then press refresh in Cascade's MCP panel",
            "press refresh in Windsurf Cascade's MCP panel",
        )
    if client == "gemini-cli":
        # httpUrl is Streamable HTTP; Gemini CLI's `url` means the older SSE transport.
        entry = {"httpUrl": http_url} if http_url else stdio
        return ClientConfig(
            {"mcpServers": {this_project().slug: entry}},
            home / ".gemini" / "settings.json",
            'merge it into the file\'s "mcpServers" (or into .gemini/settings.json of one project)',
            "`gemini mcp list` shows it; start gemini",
        )
    if client == "goose":
        slug = this_project().slug
        common: dict[str, Any] = {"name": slug, "enabled": True, "timeout": GOOSE_TIMEOUT_S}
        goose: dict[str, Any] = (
            {**common, "type": "streamable_http", "uri": http_url}
            if http_url
            else {**common, "type": "stdio", "cmd": launch.command, "args": launch.args, "envs": launch.env}
        )
        return ClientConfig(
            {"extensions": {slug: goose}},
            _goose_config_home(environ, home) / "config.yaml",
            'add it under the file\'s "extensions" (or add it with `goose configure`, Add Extension)',
            "start a goose session",
        )
    if client == "codex":
        slug = this_project().slug
        entry = {"url": http_url} if http_url else stdio
        env = " ".join(f"--env {shlex.quote(f'{name}={value}')}" for name, value in launch.env.items())
        install = (
            f"codex mcp add {slug} --url {shlex.quote(http_url)}"
            if http_url
            else " ".join(
                filter(None, ["codex mcp add", slug, env, "--", shlex.join([launch.command, *launch.args])])
            )
        )
        return ClientConfig(
            {"mcp_servers": {slug: entry}},
            Path(environ.get("CODEX_HOME") or home / ".codex") / "config.toml",
            f"add it to the file as its own table, or run: {install}",
            "`codex mcp list` shows it",
            install_command=install,
        )
    if client == "generic":
        return ClientConfig(
            {"mcpServers": {this_project().slug: {"url": http_url} if http_url else stdio}},
            None,
            'merge it into the file\'s "mcpServers"; --install --file PATH does that for you',
            "restart the client",
        )
    raise UsageError(f"unknown client {client!r}: choose one of {', '.join(CLIENTS)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} client-config",
        description="Print the configuration entry that starts this server in an MCP client.",
    )
    parser.add_argument("client", choices=CLIENTS, metavar="CLIENT", help=f"one of: {', '.join(CLIENTS)}")
    parser.add_argument("--http", metavar="URL", help="a running server's /mcp URL instead of stdio")
    parser.add_argument(
        "--install",
        action="store_true",
        help="merge the entry into the client's file, keeping its other entries and a backup beside it",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="with --install: print the change to the file, write nothing"
    )
    parser.add_argument(
        "--file", metavar="PATH", type=Path, help="the configuration file to use instead of the client's"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    http_url: str | None = args.http
    try:
        if http_url is not None and not re.match(r"^https?://[^\s/]+", http_url):
            raise UsageError(
                f"--http {http_url!r} is not a URL: give the server's, e.g. http://127.0.0.1:8000/mcp"
            )
        if args.dry_run and not args.install:
            raise UsageError("--dry-run shows what --install would write: give both")
        launch = installed_launch(os.environ)
        config = config_for(
            args.client, launch, http_url, environ=os.environ, home=Path.home(), cwd=Path.cwd()
        )
        path: Path | None = args.file.absolute() if args.file else config.path
        if args.install and path is None:
            raise UsageError(f"{args.client} has no standard file: give it with --file PATH")
        if args.install and args.client in NOT_JSON:
            raise UsageError(not_merged_here(args.client, config))
    except UsageError as exc:
        sys.stderr.write(f"{this_project().slug} client-config: {exc}\n")
        return EXIT_USAGE
    if args.install and path is not None:  # a path is given or known: checked above
        try:
            status = install(config, path, dry_run=args.dry_run)
        except (UnreadableConfig, OSError) as exc:
            sys.stderr.write(f"{this_project().slug} client-config: {exc}\n")
            return EXIT_REFUSED
    else:
        sys.stdout.write(printed(args.client, config))
        where = path or "your client's mcp.json"
        status = f"# goes in {where}: {config.how}\n"
    sys.stderr.write(status)
    secrets = sorted(name for name in launch.env if _SECRET_NAME.search(name)) if http_url is None else []
    if secrets:
        sys.stderr.write(f"# it holds {', '.join(secrets)}: keep that file private\n")
    if (
        launch.env.get(f"{this_project().env_prefix}DATABASE_URL") == PLACEHOLDER_DATABASE_URL
        and http_url is None
    ):
        sys.stderr.write(
            f"# its {this_project().env_prefix}DATABASE_URL is a placeholder: "
            "export the real one and run this again\n"
        )
    return 0


def printed(client: str, config: ClientConfig) -> str:
    """The entry in the format of the client's file."""
    form = NOT_JSON.get(client)
    if form == "toml":
        return as_toml(config.snippet)
    if form == "yaml":
        return as_yaml(config.snippet)
    return json.dumps(config.snippet, indent=2) + "\n"


def not_merged_here(client: str, config: ClientConfig) -> str:
    if client == "codex":
        return (
            f"--install writes JSON files only; Codex adds the entry to its own {config.path} itself, "
            f"keeping the file's other servers and comments: run {config.install_command}"
        )
    return (
        f"--install writes JSON files only; add the entry printed without --install under "
        f'"extensions" in {config.path}, or with `goose configure` (Add Extension)'
    )


def install(config: ClientConfig, path: Path, *, dry_run: bool) -> str:
    """Merge the entry into `path` (or print the change, dry-run); what was done, for stderr."""
    merged = merge(
        path, config.servers_key, this_project().slug, config.snippet[config.servers_key][this_project().slug]
    )
    if not merged.changed:
        return f"# {path} has this entry already: nothing to write\n"
    if dry_run:
        sys.stdout.write(merged.diff())
        return f"# --dry-run: {path} was not written; without --dry-run it gets the change above\n"
    backup = write(merged)
    done = "replaced the entry" if merged.replaced else "added the entry"
    kept = f" (the old file is {backup})" if backup else ""
    return f"# {done} {this_project().slug!r} in {path}{kept}: {config.then}\n"


if __name__ == "__main__":
    raise SystemExit(main())
