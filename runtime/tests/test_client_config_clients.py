"""The client-config entries read by the clients themselves: Codex and Gemini CLI from npm, Goose's shape.

Codex (`codex mcp get`, reading `CODEX_HOME/config.toml`) and Gemini CLI (`gemini mcp list`, which
starts every server of `~/.gemini/settings.json` and pings it) run from npm, pinned, installed once
into a cache directory. Goose ships no npm or PyPI package: its entry is read with a YAML parser and
held to the shape its documentation gives. Run once (the sqlite variant): nothing here depends on
the backend.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from sample_server.project import ENV_PREFIX, SLUG
from support import sqlite_project

pytestmark = sqlite_project

COMMAND = Path(sysconfig.get_path("scripts")) / SLUG
CLIS = {"codex": "@openai/codex@0.171.0", "gemini": "@google/gemini-cli@0.61.0"}
URL = "http://127.0.0.1:8123/mcp"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (
        Path(base) / "resilient-mcp-client-clis" / "-".join(spec.rsplit("@", 1)[1] for spec in CLIS.values())
    )


@pytest.fixture(scope="module")
def clis() -> Path:
    """The pinned clients' node_modules/.bin, installed with npm on the first run."""
    folder = cache_dir()
    bin_dir = folder / "node_modules" / ".bin"
    if all((bin_dir / name).exists() for name in CLIS):
        return bin_dir
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (it installs the Codex and Gemini CLIs)")
    folder.mkdir(parents=True, exist_ok=True)
    installed = subprocess.run(
        [
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
            str(folder),
            *CLIS.values(),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if installed.returncode != 0:
        pytest.skip(f"npm could not install {', '.join(CLIS.values())}: {installed.stderr[-500:]}")
    return bin_dir


def client_config(*args: str, env: dict[str, str], cwd: Path) -> str:
    answered = subprocess.run(
        [str(COMMAND), "client-config", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert answered.returncode == 0, answered.stderr
    return answered.stdout


def codex_get(clis: Path, home: Path, config: str) -> dict[str, Any]:
    """What `codex mcp get` reads from a config.toml holding `config`."""
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(config, encoding="utf-8")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    got = subprocess.run(
        [str(clis / "codex"), "mcp", "get", SLUG, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    entry: dict[str, Any] = json.loads(got.stdout)
    return entry


def test_codex_reads_the_entry_beside_the_owners_settings(
    clis: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    in_use = '# mine\nmodel = "o4"\n\n[mcp_servers.other]\ncommand = "other"\n\n'
    env = {**subprocess_env, f"{ENV_PREFIX}LOG_LEVEL": "debug"}

    stdio = codex_get(clis, tmp_path / "stdio", in_use + client_config("codex", env=env, cwd=tmp_path))
    http = codex_get(
        clis, tmp_path / "http", in_use + client_config("codex", "--http", URL, env=env, cwd=tmp_path)
    )

    assert stdio["enabled"] is True
    assert stdio["transport"]["type"] == "stdio"
    assert stdio["transport"]["command"] == str(COMMAND)
    assert stdio["transport"]["args"] == ["serve"]
    assert stdio["transport"]["env"][f"{ENV_PREFIX}LOG_LEVEL"] == "debug"
    assert http["transport"]["type"] == "streamable_http"
    assert http["transport"]["url"] == URL


def test_gemini_cli_starts_the_installed_entry_and_keeps_the_others(
    clis: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"ui": {"theme": "Default"}, "mcpServers": {}}), encoding="utf-8")
    # Gemini CLI starts a folder's servers only once the folder is trusted.
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(tmp_path): "TRUST_FOLDER"}))
    env = {**subprocess_env, "HOME": str(home)}
    client_config("gemini-cli", "--install", env=env, cwd=tmp_path)
    document = json.loads(settings.read_text(encoding="utf-8"))
    assert document["ui"] == {"theme": "Default"}
    # Its connection probe gives a server 5 s by default: a loaded test machine may start it slower.
    document["mcpServers"][SLUG]["timeout"] = 120_000
    settings.write_text(json.dumps(document), encoding="utf-8")

    listed = subprocess.run(
        [str(clis / "gemini"), "mcp", "list"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    output = listed.stdout + listed.stderr
    assert listed.returncode == 0, output
    assert f"✓ {SLUG}: {COMMAND} serve (stdio) - Connected" in output, output


def test_the_goose_entry_has_the_shape_goose_reads(subprocess_env: dict[str, str], tmp_path: Path) -> None:
    in_use = yaml.safe_load(
        "GOOSE_PROVIDER: openai\nextensions:\n  developer:\n    enabled: true\n    type: builtin\n"
    )
    env = {**subprocess_env, f"{ENV_PREFIX}LOG_LEVEL": "debug"}

    stdio = yaml.safe_load(client_config("goose", env=env, cwd=tmp_path))["extensions"]
    http = yaml.safe_load(client_config("goose", "--http", URL, env=env, cwd=tmp_path))["extensions"]
    in_use["extensions"].update(stdio)  # "add it under the file's extensions"

    assert list(in_use["extensions"]) == ["developer", SLUG]
    entry = in_use["extensions"][SLUG]
    assert entry.pop("envs")[f"{ENV_PREFIX}LOG_LEVEL"] == "debug"
    assert entry == {
        "name": SLUG,
        "enabled": True,
        "timeout": 300,
        "type": "stdio",
        "cmd": str(COMMAND),
        "args": ["serve"],
    }
    assert http[SLUG] == {
        "name": SLUG,
        "enabled": True,
        "timeout": 300,
        "type": "streamable_http",
        "uri": URL,
    }
