"""Soak: side-effecting calls through kills, time limits and SIGTERMs, counted effect by effect.

    python benchmarks/soak.py [--case kills|time-limit|sigterm ...]
        [--calls 1000] [--concurrency 4] [--seed 1] [--kill-server sigkill|none] [--kill-every-ms 150]
        [--kill-db none|backend|postmaster] [--db-kill-every-ms 1000]   (PostgreSQL runs)
        [--bursts 3] [--queued 8]   (time-limit and sigterm)
        [--era both|2026-07-28|2025-11-25] [--backend sqlite|postgres|both] [--dsn DSN] [--json FILE]

Three cases, each in turn on each backend (`--case`, repeated, picks some): `kills`, below,
and two where calls wait for a worker thread. In those, `--bursts` times, a new server gets
a burst of calls at once to `soak_append_and_hold` (side_effect=True, sync: it appends its key
to the ledger as its body begins, then holds its thread 2.5 s), `--queued` more of them than
the server has tool threads, so those wait for a thread. `time-limit`: the server's time
limit (1.5 s) cuts them all; `sigterm`: once all are in flight (as health_check counts
them), a SIGTERM whose grace (1 s) runs out before the bodies end. Those that began are in
doubt; those still waiting never began: `transient`, their keys free, and retried until
final on the next server. A key in doubt whose body never ran (absent from the ledger) fails
these cases: exit 1.

In `kills`, the project's real server runs as `python -m <package> serve` would, over stdio, without
PYTHONUNBUFFERED, with two extra tools: `soak_append` (side_effect=True, sync) and
`soak_append_async` (the same, async: its claim records that its body started) append their
key to a ledger file and return; calls alternate between them. `--calls` calls, each with
its own idempotency key, go out with up to `--concurrency` of them in flight on the
connection, while a killer sends SIGKILL at random moments (exponential intervals of mean
`--kill-every-ms`, counted from each server's handshake, seeded by `--seed`) and a
supervisor starts a new server; `--kill-server none` leaves the server alone. Each server
speaks the next protocol era in turn (or only the one `--era` names).

`--kill-db` kills the PostgreSQL under the server at random moments too (exponential
intervals of mean `--db-kill-every-ms`, counted from the moment it accepts connections
again): `backend` SIGKILLs one backend serving the server's connections (a client backend
of the soak's database in pg_stat_activity, other than the soak's own connection), so that
the postmaster ends every backend and replays the WAL, as after the OOM killer; `postmaster`
restarts the whole PostgreSQL at once (`pg_ctl restart -m immediate`). Only a PostgreSQL the
soak started itself is killed, never one it was given (`--dsn`, `<PREFIX>DATABASE_URL`). No
kill lands while a server starts; a server that will not start because the database is
still coming back from one is started again once it is back (up to 5 times).

Every call is retried with its key and arguments until its answer is final: success (or a
replayed success), `in_doubt`, or an error that is not retryable. Retryable answers
(`conflict` still in progress, `transient`, ...) are retried after `retry_after_s` (at
least a short pause); a call lost with its server is retried on the next one.

Then the ledger says what happened. Duplicated effects (a key in the ledger more than once)
and lost acknowledged effects (a key answered with success that is not in the ledger) must
both be 0. Keys that ended `in_doubt` are counted, and those absent from the ledger are
false alarms: their call never reached the tool body. The false in-doubt rate is their
share of the interrupted calls (in flight when their server died or the database was
killed) and of the keys in doubt. `<slug> keys list --json` gives the store's own view of
the keys, shown beside: their states; the keys in doubt by cause (the note the store keeps
for each, without the hostname, pid or numbers it may name); and the acknowledged keys it
no longer holds as completed, whose retry would not be replayed (an absent one would run
again: a duplicate in waiting).

The server is the library's stand-in project (tests/sample_project), each run's on the backend
it soaks (SAMPLE_PROJECT_BACKEND). `--backend`: SQLite by default, both with
SAMPLE_PROJECT_BACKEND=postgres set; PostgreSQL on `--dsn`, else
`<PREFIX>DATABASE_URL`, else a throwaway PostgreSQL (pgserver, or an installed PostgreSQL's
initdb and pg_ctl; `--dsn ''` asks for one), in a fresh schema dropped afterwards.

Exit codes: 0 every effect accounted for; 1 duplicated or lost acknowledged effects, or (in
time-limit and sigterm) a key in doubt whose body never ran; 3 the soak could not finish (a
server that would not start, calls with no final answer after `--max-attempts`, no
PostgreSQL, a database kill that failed).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import heapq
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psycopg

from resilient_mcp.calls.tool_threads import MAX_TOOL_THREADS
from resilient_mcp.commands.diagnose import (
    ERAS,
    MODERN,
    Era,
    NoAnswer,
    RawStdioSession,
    ServerClosed,
    open_session,
    unbuffered_free_env,
    with_envelope,
)
from resilient_mcp.store.store import HEARTBEAT_S, STALE_AFTER_BEATS
from resilient_mcp.tasks.runner import ADOPT_EVERY_S, WATCH_S
from resilient_mcp.tasks.wire import EXTENSION, REQUEST_CAPABILITIES
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND, PACKAGE

sys.path.insert(0, str(Path(__file__).parent))
from bench_idempotency_store import LocalPostgres, postgres_schema

Backend = Literal["sqlite", "postgres"]
Case = Literal["kills", "time-limit", "sigterm"]
CASES: tuple[Case, ...] = ("kills", "time-limit", "sigterm")
TOOL = "soak_append"
ASYNC_TOOL = "soak_append_async"  # every other call: its claim records the start itself
TOOLS = (TOOL, ASYNC_TOOL)
TASK_TOOL = "soak_task_append"  # the same effect, run as a durable task (2026-07-28 servers)
HOLD_TOOL = "soak_append_and_hold"  # the queued cases': its body outlasts the time limit and the grace
LEDGER_VARIABLE = "SOAK_LEDGER"
HOLD_VARIABLE = "SOAK_HOLD_S"
# The queued cases: each body holds its thread past the call's time limit (time-limit) or
# past the shutdown's grace (sigterm), so the calls beyond the tool threads wait for one.
HOLD_S = 2.5
TIME_LIMIT_S = 1.5  # long enough for a loaded machine to take in the whole burst before it strikes
GRACE_S = 1.0
ANSWER_TIMEOUT_S = 60.0  # a loaded machine may be slow; past this the server is taken for hung
RETRY_PAUSE_S = 0.05  # before a retry that has no retry_after_s hint, and after a lost connection
POLL_S = 0.05  # longest wait for answers before the loop looks at its schedule again
START_RETRIES = 5  # server starts that fail while the database is down, retried once it is back
DATABASE_UP_TIMEOUT_S = 60.0  # a killed database not back by then fails the soak
# A task whose server died is taken over once a live server's heartbeat sweep has removed the
# dead one's row (at once on this machine: its pid is gone; else after STALE_AFTER_BEATS beats)
# and its watch loop looks for orphans: within this window of the kills' end, plus the slack a
# loaded machine needs.
TAKEOVER_WINDOW_S = HEARTBEAT_S * STALE_AFTER_BEATS + ADOPT_EVERY_S + WATCH_S
TAKEOVER_SLACK_S = 10.0
TASK_POLL_S = 0.1  # between a task's tasks/get polls
TASK_HOLD_S = 0.3  # a task's body, after its effect: long enough for kills to land in it
TERMINAL_TASK = ("completed", "failed", "cancelled")
UNKNOWN_TASK = -32602  # tasks/get of an id the server does not know: a task lost
EXIT_EFFECTS_WRONG = 1
EXIT_INCOMPLETE = 3

TOOLS_MODULE = f'''
"""The soak's side effect: one line per effect in the ledger file."""

