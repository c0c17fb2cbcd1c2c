"""The MCP conformance suite (pinned in runtime/conformance/run.py) against the library's stand-in project."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .project_env import ProjectEnv

# What the library's server must score on each frozen requirement set of the pinned suite: all of
# it, but for the four scenarios stateless 2025-11-25 has no channel for (expected-failures.yml);
# and on each extension it serves: all of it.
EXPECTED_SCORES = {
    ("2025-11-25", "sessions"): (30, 30),
    ("2026-07-28", "sessions"): (37, 37),
    ("2025-11-25", "stateless"): (26, 30),
    ("2026-07-28", "stateless"): (37, 37),
    # HTTP_EXCHANGE=sdk: the SDK's own HTTP code scores what the core's does
    ("2025-11-25", "sdk-entry"): (30, 30),
    ("2026-07-28", "sdk-entry"): (37, 37),
    # The tasks extension (SEP-2663): every scenario with checks, with sessions and stateless.
    ("extension tasks", "sessions"): (9, 9),
    ("extension tasks", "stateless"): (9, 9),
}
SCORE_LINE = r"^  (\S+|extension \S+) (sessions|stateless|sdk-entry): (\d+)/(\d+) scored scenarios pass"


@pytest.mark.generated(minutes=2)
def test_conformance_suite_scores_every_scenario_the_sdk_can_serve_in_both_eras(
    runtime_env: ProjectEnv, tmp_path: Path
) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (it installs the suite and Node 22)")
    output = runtime_env.run("python", "conformance/run.py", "--cache", str(tmp_path / "npm"), timeout=900)
    scores = {
        (requirement_set, mode): (int(passed), int(total))
        for requirement_set, mode, passed, total in re.findall(SCORE_LINE, output, re.MULTILINE)
    }
    assert scores == EXPECTED_SCORES, output[-3000:]
    assert "every failure is listed in expected-failures.yml, and nothing listed passes" in output
