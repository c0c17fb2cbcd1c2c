"""A side-effecting sync call cut while it waited for a worker thread never began: it answers
`transient` and its key is free, never `in_doubt`. Over real stdio, on this project's backend.

Each body writes its key to the ledger as it begins, then waits until the test opens a gate;
more calls than worker threads leave some of them waiting for a thread when their time limit,
or the shutdown past its grace, cuts them. Each answer is checked against the ledger.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import pytest

from resilient_mcp.calls.tool_threads import MAX_TOOL_THREADS
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from resilient_mcp.server.startup import load_settings
from resilient_mcp.store import create_store
from sample_server.settings import Settings
from sample_tools.effects import effects_log
from sample_tools.long_calls import marker
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, server_argv, server_env

CALLS = MAX_TOOL_THREADS + 8  # under MAX_CONCURRENT_CALLS: none is refused for concurrency
TOOL = "charge_when_let_through"
KEYS = [f"order-{n}:charge" for n in range(CALLS)]
Answer = tuple[str | None, bool | None, str]  # category (None: a success), retryable, text


def ran() -> Counter[str]:
    """How many times each key's body began, from the ledger."""
    path = effects_log()
    return Counter(line.split(" ")[0] for line in (path.read_text().splitlines() if path.exists() else []))


def of_raw(message: dict[str, Any]) -> Answer:
    assert "result" in message, message
    result = message["result"]
    error = (result.get("_meta") or {}).get("error") or {}
    return error.get("category"), error.get("retryable"), result["content"][0]["text"]


def call(key: str) -> dict[str, Any]:
    return with_envelope(MODERN, {"name": TOOL, "arguments": {"cents": 5, "idempotency_key": key}})


def send_all(session: StdioSession) -> dict[str, int]:
    ids = {}
    for number, key in enumerate(KEYS, start=1000):
        session.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": call(key)})
        ids[key] = number
    return ids


def wait_until_in_flight(session: StdioSession) -> None:
    health_check = with_envelope(MODERN, {"name": "health_check", "arguments": {}})
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while session.request("tools/call", health_check)["result"]["structuredContent"]["in_flight"] < CALLS:
        assert time.monotonic() < deadline, "the calls never were in flight together"
        time.sleep(0.05)


def answers_to(session: StdioSession, ids: dict[str, int]) -> dict[str, Answer]:
    """The answer to each call, in whatever order they came (every message read is kept)."""
    answers = {}
    for key, number in ids.items():
        seen = [m for m in session.messages if m.get("id") == number and "method" not in m]
        answers[key] = of_raw(seen[0] if seen else session.wait_for(number))
    return answers


def check_against_the_ledger(answers: dict[str, Answer]) -> list[str]:
    """In doubt exactly when the body began, else transient saying nothing ran; the keys that waited."""
    began = ran()
    for key, (category, retryable, text) in answers.items():
        if began[key]:
            assert category == "in_doubt", (key, text)
        else:
            assert (category, retryable) == ("transient", True), (key, text)
            assert "nothing was run" in text
    waited = [key for key in answers if not began[key]]
    assert len(waited) >= CALLS - MAX_TOOL_THREADS, "more calls than threads: some never got one"
    return waited


async def keys_in_doubt() -> set[str]:
    store = create_store(load_settings(Settings))
    await store.open()
    try:
        return {record.key for record in await store.list_keys(in_doubt_only=True, limit=10 * CALLS)}
    finally:
        await store.close()


def retried_until_run(session: StdioSession, key: str) -> Answer:
    """A retry of a key that was cut before its body began: it runs, once the threads are free again."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        answer = of_raw(session.request("tools/call", call(key)))
        if answer[0] != "transient" or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)  # the abandoned bodies still hold the threads: refused before anything ran


@pytest.mark.anyio
async def test_a_call_cut_at_its_time_limit_while_waiting_for_a_thread_is_transient_and_its_key_free(
    subprocess_env: dict[str, str],
) -> None:
    env = {**subprocess_env, **server_env(tool_timeout_s="1")}
    with StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        answers = answers_to(session, send_all(session))
        waited = check_against_the_ledger(answers)
        assert not (await keys_in_doubt() - set(ran())), "a key in doubt whose body never ran"
        marker("gate").touch()
        retries = {key: retried_until_run(session, key) for key in waited}
    assert all(category is None for category, _, _ in retries.values()), retries
    assert set(ran().values()) == {1}, "every body ran once, the waiting ones on their retry"


@pytest.mark.anyio
async def test_a_call_cut_by_sigterm_while_waiting_for_a_thread_is_transient_and_its_key_free(
    subprocess_env: dict[str, str],
) -> None:
    env = {**subprocess_env, **server_env(shutdown_grace_s="1")}
    argv = server_argv("serve", extra_tools=SAMPLE_TOOLS)
    with StdioSession(argv, env=env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        ids = send_all(session)
        wait_until_in_flight(session)
        session.process.send_signal(signal.SIGTERM)
        answers = answers_to(session, ids)
        assert session.process.wait(timeout=ANSWER_TIMEOUT_S) == 0
    waited = check_against_the_ledger(answers)
    assert not (await keys_in_doubt() - set(ran())), "a key in doubt whose body never ran"
    marker("gate").touch()
    with StdioSession(argv, env=env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        retries = {key: retried_until_run(session, key) for key in waited}
    assert all(category is None for category, _, _ in retries.values()), retries
    assert set(ran().values()) == {1}, "the bodies cut while they ran are in doubt, not run again"