import asyncio
import os
import time
from pathlib import Path

from {PACKAGE}.core import tool

LEDGER = Path(os.environ["{LEDGER_VARIABLE}"])


@tool(side_effect=True)
def {TOOL}(call: int, idempotency_key: str) -> str:
    """Append this call's key to the ledger."""
    with LEDGER.open("a") as ledger:
        ledger.write(idempotency_key + "\\n")
    return "appended call " + str(call)


@tool(side_effect=True)
async def {ASYNC_TOOL}(call: int, idempotency_key: str) -> str:
    """Append this call's key to the ledger, from an async tool."""
    with LEDGER.open("a") as ledger:
        ledger.write(idempotency_key + "\\n")
    return "appended call " + str(call)


@tool(side_effect=True, task_support="optional")
async def {TASK_TOOL}(call: int, idempotency_key: str) -> str:
    """Append this call's key to the ledger, as a durable task's body when the client asks, then
    stay a while: a kill then finds the task working, for another server to take over."""
    with LEDGER.open("a") as ledger:
        ledger.write(idempotency_key + "\\n")
    await asyncio.sleep({TASK_HOLD_S})
    return "appended call " + str(call)


@tool(side_effect=True)
def {HOLD_TOOL}(call: int, idempotency_key: str) -> str:
    """Append this call's key to the ledger as the body begins, then hold the thread a while."""
    with LEDGER.open("a") as ledger:
        ledger.write(idempotency_key + "\\n")
    time.sleep(float(os.environ["{HOLD_VARIABLE}"]))
    return "appended call " + str(call)
