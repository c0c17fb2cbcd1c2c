"""Idempotency keys stored by a release 0.3.0 server survive `copier update` to the work tree.

Release 0.3.0 scoped a key by (tool, key); the work tree scopes it by (caller, tool, key). A
project made from 0.3.0 stores keys by running its own server over stdio (the notes example
tool); after the update, its new server, still the one caller of stdio, replays a stored key
and leaves a key in doubt in doubt: no effect runs twice across the upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from .answers import DEFAULT_ANSWERS, answers
from .gitrepo import commit_all, init_and_commit
from .project_env import ProjectEnv, run
from .releases import released_versions
from .rendering import render, update

PACKAGE = DEFAULT_ANSWERS["package_name"]
RELEASE = next(release for release in released_versions() if release.version == "0.3.0")
DONE = {"notebook": "journal", "text": "paid the rent", "idempotency_key": "run-1:step-1"}
IN_DOUBT = {"notebook": "journal", "text": "sent the invoice", "idempotency_key": "run-1:step-2"}

# Run by the 0.3.0 project's own interpreter: a call to append_note whose server stopped after
# its body began (the store marks it in doubt when it closes), as a crash mid-call leaves it.
LEAVE_IN_DOUBT = f"""
import anyio, json, sys
from {PACKAGE}.core._idempotency import create_store, fingerprint
from {PACKAGE}.core._startup import load_settings
from {PACKAGE}.settings import Settings

async def main() -> None:
    store = create_store(load_settings(Settings))
    await store.open()
    arguments = json.loads(sys.argv[1])
    await store.claim("append_note", arguments["idempotency_key"], fingerprint(arguments), 60.0)
    await store.mark_started("append_note", arguments["idempotency_key"])
    await store.close()

anyio.run(main)
"""


def server_environ(venv: ProjectEnv, data_dir: Path) -> dict[str, str]:
    """The project's environment activated, its data directory the test's."""
    return {**venv.environ, f"{DEFAULT_ANSWERS['env_prefix']}DATA_DIR": str(data_dir)}


async def call_over_stdio(venv: Path, env: Mapping[str, str], arguments: dict[str, Any]) -> CallToolResult:
    """One append_note call, as an MCP host makes it: the project's server over stdio."""
    params = StdioServerParameters(command=str(venv / "bin" / "python"), args=["-m", PACKAGE], env=dict(env))
    async with Client(params) as client:
        return await client.call_tool("append_note", arguments)


def notes(data_dir: Path) -> list[str]:
    path = data_dir / "notebooks" / "journal.jsonl"
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.generated(minutes=2)
def test_keys_stored_by_a_0_3_0_server_replay_and_stay_in_doubt_after_copier_update(
    release_repo: Path, open_tmp: Path
) -> None:
    project = render(release_repo, open_tmp / "keys-from-0.3.0", answers(), RELEASE.tag)
    init_and_commit(project, f"Project from template {RELEASE.tag}")
    python_version = DEFAULT_ANSWERS["python_version"]
    old = ProjectEnv.create(project, open_tmp / "keys-venv-0.3.0", python_version)
    data_dir = open_tmp / "keys-data"
    env = server_environ(old, data_dir)
    first = anyio.run(call_over_stdio, old.venv, env, DONE)
    run([str(old.venv / "bin" / "python"), "-c", LEAVE_IN_DOUBT, json.dumps(IN_DOUBT)], project, env=env)
    assert not first.is_error, first

    update(project, "HEAD")
    commit_all(project, "Update to the newest template")
    new = ProjectEnv.create(project, open_tmp / "keys-venv-new", python_version)
    env = server_environ(new, data_dir)
    retry = anyio.run(call_over_stdio, new.venv, env, DONE)
    doubtful = anyio.run(call_over_stdio, new.venv, env, IN_DOUBT)
    slug = str(new.venv / "bin" / DEFAULT_ANSWERS["project_slug"])
    listed = json.loads(run([slug, "keys", "list", "--json"], project, env=env))

    assert retry.meta is not None
    assert retry.meta["idempotency"] == {"key": DONE["idempotency_key"], "replayed": True}
    assert retry.structured_content == first.structured_content
    assert doubtful.is_error
    assert doubtful.meta is not None
    assert doubtful.meta["error"]["category"] == "in_doubt"
    assert notes(data_dir) == ["paid the rent"], "neither call ran a second time"
    assert {(record["key"], record["caller"], record["state"]) for record in listed} == {
        ("run-1:step-1", "legacy", "completed"),
        ("run-1:step-2", "local", "in_doubt"),
    }
