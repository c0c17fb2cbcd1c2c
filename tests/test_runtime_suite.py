"""The runtime library's own suite (runtime/tests), in the two answer sets the template's projects
are made with, each on one end of the MCP SDK versions the library supports.

The SQLite and strict set runs on the newest `mcp` on PyPI, the PostgreSQL and lenient set (which
also tests the store on SQLite) on the lowest supported minor series: together, the whole suite on
both ends of `mcp>=X.Y,<N` in the time of two runs, less the tests that do not depend on the
answers, which run in one of them only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from .project_env import SUITE_TIMEOUT_S, run
from .runtime_env import create_runtime_env, mcp_requirement, suite_requirements

# answers, the mcp end, and what the run leaves out: tests whose outcome does not depend on the
# answers run in one of the two, the store's on both backends (`both_backends`) in the postgres
# run, those of a transport, auth or a command (`answers_independent`) in the SQLite one, and
# others (`answers_independent_postgres`) in the postgres one, so that the two take about as long.
VARIANTS = {
    "sqlite-strict-newest-mcp": (
        {"SAMPLE_PROJECT_BACKEND": "sqlite", "SAMPLE_PROJECT_STRICT": "true"},
        "newest",
        ["-m", "not both_backends and not answers_independent_postgres"],
    ),
    "postgres-lenient-lowest-mcp": (
        {"SAMPLE_PROJECT_BACKEND": "postgres", "SAMPLE_PROJECT_STRICT": "false"},
        "lowest",
        ["-m", "not answers_independent"],
    ),
}
# Two workers of its own: the suite mostly waits (servers starting, calls sleeping, limits running out).
SUITE_WORKERS = ["-n", "2", "-p", "no:cacheprovider", "-o", "faulthandler_timeout=180"]


def lowest_supported_series(requirement: str) -> str:
    """`mcp>=2.3,<3` -> `mcp~=2.3.0`: the lowest minor series the requirement allows, newest patch."""
    parsed = Requirement(requirement)
    floors = [Version(spec.version) for spec in parsed.specifier if spec.operator in (">=", "==", "~=")]
    assert floors, f"{requirement}: the library's mcp requirement names no lower bound"
    floor = min(floors)
    return f"{parsed.name}~={floor.major}.{floor.minor}.0"


def test_the_lowest_series_is_read_from_the_requirement() -> None:
    assert lowest_supported_series("mcp>=2.3,<3") == "mcp~=2.3.0"
    assert lowest_supported_series("mcp>=2.10.1,<3") == "mcp~=2.10.0"


@pytest.mark.generated(minutes=8)
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_library_suite_passes(variant: str, open_tmp: Path) -> None:
    answers, end, selection = VARIANTS[variant]
    requirement = mcp_requirement()
    pin = lowest_supported_series(requirement) if end == "lowest" else requirement
    venv = open_tmp / f"venv-runtime-{variant}"
    env = create_runtime_env(venv, pin, *suite_requirements(), extras="postgres,otel")
    installed = env.run("python", "-c", "import importlib.metadata as m; print(m.version('mcp'))").strip()
    assert Version(installed) in Requirement(requirement).specifier, (
        f"mcp {installed} is outside {requirement}"
    )

    output = run(
        [str(env.venv / "bin" / "python"), "-m", "pytest", *SUITE_WORKERS, *selection, "-q"],
        env.project,
        env={**env.environ, **answers},
        timeout=SUITE_TIMEOUT_S,
    )
    summary = re.findall(r"\d+ passed.*", output)[-1:]
    print(f"mcp {installed}, {variant}: {summary}")
