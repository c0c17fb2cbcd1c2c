"""A rendered project's soak benchmark runs to its end against its real server, killed and restarted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .project_env import ProjectEnv

# One entry per backend; a PostgreSQL project soaks SQLite and PostgreSQL.
BACKENDS = {"defaults": ["sqlite"], "proprietary-postgres": ["sqlite", "postgres"]}
CALLS = 120
# Seeded kill intervals (mean 100 ms) put the first kill 14 ms after the first handshake,
# well before 120 calls can be answered: every run sees kills whatever the machine's speed.
SHORT_SOAK = ["--calls", str(CALLS), "--kill-every-ms", "100", "--seed", "1"]


@pytest.mark.generated(minutes=1)
@pytest.mark.parametrize("entry", list(BACKENDS))
def test_soak_through_kills_finds_no_duplicated_or_lost_effect(
    project_env: Callable[[str], ProjectEnv], entry: str, tmp_path: Path
) -> None:
    figures_file = tmp_path / "soak.json"

    project_env(entry).run("python", "benchmarks/soak.py", *SHORT_SOAK, "--json", str(figures_file))

    runs = json.loads(figures_file.read_text(encoding="utf-8"))
    assert [run["backend"] for run in runs] == BACKENDS[entry]
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
