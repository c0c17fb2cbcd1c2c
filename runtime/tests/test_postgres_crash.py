"""PostgreSQL itself crashes mid-call: what a retry trusts is only what was durably committed.

A backend SIGKILLed (as the OOM killer does) makes the postmaster end every backend and
replay its log; a server stopped without a shutdown checkpoint replays it at its next
start. A commit not yet written is gone either way, and the first does not even change
`pg_postmaster_start_time()`. The server under test runs while its database does that
(on a PostgreSQL of this module's own that leaves unforced commits unwritten for 10 s),
then every key is retried: no effect runs twice, and a success already answered is replayed.
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from idempotency_support import new_store
from postgres_fixtures import PostgresServer
from resilient_mcp.authoring.errors import StoreUnavailableError
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from resilient_mcp.store.postgres import PostgresStore
from sample_tools.effects import effects_count, effects_log
from support import ANSWER_TIMEOUT_S, SAMPLE_TOOLS, StdioSession, postgres_project, server_argv, server_env

CRASHES = ["a_backend", "the_postmaster"]
RETRY_FOR_S = 60.0  # a client retrying transient answers while the database comes back


@pytest.fixture
def crash_dsn(crashable_postgres: PostgresServer) -> str:
    """A fresh schema on the PostgreSQL this module crashes."""
    schema = f"crash_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(crashable_postgres.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return make_conninfo(crashable_postgres.dsn, options=f"-c search_path={schema}")


@pytest.fixture
def crash_env(crash_dsn: str, data_dir: Path) -> dict[str, str]:
    return server_env(data_dir=str(data_dir), database_url=crash_dsn, shutdown_grace_s="1")


def crash(server: PostgresServer, how: str) -> None:
    if how == "a_backend":
        server.crash_a_backend()
    else:
        server.crash_and_restart()
    server.wait_until_up()


def start(env: dict[str, str]) -> StdioSession:
    session = StdioSession(server_argv("serve", extra_tools=SAMPLE_TOOLS), env=env)
    open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
    return session


def final_answer(session: StdioSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The answer a client settles on: retryable answers (the store briefly away) retried."""
    give_up = time.monotonic() + RETRY_FOR_S
    while True:
        answer = session.request("tools/call", with_envelope(MODERN, {"name": name, "arguments": arguments}))
        result: dict[str, Any] = answer["result"]
        error = (result.get("_meta") or {}).get("error")
        if error is None or not error["retryable"] or time.monotonic() > give_up:
            return result
        time.sleep(min(float(error.get("retry_after_s") or 0.2), 2.0))


def wait_for_effects(count: int) -> None:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while effects_count() < count:
        assert time.monotonic() < deadline, "the tool never ran"
        time.sleep(0.02)


def category(result: dict[str, Any]) -> str | None:
    error = (result.get("_meta") or {}).get("error")
    return None if error is None else str(error["category"])


@postgres_project  # the server's own table: a postgres project's
@pytest.mark.parametrize("then", ["server_killed", "server_stopped"])
@pytest.mark.parametrize("how", CRASHES)
def test_a_call_whose_body_began_is_never_run_again_after_the_database_crashed(
    crashable_postgres: PostgresServer, crash_env: dict[str, str], how: str, then: str
) -> None:
    arguments = {"account": "acme", "cents": 300, "idempotency_key": f"crash-{how}-{then}"}
    first = start(crash_env)
    first.send(
        {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": with_envelope(MODERN, {"name": "charge_and_hang", "arguments": arguments}),
        }
    )
    wait_for_effects(1)  # the body began (its start mark was written before it) and charged
    crash(crashable_postgres, how)
    if then == "server_killed":
        first.process.kill()
    first.close()  # stopped: stdin ends, the call is cut at the grace and answered

    with start(crash_env) as second:
        retry = final_answer(second, "charge_and_hang", arguments)
    assert category(retry) == "in_doubt", retry
    assert effects_count() == 1, "the charge ran a second time"


@postgres_project  # the server's own table: a postgres project's
@pytest.mark.parametrize("tool", ["charge", "charge_async"])
@pytest.mark.parametrize("how", CRASHES)
def test_a_success_already_answered_is_replayed_after_the_database_crashed(
    crashable_postgres: PostgresServer, crash_env: dict[str, str], how: str, tool: str
) -> None:
    arguments = {"account": "acme", "cents": 400, "idempotency_key": f"ack-{how}-{tool}"}
    with start(crash_env) as session:
        answered = final_answer(session, tool, arguments)
        assert category(answered) is None, answered
        crash(crashable_postgres, how)
        retry = final_answer(session, tool, arguments)
    with start(crash_env) as restarted:
        after_restart = final_answer(restarted, tool, arguments)
    for replay in (retry, after_restart):
        assert category(replay) is None, replay
        assert replay["content"] == answered["content"]
        assert replay["_meta"]["idempotency"]["replayed"] is True
    assert effects_count() == 1