'''

# The project's command with the soak's tools module in tools/.
LAUNCHER = f"""
import sys

import {PACKAGE}.tools
from {PACKAGE}.cli import main

{PACKAGE}.tools.__path__.append(sys.argv[1])
raise SystemExit(main(sys.argv[2:]))
"""
# The stand-in project stores its keys where this says: each run's server gets its backend.
BACKEND_VARIABLE = "SAMPLE_PROJECT_BACKEND"


class SoakAborted(Exception):
    """The soak cannot go on (a server that will not start); the message says why."""


@dataclass
class Call:
    """One logical operation: its key and arguments never change across retries."""

    index: int
    key: str
    tool: str
    attempts: int = 0
    final: str | None = None  # "success", "in_doubt", or the category of a final error
    acknowledged: bool = False  # answered with success (first or replayed)
    interrupted: bool = False  # in flight when its server died at least once
    spans: list[tuple[float, float]] = field(default_factory=list)  # each attempt: sent, answered or lost
    task_id: str | None = None  # a task call: its task, once a server answered that it was created
    task_status: str | None = None  # as its last tasks/get said
    polls: int = 0  # tasks/get sent for it

    @property
    def arguments(self) -> dict[str, Any]:
        return {"call": self.index, "idempotency_key": self.key}

    @property
    def is_task(self) -> bool:
        return self.tool == TASK_TOOL


def declaring_tasks(params: dict[str, Any]) -> dict[str, Any]:
    """2026-07-28 params that declare the tasks extension for this request."""
    capabilities = params.setdefault("_meta", {}).setdefault(REQUEST_CAPABILITIES, {})
    capabilities.setdefault("extensions", {})[EXTENSION] = {}
    return params


@dataclass
class Figures:
    """What one soak run measured; `ok` when every effect is accounted for."""

    backend: str
    case: Case
    calls: int
    concurrency: int
    kill_server: str
    kill_every_ms: float
    kill_db: str
    db_kill_every_ms: float
    seed: int
    eras: list[str]
    kills: int = 0
    restarts: int = 0
    refused_starts: int = 0  # server starts that failed while the database was down, retried
    hung_servers: int = 0
    db_kills: int = 0
    db_down_mean_s: float = 0.0  # from a database kill until it accepts connections again
    db_down_max_s: float = 0.0
    duplicated_effects: int = 0
    lost_acknowledged_effects: int = 0
    interrupted_calls: int = 0  # by either kind of kill
    interrupted_by_server_deaths: int = 0
    interrupted_by_db_kills: int = 0
    in_doubt: int = 0
    in_doubt_never_ran: int = 0
    # False in-doubt rate: the keys in doubt that never ran, per interrupted call and per key in doubt.
    false_in_doubt_of_interrupted: float | None = None
    false_in_doubt_of_in_doubt: float | None = None
    in_doubt_by_cause: dict[str, dict[str, int]] = field(default_factory=dict)  # {"keys": n, "never_ran": n}
    final_errors: dict[str, int] = field(default_factory=dict)
    unfinished: int = 0
    effects: int = 0
    unrecognised_ledger_lines: int = 0
    answers: dict[str, int] = field(default_factory=dict)
    calls_per_era: dict[str, int] = field(default_factory=dict)
    attempts_mean: float = 0.0
    attempts_max: int = 0
    store_states: dict[str, int] = field(default_factory=dict)
    # Acknowledged keys the store does not hold as completed, by state ("absent": a retry runs it again).
    acknowledged_not_replayable: dict[str, int] = field(default_factory=dict)
    db_kill_error: str | None = None  # the database kills stopped early: the soak did not finish
    # The queued cases: bursts of calls, more than the server's tool threads, each body held
    # longer than the time limit or the grace; the calls cut before their body began.
    bursts: int = 0
    burst_calls: int = 0
    sigterms: int = 0
    cut_before_their_body: int = 0
    # The kills case's task calls: created as tasks, polled with tasks/get to their end, which
    # must come within the takeover window of the kills' end.
    task_calls: int = 0
    tasks_created: int = 0
    tasks_lost: int = 0  # a created task's id that tasks/get no longer knows
    tasks_stuck_working: int = 0  # still working past the takeover window after the last kill
    task_statuses: dict[str, int] = field(default_factory=dict)
    task_polls: int = 0
    tasks_ended_after_kills_s: float = 0.0  # from the kills' end to the last task's end
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every effect accounted for; in a queued case, no key in doubt whose body never ran
        (a start recorded only once a thread takes the body, and nothing between the two)."""
        effects_ok = self.duplicated_effects == 0 and self.lost_acknowledged_effects == 0
        tasks_ok = self.tasks_lost == 0 and self.tasks_stuck_working == 0
        return effects_ok and tasks_ok and (self.case == "kills" or self.in_doubt_never_ran == 0)


class DatabaseKiller:
    """Kills the run's database at random moments (what a kill is, a subclass says) and times
    how long it stays down; the next interval starts once it is back."""

    def __init__(self, mean_s: float, seed: int) -> None:
        self.mean_s = mean_s
        self.seed = seed
        self.times: list[float] = []  # time.monotonic() of each kill, in order
        self.down_s: list[float] = []  # from each kill until the database accepts connections again
        self.error: str | None = None  # why the kills stopped early (the soak then exits 3)
        self.up = threading.Event()  # clear from just before a kill until the database is back
        self.up.set()
        # Held while a server starts: a kill then would test its start-up check (exit 78), not
        # what happens to calls in flight, and could keep a slow machine from ever starting one.
        self.quiet = threading.Lock()

    def kill(self, rng: random.Random) -> float | None:
        """Kill the database now and return when (time.monotonic()); None if there was nothing to kill."""
        raise NotImplementedError

    def accepts_connections(self) -> bool:
        raise NotImplementedError

    def run(self, done: threading.Event) -> None:
        rng = random.Random(f"database:{self.seed}")  # not the server killer's sequence
        try:
            while not done.wait(rng.expovariate(1.0 / self.mean_s)):
                while True:
                    with self.quiet:
                        self.up.clear()  # from before the kill: a server start it fails waits for it
                        killed_at = self.kill(rng)
                    if killed_at is not None:
                        break
                    self.up.set()  # no server connected yet: soon again
                    if done.wait(RETRY_PAUSE_S):
                        return
                self.times.append(killed_at)
                while not self.accepts_connections():  # not cut short by the end of the run
                    if time.monotonic() - killed_at > DATABASE_UP_TIMEOUT_S:
                        self.error = f"the database was not back {DATABASE_UP_TIMEOUT_S:g} s after a kill"
                        return
                    time.sleep(RETRY_PAUSE_S / 5)
                self.down_s.append(time.monotonic() - killed_at)
                self.up.set()
        except Exception as exc:  # a kill that failed: stop killing, and fail the soak
            output = getattr(exc, "output", None)  # pg_ctl's, from a CalledProcessError
            self.error = f"a database kill failed: {exc}" + (f"\n{output.strip()}" if output else "")
        finally:
            self.up.set()


class Supervisor:
    """Starts the server, restarts it when it dies, and lets the killer kill only a ready one."""

    def __init__(
        self, argv: list[str], env: dict[str, str], eras: list[Era], database: DatabaseKiller | None = None
    ) -> None:
        self.argv = argv
        self.env = env
        self.eras = eras
        self.database = database  # when killed: a server that fails to start is tried again once it is back
        self.starts = 0
        self.kills = 0
        self.sigterms = 0
        self.refused_starts = 0
        self.session: RawStdioSession | None = None
        self.era: Era = eras[0]
        self.ready = threading.Condition()

    def start(self) -> RawStdioSession:
        """A new server, past its handshake; a server that fails to get there aborts the soak,
        unless the database is being killed (then up to START_RETRIES more, once it is back)."""
        if self.database is not None:
            for _ in range(START_RETRIES):
                try:
                    with self.database.quiet:
                        return self._start_one()
                except SoakAborted:
                    self.refused_starts += 1
                    self.database.up.wait(DATABASE_UP_TIMEOUT_S)
                    time.sleep(RETRY_PAUSE_S)
        return self._start_one()

    def _start_one(self) -> RawStdioSession:
        era = self.eras[self.starts % len(self.eras)]
        session = RawStdioSession(self.argv, env=self.env)
        try:
            answer = open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        except (NoAnswer, ServerClosed) as exc:
            code = session.close(timeout=5)
            raise SoakAborted(
                f"the server did not complete the {era} handshake ({exc}; exit {code}):\n"
                + "\n".join(session.stderr_tail())
            ) from None
        if "result" not in answer:
            session.close(timeout=5)
            raise SoakAborted(f"the server refused the {era} handshake: {answer.get('error')}")
        with self.ready:
            self.session, self.era = session, era
            self.starts += 1
            self.ready.notify_all()
        return session

    def kill(self, session: RawStdioSession) -> bool:
        """SIGKILL this server if it is still the current one and alive."""
        with self.ready:
            if session is not self.session or session.process.poll() is not None:
                return False
            session.process.send_signal(signal.SIGKILL)
            self.kills += 1
            return True

    def terminate_once_in_flight(self, calls: int) -> Callable[[RawStdioSession], None]:
        """SIGTERM a server once `calls` tool calls are in flight on it, as its health_check
        counts them (running, or waiting for a thread)."""

        def terminate(session: RawStdioSession) -> None:
            health_check = with_envelope(self.era, {"name": "health_check", "arguments": {}})
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            in_flight = 0
            while in_flight < calls:
                if time.monotonic() > deadline:
                    raise SoakAborted(f"{calls} calls were never in flight together (at most {in_flight})")
                time.sleep(POLL_S)
                try:
                    answer = session.request("tools/call", health_check, timeout=ANSWER_TIMEOUT_S)
                except (NoAnswer, ServerClosed) as exc:
                    raise SoakAborted(f"the server's health_check did not answer ({exc})") from None
                report = (answer.get("result") or {}).get("structuredContent") or {}
                in_flight = max(in_flight, int(report.get("in_flight", 0)))
            session.process.send_signal(signal.SIGTERM)
            self.sigterms += 1

        return terminate

    def stop(self) -> None:
        with self.ready:
            session, self.session = self.session, None
            self.ready.notify_all()
        if session is not None:
            session.close(timeout=10)


def killer(supervisor: Supervisor, mean_s: float, seed: int, done: threading.Event) -> None:
    """Kill each server after a random time from its handshake (exponential, so any moment)."""
    rng = random.Random(seed)
    killed: RawStdioSession | None = None

    def new_server() -> bool:
        return done.is_set() or supervisor.session not in (None, killed)

    while not done.is_set():
        with supervisor.ready:
            supervisor.ready.wait_for(new_server, timeout=1.0)
            target = supervisor.session
        if target is None or target is killed:
            continue
        if done.wait(rng.expovariate(1.0 / mean_s)):
            return
        supervisor.kill(target)
        killed = target


class Driver:
    """Keeps up to `concurrency` calls in flight, reads their answers and schedules retries."""

    def __init__(
        self,
        supervisor: Supervisor,
        calls: list[Call],
        concurrency: int,
        max_attempts: int,
        on_quiet: Callable[[], None] | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.calls = {call.index: call for call in calls}
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.answers: collections.Counter[str] = collections.Counter()
        self.calls_per_era: collections.Counter[str] = collections.Counter()
        self.hung = 0
        self.cut_before_their_body = 0  # answered transient: cut while they waited for a thread
        self._due: list[tuple[float, int]] = [(0.0, call.index) for call in calls]  # (when, call index)
        heapq.heapify(self._due)
        self._in_flight: dict[str, tuple[Call, float]] = {}  # request id -> (call, sent at)
        self._polls: set[str] = set()  # the request ids in flight that are tasks/get
        self._requests = 0
        # Once only task polls are left, the kills stop (`on_quiet`) and every task must end
        # within the takeover window from then.
        self.on_quiet = on_quiet
        self.quiet_at: float | None = None
        self.last_task_end = 0.0
        self._quiet_checked = 0.0

    def run(self) -> None:
        """Every call to its final answer, on as many servers as that takes."""
        if not (self._due or self._in_flight):
            return
        session = self.supervisor.start()
        seen = 0
        while self._due or self._in_flight:
            if session.process.poll() is not None:
                session, seen = self._restart(session, seen)
                continue
            if self._quiet_now() and self.supervisor.era != MODERN:
                session, seen = self._restart(session, seen)  # tasks/get needs a 2026-07-28 server
                continue
            if self.quiet_at is not None and time.monotonic() > self.quiet_at + self.takeover_deadline_s:
                self._give_up_on_tasks()
                break
            self._send_due(session)
            if not self._in_flight:
                if self._due:
                    time.sleep(min(POLL_S, max(0.0, self._due[0][0] - time.monotonic())))
                continue
            oldest = min(self._in_flight, key=lambda rid: self._in_flight[rid][1])
            closed = False
            try:
                session.wait_for(oldest, timeout=POLL_S)
            except NoAnswer:
                pass
            except ServerClosed:
                closed = True
            seen = self._harvest(session, seen)
            if closed:
                session, seen = self._restart(session, seen)
            elif any(time.monotonic() - sent > ANSWER_TIMEOUT_S for _, sent in self._in_flight.values()):
                self.hung += 1
                session.process.kill()  # a call left unanswered this long: count it, start afresh

    def burst(self, session: RawStdioSession, then: Callable[[RawStdioSession], None] | None = None) -> None:
        """Send the calls due (up to `concurrency`) at once, do `then`, and read their answers;
        the server is then stopped, and the calls to retry are due at once (on the next server:
        any retry_after_s was about this one)."""
        self._send_due(session)
        if then is not None:
            then(session)
        seen = 0
        while self._in_flight:
            oldest = min(self._in_flight, key=lambda rid: self._in_flight[rid][1])
            try:
                session.wait_for(oldest, timeout=ANSWER_TIMEOUT_S)
            except NoAnswer:
                self.hung += 1
                break
            except ServerClosed:
                break
            seen = self._harvest(session, seen)
        self.supervisor.stop()
        self._lose_in_flight(session, seen)
        self._due = [(0.0, index) for _, index in self._due]
        heapq.heapify(self._due)

    takeover_deadline_s = TAKEOVER_WINDOW_S + TAKEOVER_SLACK_S

    def _quiet_now(self) -> bool:
        """Whether only task polls are left (checked at most every POLL_S); the first time,
        the kills are stopped."""
        if self.quiet_at is not None:
            return True
        now = time.monotonic()
        if self.on_quiet is None or now - self._quiet_checked < POLL_S:
            return False
        self._quiet_checked = now
        if any(c.final is None and not (c.is_task and c.task_id) for c in self.calls.values()):
            return False
        self.on_quiet()
        self.quiet_at = time.monotonic()
        return True

    def _give_up_on_tasks(self) -> None:
        """Past the takeover window: the tasks not yet ended are stuck."""
        for call in self.calls.values():
            if call.final is None and call.task_id is not None:
                self._finish(call, "task_stuck")
        self._due.clear()
        self._in_flight.clear()
        self._polls.clear()

    def _send_due(self, session: RawStdioSession) -> None:
        now = time.monotonic()
        held = []  # task calls, while the server speaks 2025-11-25 (no tasks there)
        while self._due and self._due[0][0] <= now and len(self._in_flight) < self.concurrency:
            when, index = heapq.heappop(self._due)
            call = self.calls[index]
            if call.is_task and self.supervisor.era != MODERN:
                held.append((max(when, now + POLL_S), index))  # not before the next look
                continue
            self._requests += 1
            request_id = f"soak-{self._requests}"
            if call.task_id is None:
                call.attempts += 1
                method = "tools/call"
                params = with_envelope(self.supervisor.era, {"name": call.tool, "arguments": call.arguments})
            else:
                call.polls += 1
                method = "tasks/get"
                params = with_envelope(MODERN, {"taskId": call.task_id})
                self._polls.add(request_id)
            if call.is_task:
                declaring_tasks(params)
            self._in_flight[request_id] = (call, time.monotonic())
            session.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        for item in held:
            heapq.heappush(self._due, item)

    def _harvest(self, session: RawStdioSession, seen: int) -> int:
        """Handle the answers among the messages read so far; returns how many were looked at."""
        for message in session.messages[seen:]:
            request_id = message.get("id")
            if "method" in message or not isinstance(request_id, str) or request_id not in self._in_flight:
                continue
            call, sent = self._in_flight.pop(request_id)
            if request_id in self._polls:
                self._polls.discard(request_id)
                self._settle_poll(call, message)
                continue
            call.spans.append((sent, time.monotonic()))
            self._settle(call, message)
        return len(session.messages)

    def _settle_poll(self, call: Call, message: dict[str, Any]) -> None:
        """A task's tasks/get: its end, or another poll; an id no longer known is a task lost."""
        error = message.get("error")
        if isinstance(error, dict):
            if error.get("code") == UNKNOWN_TASK:
                self.answers["task_lost"] += 1
                self._finish(call, "task_lost")
            else:  # e.g. the store did not answer: ask again
                self.answers["tasks/get_error"] += 1
                self._poll(call)
            return
        result = message.get("result") or {}
        call.task_status = status = str(result.get("status"))
        if status not in TERMINAL_TASK:
            self._poll(call)
            return
        self.last_task_end = time.monotonic()
        self.answers[f"task_{status}"] += 1
        if status == "completed":
            inner = result.get("result") or {}
            if not inner.get("isError"):
                call.acknowledged = True
                self._finish(call, "success")
                return
            error = (inner.get("_meta") or {}).get("error") or {}
            self._finish(call, str(error.get("category", "no_category")))
        elif status == "failed":
            data = (result.get("error") or {}).get("data") or {}
            self._finish(call, str(data.get("category", "failed")))
        else:
            self._finish(call, status)

    def _poll(self, call: Call) -> None:
        heapq.heappush(self._due, (time.monotonic() + TASK_POLL_S, call.index))

    def _settle(self, call: Call, message: dict[str, Any]) -> None:
        result = message.get("result")
        if call.is_task and isinstance(result, dict) and result.get("resultType") == "task":
            call.task_id = str(result["taskId"])  # written durably before this answer
            self.answers["task_created"] += 1
            self._poll(call)
            return
        if not isinstance(result, dict):
            self.answers["jsonrpc_error"] += 1  # a tool call should never get one: retry, and show it
            self._retry(call, RETRY_PAUSE_S)
            return
        meta = result.get("_meta") or {}
        if not result.get("isError"):
            replayed = bool((meta.get("idempotency") or {}).get("replayed"))
            self.answers["replayed" if replayed else "success"] += 1
            call.acknowledged = True
            self._finish(call, "success")
            return
        error = meta.get("error") or {}
        category = str(error.get("category", "no_category"))
        self.answers[category] += 1
        content = result.get("content") or [{}]
        if category == "transient" and "before its body began" in str(content[0].get("text")):
            self.cut_before_their_body += 1
        if category == "in_doubt" or not error.get("retryable"):
            self._finish(call, category)
        else:
            self._retry(call, max(RETRY_PAUSE_S, float(error.get("retry_after_s") or 0.0)))

    def _finish(self, call: Call, final: str) -> None:
        call.final = final
        self.calls_per_era[self.supervisor.era] += 1

    def _retry(self, call: Call, pause_s: float) -> None:
        if call.attempts >= self.max_attempts:
            return  # left unfinished: reported, and the soak exits non-zero
        heapq.heappush(self._due, (time.monotonic() + pause_s, call.index))

    def _restart(self, session: RawStdioSession, seen: int) -> tuple[RawStdioSession, int]:
        """The server died: read what it still said, retry its unanswered calls on a new one."""
        self._lose_in_flight(session, seen)
        if not self._due:
            return session, len(session.messages)  # nothing left to send: no new server needed
        return self.supervisor.start(), 0

    def _lose_in_flight(self, session: RawStdioSession, seen: int) -> None:
        """Read what a dead (or stopped) server still said; its unanswered calls are retried."""
        session.close(timeout=10)
        self._harvest(session, seen)
        now = time.monotonic()
        for request_id, (call, sent) in self._in_flight.items():
            if request_id in self._polls:  # a tasks/get: asked again on the next server
                self._poll(call)
                continue
            self.answers["lost_connection"] += 1
            call.interrupted = True
            call.spans.append((sent, now))
            self._retry(call, RETRY_PAUSE_S)
        self._in_flight.clear()
        self._polls.clear()


def read_ledger(path: Path, keys: set[str]) -> tuple[collections.Counter[str], int]:
    """How many times each key's effect happened, and how many lines are no key at all."""
    counts: collections.Counter[str] = collections.Counter()
    unrecognised = 0
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    for line in text.splitlines():
        if line in keys:
            counts[line] += 1
        elif line:
            unrecognised += 1
    return counts, unrecognised


def store_records(
    launcher: list[str], env: dict[str, str], limit: int, prefix: str
) -> list[dict[str, Any]] | str:
    """The store's own view of this run's keys (`prefix`) through `<slug> keys list --json`
    (newest first: a run's keys come before an earlier run's in the same database); else why not."""
    listing = subprocess.run(
        [*launcher, "keys", "list", "--json", "--limit", str(limit)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if listing.returncode != 0:
        return f"keys list failed (exit {listing.returncode})"
    return [r for r in json.loads(listing.stdout) if str(r.get("key")).startswith(prefix)]


HOST_AND_PID = re.compile(r"\s*\([^()]*\bpid\s+\d+[^()]*\)")  # "(host pid 123)", as owner_gone_reason says
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def cause(record: dict[str, Any] | None) -> str:
    """Why the store holds a key in doubt: its note, without the host and pid or numbers it names."""
    if record is None:
        return "(not in keys list)"
    if record.get("state") != "in_doubt":
        return f"(now {record.get('state')} in the store)"
    note = NUMBER.sub("N", HOST_AND_PID.sub("", str(record.get("note") or "")))
    return " ".join(note.split()) or "(no note)"


def struck(spans: Sequence[tuple[float, float]], kills: Sequence[float]) -> bool:
    """Whether a kill (its times sorted) fell within one of these attempts."""
    for sent, ended in spans:
        first = bisect.bisect_left(kills, sent)
        if first < len(kills) and kills[first] <= ended:
            return True
    return False


def soak(args: argparse.Namespace, backend: Backend, case: Case, database: Database) -> Figures:
    eras: list[Era] = list(ERAS) if args.era == "both" else [args.era]
    queued = case != "kills"
    db_killer = None if queued else database.killer
    burst = MAX_TOOL_THREADS + args.queued
    figures = Figures(
        backend,
        case,
        args.bursts * burst if queued else args.calls,
        burst if queued else args.concurrency,
        "none" if queued else args.kill_server,
        args.kill_every_ms,
        args.kill_db if db_killer is not None else "none",
        args.db_kill_every_ms,
        args.seed,
        list(eras),
    )
    run_id = uuid.uuid4().hex[:8]
    tools = (HOLD_TOOL,) if queued else TOOLS
    every = 0 if queued or MODERN not in eras else args.task_every  # tasks need 2026-07-28 servers

    def tool_of(n: int) -> str:
        return TASK_TOOL if every and n % every == every - 1 else tools[n % len(tools)]

    calls = [Call(n, f"soak-{run_id}:{n}", tool_of(n)) for n in range(figures.calls)]
    with tempfile.TemporaryDirectory(prefix="soak-") as directory:
        folder = Path(directory)
        (folder / "tools").mkdir()
        (folder / "tools" / "soak_effects.py").write_text(TOOLS_MODULE, encoding="utf-8")
        (folder / "launch.py").write_text(LAUNCHER, encoding="utf-8")
        ledger = folder / "ledger.txt"
        launcher = [sys.executable, str(folder / "launch.py"), str(folder / "tools")]
        settings = {
            f"{ENV_PREFIX}DATA_DIR": str(folder / "data"),
            LEDGER_VARIABLE: str(ledger),
            BACKEND_VARIABLE: backend,
        }
        if database.dsn is not None:
            settings[f"{ENV_PREFIX}DATABASE_URL"] = database.dsn
        if queued:
            settings.update(queued_settings(case, burst))
        env = unbuffered_free_env(settings)

        supervisor = Supervisor([*launcher, "serve"], env, eras, db_killer)
        started = time.monotonic()
        if queued:
            drivers = run_bursts(case, supervisor, calls, burst, args.max_attempts)
        else:
            drivers = [run_with_kills(args, supervisor, calls, db_killer)]
        figures.wall_s = round(time.monotonic() - started, 2)

        counts, figures.unrecognised_ledger_lines = read_ledger(ledger, {call.key for call in calls})
        records = store_records(launcher, env, len(calls) + 100, f"soak-{run_id}:")
    figures.kills = supervisor.kills
    figures.sigterms = supervisor.sigterms
    figures.restarts = supervisor.starts - 1
    figures.refused_starts = supervisor.refused_starts
    if queued:
        figures.bursts, figures.burst_calls = args.bursts, burst
    if db_killer is not None:
        figures.db_kills = len(db_killer.times)
        figures.db_kill_error = db_killer.error
        if db_killer.down_s:
            figures.db_down_mean_s = round(sum(db_killer.down_s) / len(db_killer.down_s), 3)
            figures.db_down_max_s = round(max(db_killer.down_s), 3)
    count_effects(figures, calls, counts, records, db_killer.times if db_killer is not None else [])
    answers: collections.Counter[str] = collections.Counter()
    per_era: collections.Counter[str] = collections.Counter()
    for driver in drivers:
        answers.update(driver.answers)
        per_era.update(driver.calls_per_era)
        figures.hung_servers += driver.hung
        figures.cut_before_their_body += driver.cut_before_their_body
    figures.answers = dict(sorted(answers.items()))
    figures.calls_per_era = dict(per_era)
    count_tasks(figures, calls, drivers)
    return figures


def count_tasks(figures: Figures, calls: list[Call], drivers: list[Driver]) -> None:
    """The task calls' figures: created, lost, stuck in working, and how they ended."""
    tasks = [c for c in calls if c.is_task]
    figures.task_calls = len(tasks)
    figures.tasks_created = sum(1 for c in tasks if c.task_id is not None)
    figures.tasks_lost = sum(1 for c in tasks if c.final == "task_lost")
    figures.tasks_stuck_working = sum(1 for c in tasks if c.final == "task_stuck")
    figures.task_statuses = dict(collections.Counter(str(c.task_status) for c in tasks if c.task_id))
    figures.task_polls = sum(c.polls for c in tasks)
    ends = [d.last_task_end - d.quiet_at for d in drivers if d.quiet_at is not None and d.last_task_end]
    figures.tasks_ended_after_kills_s = round(max(ends, default=0.0), 2)


def run_with_kills(
    args: argparse.Namespace, supervisor: Supervisor, calls: list[Call], db_killer: DatabaseKiller | None
) -> Driver:
    """The kills case: every call to its final answer while the killers kill at random."""
    done = threading.Event()
    driver = Driver(supervisor, calls, args.concurrency, args.max_attempts, on_quiet=done.set)
    loops = []
    if args.kill_server == "sigkill":
        mean_s = args.kill_every_ms / 1000
        loops.append(threading.Thread(target=killer, args=(supervisor, mean_s, args.seed, done), daemon=True))
    if db_killer is not None:
        loops.append(threading.Thread(target=db_killer.run, args=(done,), daemon=True))
    for loop in loops:
        loop.start()
    try:
        driver.run()
    finally:
        done.set()
        for loop in loops:
            loop.join(timeout=DATABASE_UP_TIMEOUT_S)
        supervisor.stop()
    return driver


def queued_settings(case: Case, burst: int) -> dict[str, str]:
    """The server's settings in a queued case: bodies held past its time limit or its grace."""
    settings = {
        HOLD_VARIABLE: str(HOLD_S),
        f"{ENV_PREFIX}MAX_CONCURRENT_CALLS": str(burst + 1),  # the whole burst, and a health_check
    }
    if case == "time-limit":
        settings[f"{ENV_PREFIX}TOOL_TIMEOUT_S"] = str(TIME_LIMIT_S)
    else:
        settings[f"{ENV_PREFIX}SHUTDOWN_GRACE_S"] = str(GRACE_S)
    return settings


def run_bursts(
    case: Case, supervisor: Supervisor, calls: list[Call], burst: int, max_attempts: int
) -> list[Driver]:
    """The queued cases: each burst of calls, more than the tool threads, goes at once to a new
    server, whose time limit (time-limit) or SIGTERM past the grace (sigterm) cuts them, some
    running, the others still waiting for a thread; those answered `transient` are then retried
    until final on the next server."""
    drivers = []
    for first in range(0, len(calls), burst):
        driver = Driver(supervisor, calls[first : first + burst], burst, max_attempts)
        then = supervisor.terminate_once_in_flight(burst) if case == "sigterm" else None
        try:
            driver.burst(supervisor.start(), then)
            driver.run()
        finally:
            supervisor.stop()
        drivers.append(driver)
    return drivers


def count_effects(
    figures: Figures,
    calls: list[Call],
    counts: collections.Counter[str],
    records: list[dict[str, Any]] | str,
    db_kills: list[float],
) -> None:
    """The figures from the ledger's counts, the calls' answers and the store's records."""
    figures.effects = sum(counts.values())
    figures.duplicated_effects = sum(1 for n in counts.values() if n > 1)
    figures.lost_acknowledged_effects = sum(1 for c in calls if c.acknowledged and counts[c.key] == 0)
    by_db_kill = {c.key for c in calls if struck(c.spans, db_kills)}
    figures.interrupted_by_server_deaths = sum(1 for c in calls if c.interrupted)
    figures.interrupted_by_db_kills = len(by_db_kill)
    figures.interrupted_calls = sum(1 for c in calls if c.interrupted or c.key in by_db_kill)
    in_doubt = [c for c in calls if c.final == "in_doubt"]
    never_ran = [c for c in in_doubt if counts[c.key] == 0]
    figures.in_doubt = len(in_doubt)
    figures.in_doubt_never_ran = len(never_ran)
    if figures.interrupted_calls:
        figures.false_in_doubt_of_interrupted = round(len(never_ran) / figures.interrupted_calls, 4)
    if in_doubt:
        figures.false_in_doubt_of_in_doubt = round(len(never_ran) / len(in_doubt), 4)
    by_key = {} if isinstance(records, str) else {str(r["key"]): r for r in records}
    if isinstance(records, str):
        figures.store_states = {records: 1}
    else:
        figures.store_states = dict(collections.Counter(str(r["state"]) for r in records))
        stored = (
            str(by_key[c.key]["state"]) if c.key in by_key else "absent" for c in calls if c.acknowledged
        )
        figures.acknowledged_not_replayable = dict(collections.Counter(x for x in stored if x != "completed"))
    causes: dict[str, dict[str, int]] = collections.defaultdict(lambda: {"keys": 0, "never_ran": 0})
    for c in in_doubt:
        tally = causes[cause(by_key.get(c.key)) if not isinstance(records, str) else "(keys list failed)"]
        tally["keys"] += 1
        tally["never_ran"] += int(counts[c.key] == 0)
    figures.in_doubt_by_cause = dict(sorted(causes.items(), key=lambda item: -item[1]["keys"]))
    figures.final_errors = dict(
        collections.Counter(c.final for c in calls if c.final not in (None, "success", "in_doubt"))
    )
    figures.unfinished = sum(1 for c in calls if c.final is None)
    figures.attempts_mean = round(sum(c.attempts for c in calls) / len(calls), 2)
    figures.attempts_max = max(c.attempts for c in calls)


def describe(f: Figures) -> str:
    def share(n: int) -> str:
        return f"{n} ({100 * n / f.calls:.1f}%)"

    def listed(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {n}" for name, n in counts.items()) or "none"

    def percent(fraction: float | None) -> str:
        return "-" if fraction is None else f"{100 * fraction:.1f}%"

    of_interrupted = 100 * f.in_doubt / f.interrupted_calls if f.interrupted_calls else 0.0
    if f.kill_server == "none":
        server_kills = f"none (--kill-server none), {f.restarts} restarts"
    else:
        server_kills = f"{f.kills} / {f.restarts} (kill every ~{f.kill_every_ms:g} ms, seed {f.seed})"
    causes = [
        f"{name}: {tally['keys']} ({tally['never_ran']} never ran)"
        for name, tally in f.in_doubt_by_cause.items()
    ]
    interrupted = share(f.interrupted_calls)
    if f.kill_db != "none":
        interrupted += (
            f": {f.interrupted_by_server_deaths} when their server died,"
            f" {f.interrupted_by_db_kills} by a database kill"
        )
    not_replayable = listed(f.acknowledged_not_replayable)
    if f.acknowledged_not_replayable:
        not_replayable += " (not stored as completed: a retry of these is not replayed)"
    eras = f"eras {' then '.join(f.eras)} in turn"
    if f.case == "kills":
        rows = [
            ("calls", f"{f.calls}, {f.concurrency} in flight, {eras}"),
            ("server kills / restarts", server_kills),
        ]
    else:
        if f.case == "time-limit":
            cut = f"at their time limit of {TIME_LIMIT_S:g} s"
        else:
            cut = f"by {f.sigterms} SIGTERMs past a {GRACE_S:g} s grace"
        cut += f", each body holding its thread {HOLD_S:g} s"
        rows = [
            ("calls", f"{f.calls}: {f.bursts} bursts of {f.burst_calls} at once, {eras}"),
            ("cut", f"{cut}, {MAX_TOOL_THREADS} tool threads; {f.restarts} restarts"),
            ("cut before their body", f"{f.cut_before_their_body} (transient: they waited for a thread)"),
        ]
    if f.kill_db != "none":
        what = "one backend SIGKILLed" if f.kill_db == "backend" else "immediate postmaster restart"
        down = (
            f"; down {f.db_down_mean_s:g} s on average, {f.db_down_max_s:g} s at most" if f.db_kills else ""
        )
        rows.append(("database kills", f"{f.db_kills} ({what}, every ~{f.db_kill_every_ms:g} ms){down}"))
    if f.refused_starts:
        rows.append(("server starts refused", f"{f.refused_starts} (the database was down; started again)"))
    rows += [
        ("duplicated effects", f"{f.duplicated_effects} (must be 0)"),
        ("lost acknowledged effects", f"{f.lost_acknowledged_effects} (must be 0)"),
    ]
    if f.case == "kills":
        rows += [
            ("calls a kill interrupted", interrupted),
            ("keys in doubt", f"{share(f.in_doubt)}, {of_interrupted:.0f}% of the interrupted calls"),
            ("in doubt but never ran", f"{f.in_doubt_never_ran} (false alarms: absent from the ledger)"),
            (
                "false in-doubt rate",
                f"{percent(f.false_in_doubt_of_interrupted)} of the interrupted calls,"
                f" {percent(f.false_in_doubt_of_in_doubt)} of the keys in doubt",
            ),
        ]
    else:
        rows += [
            ("keys in doubt", share(f.in_doubt)),
            ("in doubt but never ran", f"{f.in_doubt_never_ran} (must be 0: absent from the ledger)"),
            ("false in-doubt rate", f"{percent(f.false_in_doubt_of_in_doubt)} of the keys in doubt"),
        ]
    if f.task_calls:
        rows += [
            (
                "task calls",
                f"{f.task_calls}, {f.tasks_created} created, {f.task_polls} tasks/get;"
                f" ended {listed(f.task_statuses)}",
            ),
            ("tasks lost", f"{f.tasks_lost} (must be 0: created, then unknown to tasks/get)"),
            (
                "tasks stuck in working",
                f"{f.tasks_stuck_working} (must be 0: still working {TAKEOVER_WINDOW_S:g} s"
                f" + {TAKEOVER_SLACK_S:g} s after the kills ended); the last ended"
                f" {f.tasks_ended_after_kills_s:g} s after them",
            ),
        ]
    rows += [
        ("in doubt by cause", "\n".join(causes) or "none"),
        ("other final errors", listed(f.final_errors)),
        ("effects in the ledger", f"{f.effects}, unrecognised lines: {f.unrecognised_ledger_lines}"),
        ("answers seen", listed(f.answers)),
        ("final answers per era", listed(f.calls_per_era)),
        ("attempts per call", f"mean {f.attempts_mean:g}, max {f.attempts_max}"),
        ("store (keys list)", listed(f.store_states)),
        ("acknowledged, not replayable", not_replayable),
        ("wall time", f"{f.wall_s:g} s"),
    ]
    if f.hung_servers:
        rows.append(("hung servers killed", f"{f.hung_servers} (a call unanswered {ANSWER_TIMEOUT_S:g} s)"))
    if f.unfinished:
        rows.append(("NO FINAL ANSWER", f"{f.unfinished} calls after their last attempt"))
    if f.db_kill_error:
        rows.append(("DATABASE KILLS STOPPED", f.db_kill_error))
    width = max(len(name) for name, _ in rows)
    lines = [
        f"  {name if n == 0 else '':<{width}}  {line}\n"
        for name, value in rows
        for n, line in enumerate(value.splitlines())
    ]
    return f"soak on {f.backend}, case {f.case}:\n" + "".join(lines)


@dataclass
class Database:
    """Where a run keeps its keys: a PostgreSQL DSN (None: SQLite), and what kills it, if anything does."""

    dsn: str | None = None
    killer: DatabaseKiller | None = None


# The server's own connections: the soak's database, less the soak's monitoring connection.
SERVER_BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
)
REAPED_TIMEOUT_S = 10.0


class PostgresKiller(DatabaseKiller):
    """Kills the PostgreSQL the soak started: one backend of the server's (SIGKILL, so the
    postmaster ends all of them and replays the WAL, as after the OOM killer), or the
    postmaster itself (an immediate restart)."""

    def __init__(self, server: LocalPostgres, dsn: str, how: str, mean_s: float, seed: int) -> None:
        super().__init__(mean_s, seed)
        self.server = server
        self.dsn = dsn
        self.how = how

    def kill(self, rng: random.Random) -> float | None:
        if self.how == "postmaster":
            killed_at = time.monotonic()
            self.server.pg_ctl("-m", "immediate", "-w", "restart")
            return killed_at
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                pids = sorted(int(row[0]) for row in conn.execute(SERVER_BACKENDS))
        except psycopg.OperationalError:
            return None  # still recovering from the last kill, or the server was restarted
        if not pids:
            return None
        pid = rng.choice(pids)
        killed_at = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None  # its connection closed meanwhile
        while time.monotonic() - killed_at < REAPED_TIMEOUT_S:  # reaped: the crash-restart has begun
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.002)
        return killed_at

    def accepts_connections(self) -> bool:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True


@contextlib.contextmanager
def database(backend: Backend, args: argparse.Namespace) -> Iterator[Database]:
    """Where a run keeps its keys (a fresh PostgreSQL schema, or SQLite's file), and its killer."""
    if backend == "sqlite":
        yield Database()
        return
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")  # pgserver's platformdirs, when unset
    with contextlib.ExitStack() as stack:
        try:
            target = stack.enter_context(postgres_schema(args.dsn))
        except psycopg.OperationalError as exc:
            raise SoakAborted(
                f"cannot use PostgreSQL at --dsn ({exc}): fix the DSN, or pass --dsn '' to start one here"
            ) from None
        if target is None:
            raise SoakAborted(
                f"no PostgreSQL: pass --dsn, set {ENV_PREFIX}DATABASE_URL,"
                " or install pgserver or PostgreSQL (initdb and pg_ctl)"
            )
        if args.kill_db == "none":
            yield Database(target.dsn)
        elif target.server is None:
            raise SoakAborted("--kill-db kills only a PostgreSQL the soak started itself")
        else:
            mean_s = args.db_kill_every_ms / 1000
            yield Database(
                target.dsn, PostgresKiller(target.server, target.dsn, args.kill_db, mean_s, args.seed)
            )


def positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="exit codes: 0 every effect accounted for; 1 duplicated or lost effects, or (time-limit,"
        " sigterm) a key in doubt whose body never ran; 3 could not finish",
    )
    parser.add_argument(
        "--case",
        choices=CASES,
        action="append",
        help="kills: calls through random kills; time-limit, sigterm: bursts of calls, more than the"
        " tool threads, cut at their time limit or by a SIGTERM past the grace (repeat it; default: all)",
    )
    parser.add_argument("--calls", type=positive(int), default=1000, help="kills: calls (default: 1000)")
    parser.add_argument("--concurrency", type=positive(int), default=4, help="calls in flight (default: 4)")
    parser.add_argument(
        "--kill-server",
        choices=["sigkill", "none"],
        default="sigkill",
        help="SIGKILL the server at random moments, or leave it alone (default: sigkill)",
    )
    parser.add_argument(
        "--kill-every-ms",
        type=positive(float),
        default=150.0,
        help="mean time from a server's handshake to its SIGKILL (default: 150)",
    )
    parser.add_argument(
        "--kill-db",
        choices=["none", "backend", "postmaster"],
        default="none",
        help="PostgreSQL runs: SIGKILL one backend of the server's (the postmaster then restarts them all),"
        " or restart the postmaster (pg_ctl restart -m immediate); only one started here (default: none)",
    )
    parser.add_argument(
        "--db-kill-every-ms",
        type=positive(float),
        default=1000.0,
        help="mean time from the database accepting connections again to its next kill (default: 1000)",
    )
    parser.add_argument(
        "--bursts", type=positive(int), default=3, help="time-limit, sigterm: bursts of calls (default: 3)"
    )
    parser.add_argument(
        "--queued",
        type=positive(int),
        default=8,
        help=f"time-limit, sigterm: calls in a burst beyond the {MAX_TOOL_THREADS} tool threads (default: 8)",
    )
    parser.add_argument(
        "--task-every",
        type=int,
        default=4,
        help=f"kills: every Nth call is a durable task of {TASK_TOOL}, polled to its end on"
        " 2026-07-28 servers (0: none; default: 4)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill intervals (default: 1)")
    parser.add_argument(
        "--era", choices=["both", *ERAS], default="both", help="protocol era; both: each server the next one"
    )
    default_backend = "both" if IDEMPOTENCY_BACKEND == "postgres" else "sqlite"
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "both"],
        default=default_backend,
        help=f"idempotency store(s) to soak (default here: {default_backend})",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get(f"{ENV_PREFIX}DATABASE_URL"),
        help=f"PostgreSQL to use (default: {ENV_PREFIX}DATABASE_URL, else or on '': one started here)",
    )
    parser.add_argument(
        "--max-attempts", type=positive(int), default=200, help="attempts per call at most (default: 200)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures to FILE as JSON")
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.kill_db != "none":
        if args.backend == "sqlite":
            parser.error("--kill-db kills PostgreSQL: use --backend postgres (or both)")
        if args.dsn:
            parser.error(
                f"--kill-db kills only a PostgreSQL the soak starts itself, never one it is given"
                f" (--dsn or {ENV_PREFIX}DATABASE_URL): pass --dsn '' to have one started"
            )
    backends: list[Backend] = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    cases: list[Case] = [case for case in CASES if case in (args.case or CASES)]
    runs: list[Figures] = []
    try:
        for backend in backends:
            with database(backend, args) as where:  # the cases in turn, each with keys of its own
                for case in cases:
                    runs.append(soak(args, backend, case, where))
                    sys.stdout.write(describe(runs[-1]))
                    sys.stdout.flush()
    except SoakAborted as exc:
        sys.stderr.write(f"soak: {exc}\n")
        return EXIT_INCOMPLETE
    if args.json is not None:
        figures = [{**asdict(f), "ok": f.ok} for f in runs]
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    if not all(f.ok for f in runs):
        return EXIT_EFFECTS_WRONG
    return EXIT_INCOMPLETE if any(f.unfinished or f.db_kill_error for f in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
