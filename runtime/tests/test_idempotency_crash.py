"""A server killed mid-call: after a restart the retry is answered once, and honestly."""

from __future__ import annotations

import signal
import time
from typing import Any

from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from sample_tools.effects import effects_count
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, server_argv


def start(env: dict[str, str]) -> StdioSession:
    session = StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=env)
    open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
    return session


def call(session: StdioSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = session.request("tools/call", with_envelope(MODERN, {"name": name, "arguments": arguments}))
    result: dict[str, Any] = answer["result"]
    return result


def kill(session: StdioSession) -> None:
    session.process.send_signal(signal.SIGKILL)
    session.close()


def test_killed_after_the_claim_the_retry_is_in_doubt(subprocess_env: dict[str, str]) -> None:
    arguments = {"account": "acme", "cents": 700, "idempotency_key": "order-17:charge"}
    first = start(subprocess_env)
    first.send(
        {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": with_envelope(MODERN, {"name": "charge_and_hang", "arguments": arguments}),
        }
    )
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while effects_count() == 0:  # the charge went through; the answer never will
        assert time.monotonic() < deadline, "the tool never ran"
        time.sleep(0.05)
    kill(first)

    second = start(subprocess_env)
    with second:
        retry = call(second, "charge_and_hang", arguments)
        health = call(second, "health_check", {})
    assert retry["isError"] is True
    assert retry["_meta"]["error"]["category"] == "in_doubt"
    assert effects_count() == 1, "the charge must not be repeated"
    assert health["structuredContent"]["keys_in_doubt"] == 1


def test_killed_after_the_result_was_stored_the_retry_is_replayed(
    subprocess_env: dict[str, str],
) -> None:
    arguments = {"account": "acme", "cents": 700, "idempotency_key": "order-18:charge"}
    first = start(subprocess_env)
    answered = call(first, "charge", arguments)
    kill(first)

    with start(subprocess_env) as second:
        retry = call(second, "charge", arguments)
    assert answered["isError"] is False
    assert retry["content"] == answered["content"]
    assert retry["_meta"]["idempotency"] == {"key": "order-18:charge", "replayed": True}
    assert effects_count() == 1
