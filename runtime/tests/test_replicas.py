"""Two server processes share one idempotency table: a retry that lands on the other runs nothing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from http_support import STATELESS, json_rpc_answer, post
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from sample_tools.effects import effects_count
from support import (
    ANSWER_TIMEOUT_S,
    SAMPLE_TOOLS,
    StdioSession,
    http_server,
    postgres_project,
    server_argv,
)


def test_the_same_key_sent_to_two_replicas_runs_once(subprocess_env: dict[str, str]) -> None:
    replicas = [
        StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=subprocess_env) for _ in "ab"
    ]
    arguments = {"account": "acme", "cents": 250, "seconds": 0.2, "idempotency_key": "order-9:charge"}
    request: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": "charge",
        "method": "tools/call",
        "params": with_envelope(MODERN, {"name": "charge_slowly", "arguments": arguments}),
    }
    for replica in replicas:
        open_session(replica, MODERN, timeout=ANSWER_TIMEOUT_S)
    for replica in replicas:  # both at once, as a client retrying on another replica would
        replica.send(request)
    answers = [replica.wait_for("charge")["result"] for replica in replicas]
    # Later retries, one on each replica, once the first call has finished.
    retries = [replica.request("tools/call", request["params"])["result"] for replica in replicas]
    for replica in replicas:
        assert replica.close() == 0

    assert effects_count() == 1
    ran = [a for a in answers if not a["isError"] and a["_meta"]["idempotency"]["replayed"] is False]
    assert len(ran) == 1
    for answer in answers:
        if answer["isError"]:
            assert answer["_meta"]["error"]["category"] == "conflict"
            assert answer["_meta"]["error"]["retryable"] is True
    for retry in retries:
        assert retry["content"] == ran[0]["content"]
        assert retry["_meta"]["idempotency"]["replayed"] is True


@postgres_project
@pytest.mark.network
@pytest.mark.anyio
async def test_stateless_http_replicas_on_one_database_run_a_key_once(subprocess_env: dict[str, str]) -> None:
    env = {**subprocess_env, **STATELESS}
    arguments = {"account": "acme", "cents": 250, "seconds": 0.5, "idempotency_key": "order-10:charge"}
    answers: list[CallToolResult] = []
    with (
        http_server(env, extra_tools=SAMPLE_TOOLS) as (url_a, _),
        http_server(env, extra_tools=SAMPLE_TOOLS) as (url_b, _),
    ):

        async def charge(url: str) -> None:
            async with Client(url) as client:
                answers.append(await client.call_tool("charge_slowly", arguments))

        async with anyio.create_task_group() as group:  # both at once, as a retry on another replica
            group.start_soon(charge, url_a)
            group.start_soon(charge, url_b)
        async with Client(url_b) as client:
            retry = await client.call_tool("charge_slowly", arguments)
    assert effects_count() == 1
    ran = [a for a in answers if not a.is_error]
    assert ran
    assert retry.meta is not None
    assert retry.meta["idempotency"]["replayed"] is True
    for answer in answers:
        assert answer.meta is not None
        if answer.is_error:
            assert answer.meta["error"]["category"] == "conflict"


@postgres_project
@pytest.mark.network
def test_a_legacy_session_begun_on_one_stateless_replica_goes_on_on_another(
    subprocess_env: dict[str, str],
) -> None:
    env = {**subprocess_env, **STATELESS}
    with http_server(env) as (url_a, _), http_server(env) as (url_b, _):
        status, headers, _ = post(url_a)  # initialize, 2025-11-25 era
        assert status == 200
        assert "mcp-session-id" not in headers  # nothing ties the client to this replica
        era = {"MCP-Protocol-Version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert post(url_b, initialized, **era)[0] == 202
        params = {"name": "health_check", "arguments": {}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        status, _, body = post(url_b, call, **era)
    assert status == 200
    assert json_rpc_answer(body)["result"]["structuredContent"]["status"] == "ok"
