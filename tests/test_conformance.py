"""The MCP conformance suite (pinned in the project's conformance/run.py) against a rendered server."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from .project_env import ProjectEnv


@pytest.mark.generated(minutes=2)
def test_conformance_suite_fails_only_where_expected_in_both_modes(
    project_env: Callable[[str], ProjectEnv], tmp_path: Path
) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (it installs the suite and Node 22)")
    env = project_env("defaults")
    output = env.run("python", "conformance/run.py", "--cache", str(tmp_path / "npm"), timeout=900)
    runs = [line for line in output.splitlines() if line.startswith("--- conformance: ")]
    assert len(runs) == 4  # with sessions and without, each protocol version the suite knows
    assert output.count("Baseline check passed") == 4
    assert "every failure is listed in expected-failures.yml" in output
