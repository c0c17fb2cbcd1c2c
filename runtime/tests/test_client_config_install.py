"""`sample-server client-config CLIENT --install`: the entry merged into the client's real file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest

from resilient_mcp.commands.client_config import CLIENTS, NOT_JSON
from sample_server.project import ENV_PREFIX, SLUG
from support import postgres_project

COMMAND = Path(sysconfig.get_path("scripts")) / SLUG
JSON_CLIENTS = [client for client in CLIENTS if client not in NOT_JSON]  # the files --install merges
SERVERS_KEY = {"vscode": "servers"}  # every other client: "mcpServers"
# Another server and another key, as a file someone already uses holds them.
OTHER_SERVER = {"command": "/usr/local/bin/other-server", "args": ["--flag"], "env": {"OTHER_TOKEN": "t"}}
OTHER_KEY = ("inputs", [{"id": "api-key", "type": "promptString", "password": True}])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The directory the command runs in: where the project-scoped files go."""
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


@pytest.fixture
def env(subprocess_env: dict[str, str], home: Path) -> dict[str, str]:
    """Every place a client's file is looked up, under this test's directory."""
    return {
        **subprocess_env,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "xdg-config"),
        "APPDATA": str(home / "AppData"),
    }


def config_file(client: str, home: Path, project: Path) -> Path:
    """Where each client reads its servers on this OS (the generic file is the one given)."""
    if client == "claude-desktop":
        if sys.platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        base = home / "AppData" if sys.platform == "win32" else home / "xdg-config"
        return base / "Claude" / "claude_desktop_config.json"
    return {
        "claude-code": project / ".mcp.json",
        "cursor": home / ".cursor" / "mcp.json",
        "vscode": project / ".vscode" / "mcp.json",
        "windsurf": home / ".codeium" / "windsurf" / "mcp_config.json",
        "gemini-cli": home / ".gemini" / "settings.json",
        "codex": home / ".codex" / "config.toml",
        "goose": home / "xdg-config" / "goose" / "config.yaml",
        "generic": project / "somewhere" / "mcp.json",
    }[client]


