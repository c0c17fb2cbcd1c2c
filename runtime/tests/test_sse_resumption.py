"""A 2025-11-25 answer whose SSE stream drops mid-call is resumed with `Last-Event-ID` (SEP-1699):
on the same server, and with PostgreSQL on another replica; the event store stays bounded."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from mcp.server.streamable_http import EventMessage
from mcp.types import JSONRPCNotification, JSONRPCResponse

from http_support import INITIALIZE, shared_server_env
from resilient_mcp.http import resumption
from resilient_mcp.http.resumption import EventLog
from sample_server.project import ENV_PREFIX
from support import ANSWER_TIMEOUT_S, HERE, http_server, postgres_project

TOOLS = HERE / "resumption_tools"
SSE = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def replica(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """A server with sessions, for the module (start-up costs seconds): its /mcp URL, and its settings
    (with PostgreSQL, a replica started with them shares its database)."""
    env = shared_server_env(request, tmp_path_factory.mktemp("resumption"))
    with http_server(env, extra_tools=TOOLS, stderr=subprocess.DEVNULL) as (url, _):
        yield url, env


def events(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The SSE events of a streamed response, each as its fields."""
    event: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = event.get(name, "") + value.removeprefix(" ")


@contextmanager
def session(http: httpx.Client, url: str) -> Iterator[dict[str, str]]:
    """A 2025-11-25 session opened on `url`: the headers its later requests carry."""
    opened = http.post(url, json=INITIALIZE, headers=SSE)
    assert opened.status_code == 200, opened.text
    headers = {
        **SSE,
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "Mcp-Protocol-Version": "2025-11-25",
    }
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    yield headers


def call_until_progress(http: httpx.Client, url: str, headers: dict[str, str], release: Path) -> str:
    """Call `held_answer`, read its answer up to the progress notification, then drop the
    connection: the id of the last event read."""
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "held_answer",
            "arguments": {"release": str(release)},
            "_meta": {"progressToken": 1},
        },
    }
    with http.stream("POST", url, json=call, headers=headers) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for event in events(answer):
            if event.get("data"):
                JSONRPCNotification.model_validate_json(event["data"])  # the progress, not the answer
                return event["id"]
    raise AssertionError("the answer ended before its progress notification")


def resumed_answer(
    http: httpx.Client, url: str, headers: dict[str, str], last_event_id: str, release: Path
) -> Any:
    """GET with `Last-Event-ID`, then let the tool answer: the JSON-RPC messages that come."""
    messages = []
    with http.stream("GET", url, headers={**headers, "Last-Event-ID": last_event_id}) as resumed:
        assert resumed.status_code == 200, resumed.read()
        release.touch()  # only now does the answer exist
        for event in events(resumed):
            if event.get("data"):
                messages.append(json.loads(event["data"]))
                if "result" in messages[-1]:
                    break
    assert "result" in (messages or [{}])[-1], f"the stream ended without the answer: {messages}"
    return messages


@pytest.mark.answers_independent_postgres  # the postgres run, whose replica test shares its server
@pytest.mark.network
def test_an_answer_whose_stream_dropped_is_resumed_with_last_event_id(
    replica: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    url, _ = replica
    with (
        httpx.Client(timeout=ANSWER_TIMEOUT_S) as http,
        session(http, url) as headers,
    ):
        last = call_until_progress(http, url, headers, release)
        messages = resumed_answer(http, url, headers, last, release)
    answer = JSONRPCResponse.model_validate(messages[-1])
    assert answer.id == 7
    assert answer.result["content"][0]["text"] == "released by release"
    assert len(messages) == 1  # nothing before the last event read is sent again


@postgres_project
@pytest.mark.network
def test_an_answer_is_resumed_on_another_replica_from_the_database(
    replica: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    url_a, env = replica
    with (
        http_server(env, extra_tools=TOOLS, stderr=subprocess.DEVNULL) as (url_b, _),
        httpx.Client(timeout=ANSWER_TIMEOUT_S) as http,
        session(http, url_a) as headers,
    ):
        last = call_until_progress(http, url_a, headers, release)
        messages = resumed_answer(http, url_b, headers, last, release)  # the load balancer's choice
        with psycopg.connect(env[f"{ENV_PREFIX}DATABASE_URL"]) as db:
            written = db.execute(
                "SELECT DISTINCT stream_key FROM mcp_stream_events WHERE session_id = %s",
                (headers["Mcp-Session-Id"],),
            ).fetchall()
    answer = JSONRPCResponse.model_validate(messages[-1])
    assert (answer.id, answer.result["content"][0]["text"]) == (7, "released by release")
    assert len(messages) == 1
    assert written == [(last.rpartition("-")[0],)]  # the held answer only: initialize's was done at once


@pytest.mark.anyio
async def test_the_event_store_drops_the_oldest_events_beyond_its_bounds_and_a_session_s_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resumption, "MAX_STREAM_EVENTS", 3)
    monkeypatch.setattr(resumption, "MAX_EVENTS", 5)
    log = EventLog()
    mine, theirs = log.for_session("s1", ""), log.for_session("s2", "")

    def progress(n: int) -> JSONRPCNotification:
        return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"progress": n})

    first = await mine.store_event("1", None)
    ids = [await mine.store_event("1", progress(n)) for n in range(4)]
    assert log.events == 3  # the priming event and the first progress went, oldest first

    async def replayed(store: Any, after: str) -> list[Any]:
        sent: list[EventMessage] = []

        async def keep(message: EventMessage) -> None:
            sent.append(message)

        await store.replay_events_after(after, keep)
        return [
            (JSONRPCNotification.model_validate(message.message).params or {})["progress"] for message in sent
        ]

    assert await replayed(mine, first) == [1, 2, 3]
    assert await replayed(theirs, first) == []  # another session's stream is not theirs to read

    for n in range(3):  # another session's answer: over all, the oldest events go first
        await theirs.store_event("1", progress(10 + n))
    assert log.events == 5
    assert await replayed(mine, ids[0]) == [2, 3]

    theirs.forget()  # its session ended
    assert log.events == 2
    assert log.size == sum(
        len(progress(n).model_dump_json(by_alias=True, exclude_unset=True)) for n in (2, 3)
    )
