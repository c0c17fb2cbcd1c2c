"""A confirmation (2026-07-28 `InputRequiredResult`) begun on one stateless replica completes on another.

The SDK seals `requestState` under a key of its own process unless `REQUEST_STATE_KEYS` gives
every replica the same ring; stateless replicas without it cannot start.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from http_support import json_rpc_answer, post
from resilient_mcp import FatalError
from resilient_mcp.commands.diagnose import MODERN, with_envelope
from resilient_mcp.server.startup import load_settings
from sample_server.project import ENV_PREFIX
from sample_server.settings import Settings
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, http_server, server_argv

OLD_KEY = "old-request-state-key-0123456789abcdefghijkl"
NEW_KEY = "new-request-state-key-0123456789abcdefghijkl"
CAN_BE_ASKED: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}


def stateless(env: dict[str, str], *keys: str) -> dict[str, str]:
    return {**env, f"{ENV_PREFIX}HTTP_STATELESS": "true", f"{ENV_PREFIX}REQUEST_STATE_KEYS": ",".join(keys)}


def delete_file(url: str, **more: Any) -> tuple[int, dict[str, Any]]:
    """tools/call delete_file at 2026-07-28 over raw HTTP: the status and the JSON-RPC answer."""
    params = with_envelope(MODERN, {"name": "delete_file", "arguments": {"name": "old.txt"}, **more})
    params["_meta"].update(CAN_BE_ASKED)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "delete_file"}
    status, _, body = post(url, call, **headers)
    return status, json_rpc_answer(body)


def begin(url: str) -> dict[str, Any]:
    """The first round: the server asks for the confirmation and seals where it stands."""
    status, answer = delete_file(url)
    assert status == 200, answer
    asked: dict[str, Any] = answer["result"]
    assert asked["resultType"] == "input_required"
    return asked


def confirm(url: str, asked: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The second round, with the user's yes and the state the first round sealed."""
    yes = {"action": "accept", "content": {"confirm": True}}
    responses = dict.fromkeys(asked["inputRequests"], yes)
    return delete_file(url, inputResponses=responses, requestState=asked["requestState"])


@pytest.fixture
def old_file(data_dir: Path) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "old.txt"
    path.write_text("old")
    return path


@pytest.mark.network
def test_a_confirmation_begun_on_one_replica_completes_on_another(
    subprocess_env: dict[str, str], old_file: Path
) -> None:
    env = stateless(subprocess_env, OLD_KEY)
    with (
        http_server(env, extra_tools=SAMPLE_TOOLS) as (url_a, _),
        http_server(env, extra_tools=SAMPLE_TOOLS) as (url_b, _),
    ):
        status, answer = confirm(url_b, begin(url_a))
    assert status == 200, answer
    assert answer["result"]["content"][0]["text"] == "deleted old.txt"
    assert not old_file.exists()


@pytest.mark.network
def test_state_sealed_before_a_key_rotation_is_accepted_by_a_replica_that_keeps_the_old_key(
    subprocess_env: dict[str, str], old_file: Path
) -> None:
    with (
        http_server(stateless(subprocess_env, OLD_KEY), extra_tools=SAMPLE_TOOLS) as (old, _),
        http_server(stateless(subprocess_env, NEW_KEY), extra_tools=SAMPLE_TOOLS) as (new_only, _),
        http_server(stateless(subprocess_env, NEW_KEY, OLD_KEY), extra_tools=SAMPLE_TOOLS) as (rotated, _),
    ):
        asked = begin(old)
        refused_status, refused = confirm(new_only, asked)
        assert old_file.exists(), "a replica without the key runs nothing"
        status, answer = confirm(rotated, asked)
    assert (refused_status, refused["error"]["message"]) == (400, "Invalid or expired requestState")
    assert status == 200, answer
    assert answer["result"]["content"][0]["text"] == "deleted old.txt"
    assert not old_file.exists()


def serve_stateless(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = server_argv("serve", "--transport", "http", "--port", "0")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=ANSWER_TIMEOUT_S)


def test_stateless_http_without_shared_keys_stops_before_serving(subprocess_env: dict[str, str]) -> None:
    result = serve_stateless({**subprocess_env, f"{ENV_PREFIX}HTTP_STATELESS": "true"})
    assert result.returncode == 78  # EX_CONFIG, written out: a changed constant fails here
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("FATAL: ")
    assert f"{ENV_PREFIX}REQUEST_STATE_KEYS" in lines[0]
    assert "secrets.token_urlsafe(48)" in lines[0], "the line says how to make a key"


def test_a_short_key_stops_before_serving_and_is_never_shown(subprocess_env: dict[str, str]) -> None:
    short = "too-short-but-secret"
    result = serve_stateless(stateless(subprocess_env, OLD_KEY, short))
    assert result.returncode == 78  # EX_CONFIG, written out: a changed constant fails here
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{ENV_PREFIX}REQUEST_STATE_KEYS=[redacted]" in lines[0]
    assert "key 2 is shorter than 32 bytes" in lines[0]
    assert short not in result.stderr
    assert OLD_KEY not in result.stderr


def test_a_key_listed_twice_is_refused(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"{ENV_PREFIX}REQUEST_STATE_KEYS", f"{OLD_KEY},{OLD_KEY}")
    with pytest.raises(FatalError) as refused:
        load_settings(Settings)
    assert "a key is listed twice" in str(refused.value)
    assert OLD_KEY not in str(refused.value)