def client_config(
    client: str, *args: str, env: dict[str, str], project: Path
) -> subprocess.CompletedProcess[str]:
    path = config_file(client, Path(env["HOME"]), project)
    file_args = ["--file", str(path)] if client == "generic" else []
    return subprocess.run(
        [str(COMMAND), "client-config", client, *file_args, *args],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def printed_entry(client: str, env: dict[str, str], project: Path) -> dict[str, Any]:
    """The entry the command prints without --install: what the file must get."""
    printed = client_config(client, env=env, project=project)
    assert printed.returncode == 0, printed.stderr
    entry: dict[str, Any] = json.loads(printed.stdout)[SERVERS_KEY.get(client, "mcpServers")][SLUG]
    return entry


def write_in_use(path: Path, client: str) -> bytes:
    """A file someone already uses: another server, another key, their own indentation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {OTHER_KEY[0]: OTHER_KEY[1], SERVERS_KEY.get(client, "mcpServers"): {"other": OTHER_SERVER}}
    path.write_text(json.dumps(document, indent=4), encoding="utf-8")
    path.chmod(0o640)
    return path.read_bytes()


@pytest.mark.parametrize("client", JSON_CLIENTS)
def test_install_merges_the_entry_and_keeps_every_other_one(
    env: dict[str, str], home: Path, project: Path, client: str
) -> None:
    path = config_file(client, home, project)
    original = write_in_use(path, client)

    installed = client_config(client, "--install", env=env, project=project)

    assert installed.returncode == 0, installed.stderr
    assert str(path) in installed.stderr
    document = json.loads(path.read_text(encoding="utf-8"))
    servers = document[SERVERS_KEY.get(client, "mcpServers")]
    assert list(servers) == ["other", SLUG]
    assert servers["other"] == OTHER_SERVER
    assert servers[SLUG] == printed_entry(client, env, project)
    assert document[OTHER_KEY[0]] == OTHER_KEY[1]
    backup = path.with_name(f"{path.name}.bak")
    assert backup.read_bytes() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the owner's mode, not the temporary file's
    assert sorted(os.listdir(path.parent)) == sorted([path.name, backup.name])  # no temporary file left


def test_install_creates_a_missing_file_readable_by_its_owner_only(
    env: dict[str, str], home: Path, project: Path
) -> None:
    path = config_file("claude-desktop", home, project)
    env = {**env, f"{ENV_PREFIX}DIAGNOSE_TOKEN": "not-for-others"}

    installed = client_config("claude-desktop", "--install", env=env, project=project)

    assert installed.returncode == 0, installed.stderr
    assert "keep that file private" in installed.stderr
    entry = json.loads(path.read_text(encoding="utf-8"))["mcpServers"][SLUG]
    assert entry["env"][f"{ENV_PREFIX}DIAGNOSE_TOKEN"] == "not-for-others"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == [path.name]  # nothing to back up


def test_reinstalling_replaces_its_entry_in_place_and_keeps_every_backup(
    env: dict[str, str], home: Path, project: Path
) -> None:
    path = config_file("cursor", home, project)
    original = write_in_use(path, "cursor")
    debug, info = ({**env, f"{ENV_PREFIX}LOG_LEVEL": level} for level in ("debug", "info"))
    first = client_config("cursor", "--install", env=debug, project=project)
    assert first.returncode == 0, first.stderr
    after_first = path.read_bytes()
    document = json.loads(after_first)
    document["mcpServers"]["added-later"] = {"command": "later"}
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")

    second = client_config("cursor", "--install", env=info, project=project)
    unchanged = client_config("cursor", "--install", env=info, project=project)

    assert second.returncode == 0, second.stderr
    assert "replaced" in second.stderr
    servers = json.loads(path.read_text(encoding="utf-8"))["mcpServers"]
    assert list(servers) == ["other", SLUG, "added-later"]
    assert servers[SLUG]["env"][f"{ENV_PREFIX}LOG_LEVEL"] == "info"
    backups = sorted(name for name in os.listdir(path.parent) if name != path.name)
    assert len(backups) == 2, backups
    assert path.with_name(f"{path.name}.bak").read_bytes() == original  # the first backup is never lost
    assert unchanged.returncode == 0, unchanged.stderr
    assert "nothing to write" in unchanged.stderr


def test_dry_run_prints_the_change_and_writes_nothing(env: dict[str, str], home: Path, project: Path) -> None:
    path = config_file("vscode", home, project)
    original = write_in_use(path, "vscode")
    before = path.stat().st_mtime_ns

    previewed = client_config("vscode", "--install", "--dry-run", env=env, project=project)

    assert previewed.returncode == 0, previewed.stderr
    assert previewed.stdout.startswith(f"--- {path}\n+++ {path}\n"), previewed.stdout
    assert f'+    "{SLUG}": ' in previewed.stdout
    assert "not written" in previewed.stderr
    assert path.read_bytes() == original
    assert path.stat().st_mtime_ns == before
    assert os.listdir(path.parent) == [path.name]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param('{"mcpServers": {"other": {"command": "x"},},}', "not valid JSON", id="trailing-comma"),
        pytest.param('// mine\n{"mcpServers": {}}', "not valid JSON", id="comment"),
        pytest.param('[{"mcpServers": {}}]', "not an object", id="a-list"),
        pytest.param('{"mcpServers": ["other"]}', "not an object of servers", id="servers-a-list"),
    ],
)
def test_a_file_it_cannot_read_is_refused_untouched(
    env: dict[str, str], home: Path, project: Path, text: str, reason: str
) -> None:
    path = config_file("claude-code", home, project)
    path.write_text(text, encoding="utf-8")

    refused = client_config("claude-code", "--install", env=env, project=project)

    assert refused.returncode == 1, refused.stderr
    assert str(path) in refused.stderr
    assert reason in refused.stderr
    assert "by hand" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert path.read_text(encoding="utf-8") == text
    assert os.listdir(path.parent) == [path.name]


def test_a_symlinked_file_stays_a_link(env: dict[str, str], home: Path, project: Path) -> None:
    target = home / "dotfiles" / "mcp.json"
    write_in_use(target, "cursor")
    link = config_file("cursor", home, project)
    link.parent.mkdir(parents=True)
    link.symlink_to(target)

    installed = client_config("cursor", "--install", env=env, project=project)

    assert installed.returncode == 0, installed.stderr
    assert link.is_symlink()
    assert SLUG in json.loads(target.read_text(encoding="utf-8"))["mcpServers"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(["generic", "--install"], "--file PATH", id="generic-without-file"),
        pytest.param(["cursor", "--dry-run"], "give both", id="dry-run-without-install"),
    ],
)
def test_install_without_what_it_needs_is_a_usage_error(
    env: dict[str, str], project: Path, args: list[str], said: str
) -> None:
    refused = subprocess.run(
        [str(COMMAND), "client-config", *args],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert refused.returncode == 2, refused.stderr
    assert said in refused.stderr
    assert os.listdir(project) == []


@postgres_project
def test_install_without_a_database_url_says_the_entry_holds_a_placeholder(
    env: dict[str, str], home: Path, project: Path
) -> None:
    env = {name: value for name, value in env.items() if name != f"{ENV_PREFIX}DATABASE_URL"}

    installed = client_config("cursor", "--install", env=env, project=project)

    assert installed.returncode == 0, installed.stderr
    assert f"{ENV_PREFIX}DATABASE_URL is a placeholder" in installed.stderr


@pytest.mark.parametrize(
    ("client", "said"),
    [("codex", "run codex mcp add sample-server"), ("goose", "goose configure")],
)
def test_install_leaves_a_toml_or_yaml_file_to_its_client(
    env: dict[str, str], home: Path, project: Path, client: str, said: str
) -> None:
    refused = client_config(client, "--install", env=env, project=project)

    assert refused.returncode == 2, refused.stderr
    assert said in refused.stderr
    assert not home.exists()  # nothing written anywhere


def test_the_codex_entry_added_to_a_config_in_use_is_read_as_codex_reads_it(
    env: dict[str, str], home: Path, project: Path
) -> None:
    # What an owner's ~/.codex/config.toml already holds: settings, a comment, another server.
    in_use = '# mine\nmodel = "o4"\n\n[mcp_servers.other]\ncommand = "other"\nargs = ["--flag"]\n'
    env = {**env, f"{ENV_PREFIX}LOG_LEVEL": 'de"bug\\'}  # a value TOML must escape

    printed = client_config("codex", env=env, project=project)

    assert printed.returncode == 0, printed.stderr
    assert str(home / ".codex" / "config.toml") in printed.stderr
    document = tomllib.loads(in_use + "\n" + printed.stdout)
    assert document["model"] == "o4"
    assert document["mcp_servers"]["other"] == {"command": "other", "args": ["--flag"]}
    entry = document["mcp_servers"][SLUG]
    assert entry["command"] == str(COMMAND)
    assert entry["args"] == ["serve"]
    assert entry["env"][f"{ENV_PREFIX}LOG_LEVEL"] == 'de"bug\\'
