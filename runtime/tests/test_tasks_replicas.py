"""Two stateless HTTP replicas on one PostgreSQL: a task made on one is the other's to read,
answer and cancel, one key sent to both at once makes one task, and a task whose replica was
killed is taken over by the other. One pair of replicas serves every check (the kill last).

Each body writes the pid of the process that runs it (crash_task_tools), so a test sees where
it ran.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from crash_task_tools.crash_tasks import runs
from crash_task_tools.task_client import Send, as_task, create, get, until, wait_for
from http_support import STATELESS, json_rpc_answer, post
from resilient_mcp.commands.diagnose import MODERN
from sample_tools.effects import effects_count
from sample_tools.long_calls import marker
from support import HERE, http_server, postgres_project

CRASH_TASK_TOOLS = HERE / "crash_task_tools"
CANCELLED_WITHIN_S = 10.0  # DESIGN.md: a cancelled body that awaits stops within 10 s, wherever it runs
TAKEN_OVER_WITHIN_S = 30.0  # DESIGN.md: a live process takes a dead one's task over within 30 s

pytestmark = [postgres_project, pytest.mark.network]


def to(url: str) -> Send:
    """Raw 2026-07-28 requests to one replica, the tasks extension declared in each."""

    def send(method: str, params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": as_task(params)}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
        status, _, text = post(url, body, **headers)
        assert status == 200, text
        answer = json_rpc_answer(text)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    return send


@contextmanager
def two_replicas(env: dict[str, str]) -> Iterator[list[tuple[str, subprocess.Popen[bytes]]]]:
    """Two replicas with the crash task tools, started side by side: (URL, process) of each."""
    starting = [http_server(env, extra_tools=CRASH_TASK_TOOLS) for _ in "ab"]
    with ExitStack() as stack:
        with ThreadPoolExecutor(len(starting)) as pool:
            futures = [pool.submit(replica.__enter__) for replica in starting]
        for replica, future in zip(starting, futures, strict=True):
            if future.exception() is None:
                stack.push(replica.__exit__)
        yield [future.result() for future in futures]


def test_two_replicas_share_their_tasks_and_take_over_a_killed_ones(subprocess_env: dict[str, str]) -> None:
    with two_replicas({**subprocess_env, **STATELESS}) as [(url_a, replica_a), (url_b, replica_b)]:
        a, b = to(url_a), to(url_b)
        # Asked on A, read and answered through B: the body then runs on B.
        asked = create(a, "confirm_then_run", {"name": "confirmed"})
        parked = until(b, asked, {"input_required"})
        marker("confirmed.release").touch()
        confirm = {"action": "accept", "content": {"confirm": True}}
        acknowledged = b("tasks/update", {"taskId": asked, "inputResponses": {"confirm": confirm}})
        answered = until(b, asked)

        # Running on A, cancelled through B: B reads it cancelled at once, A's body stops.
        long = create(a, "read_until_released", {"name": "long"})
        wait_for(lambda: len(runs("long")) == 1, "the long task never began")
        assert b("tasks/cancel", {"taskId": long})["resultType"] == "complete"
        cancelled = get(b, long)
        stopped_after_s = wait_for(lambda: marker("long.cancelled").exists(), "A's body never stopped")
        cancelled_on_a = get(a, long)

        # One key sent to both at once: one task, one effect.
        marker("once.release").touch()
        arguments = {"account": "acme", "cents": 900, "name": "once", "idempotency_key": "order-7:charge"}
        with ThreadPoolExecutor(2) as pool:
            ids = list(pool.map(lambda send: create(send, "charge_until_released", arguments), [a, b]))
        once = until(a, ids[0])

        # A killed while its read-only task runs: B takes the task over and completes it.
        moved = create(a, "read_until_released", {"name": "moved"})
        wait_for(lambda: len(runs("moved")) == 1, "the task never began on A")
        replica_a.send_signal(signal.SIGKILL)
        replica_a.wait()
        killed_at = time.monotonic()
        marker("moved.release").touch()
        taken_over = until(b, moved)
        took_s = time.monotonic() - killed_at

    assert "confirm" in parked["inputRequests"]
    assert acknowledged["resultType"] == "complete"
    assert answered["status"] == "completed", answered
    assert runs("confirmed") == [replica_b.pid]
    assert cancelled["status"] == "cancelled"
    assert stopped_after_s < CANCELLED_WITHIN_S
    assert cancelled_on_a["status"] == "cancelled"
    assert runs("long") == [replica_a.pid], "the cancelled body ran elsewhere or again"
    assert ids[0] == ids[1]
    assert once["status"] == "completed", once
    assert effects_count() == 1
    assert taken_over["status"] == "completed", taken_over
    assert runs("moved") == [replica_a.pid, replica_b.pid]
    assert took_s < TAKEN_OVER_WITHIN_S
