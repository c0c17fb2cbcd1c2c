"""The library's soak (runtime/benchmarks/soak.py) runs to its end against the stand-in project's real
server, killed and restarted, on each backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .project_env import ProjectEnv

CALLS = 120
# Seeded kill intervals (mean 100 ms) put the first kill 14 ms after the first handshake,
# well before 120 calls can be answered: every run sees kills whatever the machine's speed.
SHORT_SOAK = ["--case", "kills", "--calls", str(CALLS), "--kill-every-ms", "100", "--seed", "1"]


@pytest.mark.generated(minutes=0.5)
def test_soak_through_kills_finds_no_duplicated_or_lost_effect(
    runtime_env: ProjectEnv, tmp_path: Path
) -> None:
    figures_file = tmp_path / "soak.json"

    runtime_env.run(
        "python", "benchmarks/soak.py", *SHORT_SOAK, "--backend", "both", "--json", str(figures_file)
    )

    runs = json.loads(figures_file.read_text(encoding="utf-8"))
    assert [run["backend"] for run in runs] == ["sqlite", "postgres"]
    for run in runs:
        assert run["calls"] == CALLS
        assert run["kills"] >= 1
        assert run["restarts"] >= 1
        assert run["unfinished"] == 0, run
        assert run["duplicated_effects"] == 0, run
        assert run["lost_acknowledged_effects"] == 0, run
        assert run["unrecognised_ledger_lines"] == 0, run
        assert run["final_errors"] == {}, run
        assert sum(run["store_states"].values()) == CALLS, run["store_states"]


# PostgreSQL crashed under the server as well: a backend SIGKILLed (the postmaster restarts
# them all and replays its log) or the whole server stopped without a checkpoint. Calls only:
# tasks go through server kills above; through database kills they take the takeover window
# each, too long for every CI run (SOAK.md has the runs with tasks).
DB_SOAK = [
    "--backend",
    "postgres",
    "--calls",
    "150",
    "--kill-every-ms",
    "300",
    "--seed",
    "2",
    "--task-every",
    "0",
]


@pytest.mark.generated(minutes=1)
@pytest.mark.parametrize("kill_db", ["backend", "postmaster"])
def test_soak_through_database_crashes_finds_no_duplicated_or_lost_effect(
    runtime_env: ProjectEnv, kill_db: str, tmp_path: Path
) -> None:
    figures_file = tmp_path / "soak.json"

    kills = ["--case", "kills", "--kill-db", kill_db, "--db-kill-every-ms", "500"]
    runtime_env.run("python", "benchmarks/soak.py", *DB_SOAK, *kills, "--json", str(figures_file))

    [run] = json.loads(figures_file.read_text(encoding="utf-8"))
    assert run["db_kills"] >= 1, run
    assert run["unfinished"] == 0, run
    assert run["duplicated_effects"] == 0, run
    assert run["lost_acknowledged_effects"] == 0, run
    # An acknowledged key the store no longer holds as completed would not be replayed.
    assert run["acknowledged_not_replayable"] == {}, run
    assert run["final_errors"] == {}, run


# One burst per case and backend of 48 calls (8 more than the server's tool threads) whose
# bodies outlast the time limit, or the grace of a SIGTERM sent once all are in flight: the 8
# that waited for a thread never began, so they are transient, never in doubt (the soak exits 1).
QUEUED_SOAK = [
    "--case",
    "time-limit",
    "--case",
    "sigterm",
    "--bursts",
    "1",
    "--queued",
    "8",
    "--backend",
    "both",
]


@pytest.mark.generated(minutes=0.5)
def test_soak_of_calls_waiting_for_a_thread_finds_no_key_in_doubt_that_never_ran(
    runtime_env: ProjectEnv, tmp_path: Path
) -> None:
    figures_file = tmp_path / "soak.json"

    runtime_env.run("python", "benchmarks/soak.py", *QUEUED_SOAK, "--json", str(figures_file))

    runs = json.loads(figures_file.read_text(encoding="utf-8"))
    assert [(run["backend"], run["case"]) for run in runs] == [
        (backend, case) for backend in ("sqlite", "postgres") for case in ("time-limit", "sigterm")
    ]
    for run in runs:
        assert run["cut_before_their_body"] >= 1, "no call waited for a thread: the case tried nothing"
        assert run["in_doubt"] >= 1, run
        assert run["in_doubt_never_ran"] == 0, run
        assert run["false_in_doubt_of_in_doubt"] == 0, run
        assert run["duplicated_effects"] == 0, run
        assert run["unfinished"] == 0, run
        assert run["final_errors"] == {}, run
