"""Durable tasks as a client sees them (the `io.modelcontextprotocol/tasks` extension, SEP-2663).

A real server with the task bodies of tests/task_tools, spoken to in the 2026-07-28 era: over
stdio for what any client sees (one server for the module), and over HTTP with bearer tokens
for what depends on who calls (callers, the per-caller bound, the rate limit, headers).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from http_support import json_rpc_answer, post
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from resilient_mcp.tasks.wire import EXTENSION, REQUEST_CAPABILITIES
from sample_server.project import IDEMPOTENCY_BACKEND
from support import ANSWER_TIMEOUT_S, StdioSession, http_server, server_argv, server_env
from task_tools.task_bodies import EVENTS, events

TASK_TOOLS = Path(__file__).with_name("task_tools")
TTL_S, POLL_INTERVAL_MS = 7200, 250  # not the defaults: what a task says comes from the settings
TASK_FIELDS = {"resultType", "taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
ACK = {"resultType": "complete"}
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
UNKNOWN_ID = "0" * 32
INVALID_PARAMS, METHOD_NOT_FOUND, HEADER_MISMATCH, MISSING_CAPABILITY = -32602, -32601, -32020, -32021
NAME = {"action": "accept", "content": {"name": "Ana"}}
CONFIRM = {"action": "accept", "content": {"confirm": True}}
ANA, BEN, CY = ("t0k3n-" + pair * 20 for pair in ("a1", "b2", "c3"))


def declaring(params: dict[str, Any]) -> dict[str, Any]:
    """Request params in the 2026-07-28 envelope, from a client that declares the extension."""
    return with_envelope(MODERN, {**params, "_meta": {REQUEST_CAPABILITIES: {"extensions": {EXTENSION: {}}}}})


def without_meta(answer: dict[str, Any]) -> dict[str, Any]:
    """A result without the `_meta` envelope every 2026-07-28 answer carries (the server's info)."""
    return {name: value for name, value in answer.items() if name != "_meta"}


@contextmanager
def own_database(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The settings that give a module's server a table of its own: a fresh PostgreSQL schema (the
    per-test one does not exist at module scope), or nothing with SQLite (its data directory's)."""
    if IDEMPOTENCY_BACKEND != "postgres":
        yield {}
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    name = f"tasks_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield {"database_url": make_conninfo(dsn, options=f"-c search_path={name}")}
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


class TaskClient:
    """A client of the module's stdio server that declares the tasks extension on each request."""

    def __init__(self, session: StdioSession, data_dir: Path, discovered: dict[str, Any]) -> None:
        self.session = session
        self.data_dir = data_dir
        self.discovered = discovered

    def request(self, method: str, params: dict[str, Any], *, declare: bool = True) -> dict[str, Any]:
        """The whole JSON-RPC answer (a result or an error)."""
        return self.session.request(method, declaring(params) if declare else with_envelope(MODERN, params))

    def result(self, method: str, params: dict[str, Any], *, declare: bool = True) -> dict[str, Any]:
        answer = self.request(method, params, declare=declare)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def error(self, method: str, params: dict[str, Any], *, declare: bool = True) -> dict[str, Any]:
        answer = self.request(method, params, declare=declare)
        assert "error" in answer, answer
        error: dict[str, Any] = answer["error"]
        return error

    def call(self, tool: str, arguments: dict[str, Any], *, declare: bool = True) -> dict[str, Any]:
        return self.result("tools/call", {"name": tool, "arguments": arguments}, declare=declare)

    def start(self, tool: str, arguments: dict[str, Any]) -> str:
        """A tools/call that became a task: its id."""
        created = self.call(tool, arguments)
        assert created["resultType"] == "task", created
        task_id: str = created["taskId"]
        return task_id

    def get(self, task_id: str) -> dict[str, Any]:
        return self.result("tasks/get", {"taskId": task_id})

    def wait_until(self, task_id: str, *statuses: str) -> dict[str, Any]:
        """tasks/get until the task is in one of `statuses`."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while True:
            task = self.get(task_id)
            if task["status"] in statuses:
                return task
            assert time.monotonic() < deadline, f"still {task['status']}, not {statuses}: {task}"
            time.sleep(0.05)

    def events(self, label: str) -> list[str]:
        return events(self.data_dir, label)

    def wait_for_event(self, label: str, event: str) -> list[str]:
        """The events of `label` once `event` is among them."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while event not in self.events(label):
            assert time.monotonic() < deadline, f"{label}: no {event!r} in {self.events(label)}"
            time.sleep(0.05)
        return self.events(label)

    def effects(self, account: str) -> int:
        """The effects of `charge_as_a_task` on `account` (tests/sample_tools effects log)."""
        path = self.data_dir / "effects.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return sum(1 for line in lines if line.split(" ")[0] == account)


@pytest.fixture(scope="module")
def tasks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskClient]:
    """One stdio server for the module's checks (each labels its runs; none leaves a task running)."""
    data_dir = tmp_path_factory.mktemp("tasks")
    with own_database(request) as database:
        settings = {"task_ttl_s": str(TTL_S), "task_poll_interval_ms": str(POLL_INTERVAL_MS), **database}
        env = server_env(data_dir=str(data_dir), **settings)
        with StdioSession(server_argv("serve", extra_tools=TASK_TOOLS), env=env) as session:
            discovered = open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
            yield TaskClient(session, data_dir, discovered)


def text_of(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


# --- negotiation ----------------------------------------------------------------------


def test_the_extension_is_advertised_only_by_a_server_with_a_task_tool(
    tasks: TaskClient, subprocess_env: dict[str, str]
) -> None:
    with StdioSession(server_argv("serve"), env=subprocess_env) as plain:
        without = open_session(plain, MODERN, timeout=ANSWER_TIMEOUT_S)

    assert tasks.discovered["result"]["capabilities"]["extensions"][EXTENSION] == {}  # beside the skills
    assert EXTENSION not in without["result"]["capabilities"].get("extensions", {})


def test_a_client_without_the_extension_gets_calls_for_optional_tools_and_minus_32021_for_the_rest(
    tasks: TaskClient,
) -> None:
    task_id = tasks.start("only_as_a_task", {"label": "negotiation"})

    optional = tasks.call("wait_then_answer", {"label": "negotiation", "seconds": 0}, declare=False)
    required = tasks.error(
        "tools/call", {"name": "only_as_a_task", "arguments": {"label": "x"}}, declare=False
    )
    methods = {
        method: tasks.error(method, {"taskId": task_id}, declare=False)
        for method in ("tasks/get", "tasks/update", "tasks/cancel")
    }
    removed = {method: tasks.error(method, {"taskId": task_id}) for method in ("tasks/result", "tasks/list")}

    assert (optional["isError"], text_of(optional)) == (False, "negotiation done after 0 s"), "a normal call"
    assert "resultType" not in optional or optional["resultType"] == "complete"
    for error in (required, *methods.values()):
        assert error["code"] == MISSING_CAPABILITY, error
        assert error["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    assert EXTENSION in required["message"]
    assert {method: error["code"] for method, error in removed.items()} == {
        "tasks/result": METHOD_NOT_FOUND,
        "tasks/list": METHOD_NOT_FOUND,
    }
    assert tasks.wait_until(task_id, "completed")["status"] == "completed", "refused calls changed nothing"


def test_an_unknown_task_id_is_invalid_params_for_every_method(tasks: TaskClient) -> None:
    errors = [
        tasks.error(method, {"taskId": UNKNOWN_ID})
        for method in ("tasks/get", "tasks/update", "tasks/cancel")
    ]

    assert {error["code"] for error in errors} == {INVALID_PARAMS}
    assert len({error["message"] for error in errors}) == 1
    assert "unknown task" in errors[0]["message"]


# --- a task's life ---------------------------------------------------------------------


def test_a_task_is_created_with_exactly_the_tasks_fields_then_completes_with_the_result(
    tasks: TaskClient,
) -> None:
    created = tasks.call("wait_then_answer", {"label": "life", "seconds": 0})
    task_id = created["taskId"]
    done = tasks.wait_until(task_id, "completed")
    cancelled_after = tasks.result("tasks/cancel", {"taskId": task_id})

    assert set(without_meta(created)) == TASK_FIELDS
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert re.fullmatch(r"[0-9a-f]{32}", task_id)
    assert (created["ttlMs"], created["pollIntervalMs"]) == (TTL_S * 1000, POLL_INTERVAL_MS)
    assert ISO_UTC.match(created["createdAt"])
    assert ISO_UTC.match(created["lastUpdatedAt"])
    assert (done["resultType"], done["taskId"], done["createdAt"]) == (
        "complete",
        task_id,
        created["createdAt"],
    )
    assert done["result"]["isError"] is False
    assert text_of(done["result"]) == "life done after 0 s"
    assert without_meta(cancelled_after) == ACK
    assert tasks.get(task_id)["status"] == "completed", "cancelling a finished task changes nothing"


@pytest.mark.parametrize(("how", "category"), [("input", "invalid_input"), ("terminal", "terminal")])
def test_a_tool_failure_completes_the_task_with_an_error_result(
    tasks: TaskClient, how: str, category: str
) -> None:
    task_id = tasks.start("fail_as", {"label": f"failure-{how}", "how": how})

    done = tasks.wait_until(task_id, "completed", "failed")

    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["_meta"]["error"]["category"] == category
    assert f"failure-{how}" in text_of(done["result"])


def test_a_protocol_error_fails_the_task_with_that_error(tasks: TaskClient) -> None:
    task_id = tasks.start("fail_as", {"label": "protocol", "how": "protocol"})

    done = tasks.wait_until(task_id, "completed", "failed")

    assert done["status"] == "failed"
    assert "result" not in done
    assert done["error"]["code"] == -32603
    assert done["error"]["message"] == "protocol: a protocol-level failure"


def test_invalid_arguments_are_a_plain_invalid_input_result_and_no_task(tasks: TaskClient) -> None:
    answer = tasks.call("wait_then_answer", {"label": "invalid", "seconds": -1})

    assert answer.get("resultType", "complete") == "complete"
    assert "taskId" not in answer
    assert answer["isError"] is True
    assert answer["_meta"]["error"]["category"] == "invalid_input"
    assert tasks.events("invalid") == [], "the body never ran"


def test_a_side_effect_task_with_the_same_key_is_the_same_task_and_runs_once(tasks: TaskClient) -> None:
    charge = {"account": "key-task", "cents": 250, "idempotency_key": "order-1:charge"}

    first = tasks.start("charge_as_a_task", charge)
    again = tasks.start("charge_as_a_task", charge)
    done = tasks.wait_until(first, "completed")
    after = tasks.start("charge_as_a_task", charge)
    other = tasks.call("charge_as_a_task", {**charge, "cents": 999})

    assert again == first == after
    assert text_of(done["result"]).startswith("charged 250 to key-task")
    assert tasks.effects("key-task") == 1
    assert (other["isError"], other["_meta"]["error"]["category"]) == (True, "conflict")
    assert "taskId" not in other


def test_a_key_whose_task_did_nothing_is_retried_as_a_new_task(tasks: TaskClient) -> None:
    charge = {"account": "retried-task", "cents": 300, "idempotency_key": "order-2:charge", "label": "shut"}
    with (tasks.data_dir / EVENTS).open("a") as log:
        log.write("shut closed\n")

    refused = tasks.start("charge_an_open_account", charge)
    ended = tasks.wait_until(refused, "completed")
    with (tasks.data_dir / EVENTS).open("a") as log:
        log.write("shut opened\n")
    retried = tasks.start("charge_an_open_account", charge)
    charged = tasks.wait_until(retried, "completed")

    assert ended["result"]["_meta"]["error"]["category"] == "invalid_input"
    assert retried != refused, "a key whose task did nothing gets a new task, as a call's key is freed"
    assert text_of(charged["result"]).startswith("charged 300 to retried-task")
    assert tasks.effects("retried-task") == 1
    assert tasks.start("charge_an_open_account", charge) == retried  # and that one is kept


# --- asking the client -------------------------------------------------------------------


def test_answers_come_in_parts_and_the_body_runs_again_with_all_of_them(tasks: TaskClient) -> None:
    task_id = tasks.start("ask_two_questions", {"label": "asks"})
    asked = tasks.wait_until(task_id, "input_required")

    partly = tasks.result("tasks/update", {"taskId": task_id, "inputResponses": {"name": NAME}})
    still = tasks.get(task_id)
    tasks.result("tasks/update", {"taskId": task_id, "inputResponses": {"confirm": CONFIRM}})
    done = tasks.wait_until(task_id, "completed")

    assert set(asked["inputRequests"]) == {"name", "confirm"}
    assert asked["inputRequests"]["name"]["method"] == "elicitation/create"
    assert without_meta(partly) == ACK
    assert (still["status"], set(still["inputRequests"])) == ("input_required", {"confirm"})
    assert text_of(done["result"]) == "name=Ana, confirm=True"
    assert tasks.events("asks") == ["ran with no answers", "ran with confirm,name"]


def test_a_malformed_answer_is_invalid_params_and_nothing_of_the_update_is_kept(tasks: TaskClient) -> None:
    task_id = tasks.start("ask_two_questions", {"label": "malformed"})
    tasks.wait_until(task_id, "input_required")

    malformed = tasks.error("tasks/update", {"taskId": task_id, "inputResponses": {"name": "Ana"}})
    mixed = tasks.error(
        "tasks/update", {"taskId": task_id, "inputResponses": {"name": NAME, "confirm": {"confirm": 1}}}
    )
    after = tasks.get(task_id)
    tasks.result("tasks/cancel", {"taskId": task_id})

    assert (malformed["code"], mixed["code"]) == (INVALID_PARAMS, INVALID_PARAMS)
    assert "nothing was kept" in malformed["message"]
    assert (after["status"], set(after["inputRequests"])) == ("input_required", {"name", "confirm"})
    assert tasks.events("malformed") == ["ran with no answers"]


# --- progress and cancel ----------------------------------------------------------------------


def test_progress_reported_by_the_body_is_the_tasks_status_message(tasks: TaskClient) -> None:
    task_id = tasks.start("wait_then_answer", {"label": "progress", "seconds": 120})
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while "statusMessage" not in (task := tasks.get(task_id)):
        assert time.monotonic() < deadline, task
        time.sleep(0.05)
    tasks.result("tasks/cancel", {"taskId": task_id})

    assert (task["status"], task["statusMessage"]) == ("working", "first step done (1/4)")


def test_cancel_stops_a_running_async_body_and_the_task_reads_cancelled(tasks: TaskClient) -> None:
    task_id = tasks.start("wait_then_answer", {"label": "cancel-async", "seconds": 120})
    tasks.wait_for_event("cancel-async", "started")

    acknowledged = tasks.result("tasks/cancel", {"taskId": task_id})
    task = tasks.get(task_id)

    assert without_meta(acknowledged) == ACK
    assert (task["status"], task["statusMessage"]) == ("cancelled", "cancelled by the client")
    assert "result" not in task
    assert tasks.wait_for_event("cancel-async", "cancelled") == ["started", "cancelled"]


def test_cancel_turns_a_sync_bodys_cancel_flag_true(tasks: TaskClient) -> None:
    task_id = tasks.start("wait_for_the_cancel_flag", {"label": "cancel-sync"})
    tasks.wait_for_event("cancel-sync", "started")

    tasks.result("tasks/cancel", {"taskId": task_id})

    assert tasks.wait_for_event("cancel-sync", "saw its cancel flag") == ["started", "saw its cancel flag"]
    assert tasks.get(task_id)["status"] == "cancelled"


# --- over HTTP: callers, bounds, headers --------------------------------------------------------


class HttpCaller:
    """One bearer subject speaking raw 2026-07-28 JSON-RPC to the module's HTTP server."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self._ids = iter(range(1, 1_000_000))

    def send(
        self, method: str, params: dict[str, Any], *, declare: bool = True, name: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """The HTTP status and the JSON-RPC answer; `name`: the Mcp-Name header (a tool's by default)."""
        body = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": method,
            "params": declaring(params) if declare else with_envelope(MODERN, params),
        }
        headers = {
            "Authorization": f"Bearer {self.token}",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        named = params["name"] if method == "tools/call" else name
        if named is not None:
            headers["Mcp-Name"] = named
        status, _, text = post(self.url, body, **headers)
        return status, json_rpc_answer(text)

    def result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        status, answer = self.send(method, params)
        assert (status, "result" in answer) == (200, True), answer
        result: dict[str, Any] = answer["result"]
        return result

    def start(self, tool: str, arguments: dict[str, Any]) -> str:
        created = self.result("tools/call", {"name": tool, "arguments": arguments})
        assert created.get("resultType") == "task", created
        task_id: str = created["taskId"]
        return task_id

    def wait_until(self, task_id: str, status: str) -> None:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while (task := self.result("tasks/get", {"taskId": task_id}))["status"] != status:
            assert time.monotonic() < deadline, task
            time.sleep(0.05)


@pytest.fixture(scope="module")
def http_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HTTP server with three bearer subjects, two unfinished tasks per caller, 3 calls a minute."""
    data_dir = tmp_path_factory.mktemp("tasks-http")
    tokens = data_dir.parent / "tokens"
    tokens.write_text(f"ana {ANA}\nben {BEN}\ncy {CY}\n", encoding="utf-8")
    with own_database(request) as database:
        env = server_env(
            data_dir=str(data_dir),
            auth="bearer",
            bearer_tokens_file=str(tokens),
            max_tasks_per_caller="2",
            rate_limit="3",
            **database,
        )
        with http_server(env, extra_tools=TASK_TOOLS) as (url, _):
            yield url


@pytest.mark.network
def test_a_task_is_its_callers_alone_bounded_per_caller_and_named_by_its_header(http_url: str) -> None:
    ana, ben = HttpCaller(http_url, ANA), HttpCaller(http_url, BEN)
    long_run = {"label": "http", "seconds": 120}
    first, second = ana.start("wait_then_answer", long_run), ana.start("wait_then_answer", long_run)

    over = ana.result("tools/call", {"name": "wait_then_answer", "arguments": long_run})
    bens = ben.start("only_as_a_task", {"label": "http"})
    not_bens = {
        method: ben.send(method, {"taskId": first})
        for method in ("tasks/get", "tasks/update", "tasks/cancel")
    }
    unknown = ben.send("tasks/get", {"taskId": UNKNOWN_ID})
    still_anas = ana.result("tasks/get", {"taskId": first})
    named = ana.send("tasks/get", {"taskId": first}, name=first)
    misnamed = ana.send("tasks/get", {"taskId": first}, name=second)
    undeclared = ana.send("tasks/get", {"taskId": first}, declare=False)
    for task_id in (first, second):
        ana.result("tasks/cancel", {"taskId": task_id})

    error = over["_meta"]["error"]
    assert (over["isError"], error["category"]) == (True, "rate_limited")
    assert error["retry_after_s"] > 0
    assert "unfinished tasks" in text_of(over)
    assert "taskId" not in over
    ben.wait_until(bens, "completed")  # the bound is per caller
    # Another caller's task and a task that does not exist get the same answer, word for word.
    expected = json.loads(json.dumps(unknown[1]["error"]).replace(UNKNOWN_ID, first))
    assert (unknown[0], expected["code"]) == (400, INVALID_PARAMS)
    for method, (status, answer) in not_bens.items():
        assert (status, answer.get("error")) == (400, expected), method
    assert still_anas["status"] == "working", "ben's cancel did not reach ana's task"
    assert named[0] == 200
    assert (misnamed[0], misnamed[1]["error"]["code"]) == (400, HEADER_MISMATCH)
    assert (undeclared[0], undeclared[1]["error"]["code"]) == (400, MISSING_CAPABILITY)


@pytest.mark.network
def test_creating_a_task_counts_in_the_callers_rate_limit(http_url: str) -> None:
    cy = HttpCaller(http_url, CY)
    for _ in range(3):  # each one finished before the next: the bound of two is never met
        cy.wait_until(cy.start("only_as_a_task", {"label": "rate"}), "completed")

    status, answer = cy.send("tools/call", {"name": "only_as_a_task", "arguments": {"label": "rate"}})

    assert status == 429, answer
    assert "(RATE_LIMIT)" in answer["error"]["message"]