@postgres_project  # the server's own table: a postgres project's
def test_keys_sent_to_two_servers_at_once_run_once_while_the_database_and_a_server_crash(
    crashable_postgres: PostgresServer, crash_env: dict[str, str]
) -> None:
    """Replicas on one database, each key sent to both, a backend or a replica killed now and then."""
    replicas = [start(crash_env), start(crash_env)]
    keys: list[tuple[str, dict[str, Any]]] = []
    try:
        for i in range(24):
            tool = ("charge", "charge_async")[i % 2]  # a start mark, or a claim that records the start
            arguments = {"account": f"replica-{i}", "cents": 100, "idempotency_key": f"replica-{i}"}
            keys.append((tool, arguments))
            params = with_envelope(MODERN, {"name": tool, "arguments": arguments})
            for replica in replicas:
                replica.send({"jsonrpc": "2.0", "id": f"k{i}", "method": "tools/call", "params": params})
            if i % 6 == 3:
                crashable_postgres.crash_a_backend()  # while both replicas handle the key
            if i % 8 == 5:  # one replica dies with the key in its hands, and is started again
                replicas[i % 2].process.kill()
                replicas[i % 2].close()
                replicas[i % 2] = start(crash_env)
            else:
                for replica in replicas:
                    replica.wait_for(f"k{i}")
        finals = [final_answer(replicas[i % 2], tool, arguments) for i, (tool, arguments) in enumerate(keys)]
    finally:
        for replica in replicas:
            replica.close()
    effects = collections.Counter(line.split()[0] for line in effects_log().read_text().splitlines())
    assert max(effects.values()) == 1, f"effects that ran twice: {effects.most_common(3)}"
    for (_, arguments), final in zip(keys, finals, strict=True):
        assert category(final) in (None, "in_doubt"), final
        if category(final) is None:
            assert effects[str(arguments["account"])] == 1, "an answered success without its effect"


@pytest.mark.anyio
async def test_a_live_servers_claims_outlast_an_outage_that_stopped_every_heartbeat(
    crashable_postgres: PostgresServer, crash_dsn: str
) -> None:
    """While the database is down no server can beat; once it is back, a server that saw the
    outage gives the others a whole stale window to beat again before judging them gone."""
    owner = new_store("postgres", crash_dsn, heartbeat_s=2.0)  # stale after 6 s without a beat
    observer = new_store("postgres", crash_dsn, heartbeat_s=0.1)  # sweeps every 0.1 s
    await owner.open()
    await observer.open()
    try:
        assert (await owner.claim("charge", "k-1", "fp", 600.0, started=True)).kind == "new"
        await anyio.to_thread.run_sync(outage, crashable_postgres, 8.0)  # past that window
        await anyio.sleep(2.0)  # the observer's sweep runs ~20 times meanwhile
        seen = await retry_while_unreachable(lambda: observer.claim("charge", "k-1", "fp", 600.0))
        assert seen.kind == "in_progress", seen
        await retry_while_unreachable(lambda: owner.complete("charge", "k-1", {"content": []}))
        assert (await observer.claim("charge", "k-1", "fp", 600.0)).kind == "replay"
    finally:
        await observer.close()
        await owner.close()


@pytest.mark.anyio
@pytest.mark.parametrize("how", CRASHES)
async def test_a_start_mark_is_still_there_after_the_database_crashed(
    crashable_postgres: PostgresServer, crash_dsn: str, how: str
) -> None:
    """On a database whose commits are not forced by default, a start mark lost in a crash
    would make a started call look never started: a retry would take it over and run it again."""
    owner = PostgresStore(crash_dsn, heartbeat_s=60.0)
    retrying = new_store("postgres", crash_dsn, heartbeat_s=60.0)
    await owner.open()
    await retrying.open()
    try:
        assert (await owner.claim("charge", "k-1", "fp", 600.0)).kind == "new"
        await owner.mark_started("charge", "k-1")
        await anyio.to_thread.run_sync(crash, crashable_postgres, how)
        owner.me.mark_closed()  # its server went down with the database
        retry = await retry_while_unreachable(lambda: retrying.claim("charge", "k-1", "fp", 600.0))
        assert retry.kind == "in_doubt", retry
    finally:
        await retrying.close()
        await owner.close()


def outage(server: PostgresServer, seconds: float) -> None:
    server.stop_immediately()
    time.sleep(seconds)
    server.start()
    server.wait_until_up()


async def retry_while_unreachable(operation: Callable[[], Any]) -> Any:
    """A pooled connection from before the outage fails once; the next one is new."""
    for _ in range(20):
        try:
            return await operation()
        except StoreUnavailableError:
            await anyio.sleep(0.2)
    return await operation()
