"""Start-up: spawn to the first tools/list answer over stdio, this server against the bare SDK.

    python benchmarks/bench_startup.py [--runs 10] [--imports]

A bare `MCPServer` script serving the same example tools (word_count, append_note;
without the core's wrappers) against `python -m sample_server serve`, in both
protocol eras: 2026-07-28 (`server/discover`, then tools/list) and 2025-11-25
(`initialize`, `initialized`, then tools/list). The idempotency store always opens at
start-up (no setting turns it off), so this server starts three ways:

- `rendered`: `<PREFIX>DATA_DIR` set to a directory that already holds the store;
- `fresh-dir`: `<PREFIX>DATA_DIR` set to a new, empty directory each time: the store's
  file and schema are created on the way;
- `no-data-dir`: `<PREFIX>DATA_DIR` unset: platformdirs finds the per-user state
  directory (pointed into this run's temporary directory, so yours is left alone).

The last two start in the 2026-07-28 era only: what the data directory costs comes before
the first request, whatever its era. Two more rows, `10-tools` and `40-tools`, serve that many
tools in both servers (the two example tools and generated ones of the same shape, in a module
that joins the tools/ package as an owner's file does), in the 2026-07-28 era.

Runs alternate between the servers, so all see the same machine; it prints the median
wall-clock milliseconds from spawn to the tools/list answer, the median CPU milliseconds
the process used by then (user + system, from /proc; the whole run where /proc is
missing), and the ratios to the bare SDK (for CPU, the median of each run's ratio to the bare
start of the same run). The target is a CPU ratio of at most 1.0 for `rendered` and the
tool-count rows (wall-clock time swings with whatever else the machine does).

--imports also prints the modules the rendered server imports on the way to serving
that the bare script does not, the slowest first (`python -X importtime`).

--instructions also counts, under valgrind, the instructions of one start of each server to its
first tools/list answer and its exit at the end of stdin: a figure no other load on the machine
moves. Both servers run at `<PREFIX>LOG_LEVEL=warning` there, so that this server's exit writes
no line (its first line loads structlog); the rows `rendered`, `10-tools` and `40-tools`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from resilient_mcp.commands.diagnose import (
    ERAS,
    MODERN,
    Era,
    RawStdioSession,
    open_session,
    unbuffered_free_env,
    with_envelope,
)
from sample_server.project import ENV_PREFIX, PACKAGE

TARGET_RATIO = 1.0  # CPU, this server's start-up against the bare SDK's
TIMEOUT_S = 60.0
BARE_SERVER = '''
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

mcp = MCPServer("bare")


class NoteReceipt(BaseModel):
    number: int = Field(description="The note's position in the notebook, from 1")
    notebook: str = Field(description="The notebook the note was appended to")


@mcp.tool()
def word_count(
    text: Annotated[str, Field(description="The text to count words in")],
    min_length: Annotated[int, Field(description="Count only words at least this long", ge=1)] = 1,
) -> int:
    """Count the words in a text, optionally only the longer ones."""
    return sum(1 for word in text.split() if len(word) >= min_length)


@mcp.tool()
def append_note(
    notebook: Annotated[str, Field(description="Notebook name: letters, digits, '-' or '_'", max_length=64)],
    text: Annotated[str, Field(description="The note to append", max_length=10_000)],
    idempotency_key: Annotated[str, Field(min_length=1, max_length=255)],
) -> NoteReceipt:
    """Append a note to a notebook (a file in the server's data directory)."""
    return NoteReceipt(number=1, notebook=notebook)


'''
# A generated tool of the examples' shape, for the tool-count rows: `{n}` is its number.
EXTRA_TOOL = '''
@{decorator}
def count_{n}(
    text: Annotated[str, Field(description="The text to measure")],
    min_length: Annotated[int, Field(description="Count only words at least this long", ge=1)] = 1,
) -> int:
    """Count the words of a text ({n}), optionally only the longer ones."""
    return sum(1 for word in text.split() if len(word) >= min_length)
'''
EXTRA_TOOLS_HEAD = """from typing import Annotated

from pydantic import Field

from {package}.core import tool
"""
# The rendered server with a directory of extra tools modules joined to its tools/ package.
LAUNCH_WITH_TOOLS = (
    "import sys, {package}.tools; {package}.tools.__path__.append(sys.argv[1]); "
    "from {package}.cli import main; raise SystemExit(main(['serve']))"
)
TOOL_COUNTS = (10, 40)  # the example tools and generated ones, in all


def cpu_ms(pid: int) -> float | None:
    """CPU milliseconds (user + system) a running process has used so far: its threads' run
    time in nanoseconds (Linux schedstat), else clock ticks (/proc stat), else None."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks.iterdir()) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def start_once(argv: Sequence[str], era: Era, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU milliseconds from spawn to the first tools/list answer."""
    before = children_cpu_ms()
    started = time.perf_counter()
    with RawStdioSession(argv, env=env) as session:
        handshake = open_session(session, era, timeout=TIMEOUT_S)
        answer = session.request("tools/list", with_envelope(era) or None, timeout=TIMEOUT_S)
        wall = (time.perf_counter() - started) * 1000
        cpu = cpu_ms(session.process.pid)
        session.close()
    if "result" not in handshake or "result" not in answer:
        raise SystemExit(f"{argv} did not answer: {handshake} {answer}\n{session.stderr_text()}")
    return wall, cpu if cpu is not None else children_cpu_ms() - before


def children_cpu_ms() -> float:
    """CPU milliseconds of every child this process has waited for (the whole run, not to the answer)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def servers(workdir: Path) -> dict[str, list[str]]:
    """The command of each server: `bare`, `rendered`, and both with `TOOL_COUNTS` tools."""
    bare = workdir / "bare_server.py"
    bare.write_text(textwrap.dedent(BARE_SERVER) + "\nmcp.run()\n", encoding="utf-8")
    commands = {"bare": [sys.executable, str(bare)], "rendered": [sys.executable, "-m", PACKAGE, "serve"]}
    for count in TOOL_COUNTS:
        extra = range(1, count - 1)  # beside the two example tools
        tools_dir = workdir / f"tools_{count}"
        tools_dir.mkdir(exist_ok=True)
        module = "".join(EXTRA_TOOL.format(n=n, decorator="tool(read_only=True)") for n in extra)
        (tools_dir / "generated.py").write_text(EXTRA_TOOLS_HEAD.format(package=PACKAGE) + module)
        script = workdir / f"bare_server_{count}.py"
        bare_extra = "".join(EXTRA_TOOL.format(n=n, decorator="mcp.tool()") for n in extra)
        script.write_text(textwrap.dedent(BARE_SERVER) + bare_extra + "\nmcp.run()\n", encoding="utf-8")
        commands[f"bare-{count}"] = [sys.executable, str(script)]
        launch = LAUNCH_WITH_TOOLS.format(package=PACKAGE)
        commands[f"{count}-tools"] = [sys.executable, "-c", launch, str(tools_dir)]
    return commands


DATA_DIR = f"{ENV_PREFIX}DATA_DIR"
VARIANTS = ("rendered", "fresh-dir", "no-data-dir", *(f"{n}-tools" for n in TOOL_COUNTS))
ONE_ERA_VARIANTS = {"fresh-dir", "no-data-dir", *(f"{n}-tools" for n in TOOL_COUNTS)}


def bare_of(variant: str) -> str:
    """The bare server a row is compared with: the one serving as many tools."""
    count = variant.removesuffix("-tools")
    return f"bare-{count}" if count.isdigit() else "bare"


def variant_env(variant: str, workdir: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment `rendered`, `fresh-dir` or `no-data-dir` starts with."""
    if variant == "fresh-dir":
        return {**env, DATA_DIR: tempfile.mkdtemp(prefix="fresh-", dir=workdir)}
    if variant == "no-data-dir":
        home = workdir / "home"  # where platformdirs looks: XDG_STATE_HOME on Linux, HOME elsewhere
        without = {name: value for name, value in env.items() if name != DATA_DIR}
        return {**without, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")}
    return env


Samples = dict[tuple[str, Era], list[tuple[float, float]]]


def measure(runs: int, workdir: Path, env: dict[str, str]) -> Samples:
    """(wall, cpu) milliseconds of each start by server and era, run by run: in each run every
    server starts once, in an order that turns around from one run to the next."""
    commands = servers(workdir)
    starts = {
        **{name: argv for name, argv in commands.items() if name.startswith("bare")},
        **{variant: commands.get(variant, commands["rendered"]) for variant in VARIANTS},
    }
    samples: dict[tuple[str, Era], list[tuple[float, float]]] = {
        (n, e): []
        for e in ERAS
        for n in starts
        if e == MODERN or (n not in ONE_ERA_VARIANTS and n.partition("-")[2] == "")
    }
    order = list(samples)
    for run in range(runs + 1):
        for name, era in order if run % 2 else order[::-1]:
            result = start_once(starts[name], era, variant_env(name, workdir, env))
            if run:  # the first round only warms the file cache (and the two data directories)
                samples[name, era].append(result)
    return samples


INSTRUCTION_ROWS = ("rendered", "10-tools", "40-tools")
VALGRIND_TIMEOUT_S = 900.0  # a start takes 20-60 s under valgrind


def instructions_once(argv: Sequence[str], env: dict[str, str], log: Path) -> int:
    """Instructions of one start to the first tools/list answer (2026-07-28) and its exit."""
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    with RawStdioSession([*valgrind, f"--log-file={log}", *argv], env=env) as session:
        handshake = open_session(session, MODERN, timeout=VALGRIND_TIMEOUT_S)
        answer = session.request("tools/list", with_envelope(MODERN), timeout=VALGRIND_TIMEOUT_S)
        session.close(timeout=VALGRIND_TIMEOUT_S)
    if "result" not in handshake or "result" not in answer:
        raise SystemExit(f"{argv} did not answer under valgrind: {handshake} {answer}")
    counted = re.search(r"I\s+refs:\s+([\d,]+)", log.read_text(encoding="utf-8"))
    if counted is None:
        raise SystemExit(f"valgrind printed no instruction count in {log}")
    return int(counted[1].replace(",", ""))


def print_instructions(workdir: Path, env: dict[str, str]) -> None:
    if shutil.which("valgrind") is None:
        report("\nvalgrind is not installed: no instruction counts (apt-get install valgrind)")
        return
    commands = servers(workdir)
    quiet = {**env, f"{ENV_PREFIX}LOG_LEVEL": "warning"}
    report("\nInstructions to the first tools/list answer and the exit (valgrind, one start each, millions)")
    report("server       bare    this   ratio")
    for row in INSTRUCTION_ROWS:
        bare_argv, argv = commands[bare_of(row)], commands.get(row, commands["rendered"])
        start_once(argv, MODERN, quiet)  # its generated tools module compiled and cached first
        bare = instructions_once(bare_argv, quiet, workdir / f"{row}-bare.log")
        this = instructions_once(argv, quiet, workdir / f"{row}.log")
        report(f"{row:<12} {bare / 1e6:>5.0f} {this / 1e6:>7.0f} {this / bare:>7.3f}")


def imported(argv: Sequence[str], env: dict[str, str]) -> dict[str, int]:
    """Module -> own import microseconds, for a server started and stopped at once."""
    ran = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
        check=False,
    )
    found: dict[str, int] = {}
    for line in ran.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            own, _, name = line.removeprefix("import time:").split("|")
            if own.strip().isdigit():
                found[name.strip()] = found.get(name.strip(), 0) + int(own)
    return found


def print_imports(workdir: Path, env: dict[str, str], top: int = 25) -> None:
    commands = servers(workdir)
    bare, rendered = imported(commands["bare"], env), imported(commands["rendered"], env)
    extra = sorted(((us, name) for name, us in rendered.items() if name not in bare), reverse=True)
    total = sum(us for us, _ in extra)
    report(f"\nImported by the rendered server only: {len(extra)} modules, {total / 1000:.0f} ms own time")
    for us, name in extra[:top]:
        report(f"{us / 1000:>8.1f} ms  {name}")


def load_average(when: str) -> str:
    """The machine's load, which the CPU ratio of one run moves with."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min) {when}"


def report(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10, help="start-ups per server and era (default: 10)")
    parser.add_argument(
        "--imports", action="store_true", help="also list the modules only this server imports"
    )
    parser.add_argument(
        "--instructions", action="store_true", help="also count each start's instructions (valgrind)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        env = unbuffered_free_env({DATA_DIR: str(workdir / "data")})
        report(f"Start-up, spawn to the first tools/list answer: {args.runs} alternating runs, medians (ms);")
        report("CPU ratio: the median of each run's ratio to the bare start of the same run [range]")
        report(load_average("at the start"))
        report("era         server       wall bare    wall  ratio   cpu bare     cpu  ratio")
        samples = measure(args.runs, workdir, env)
        worst = 0.0
        for era in ERAS:
            for variant in VARIANTS:
                if (variant, era) not in samples:
                    continue
                bare, this = samples[bare_of(variant), era], samples[variant, era]
                bare_wall, wall = (statistics.median(w for w, _ in runs) for runs in (bare, this))
                bare_cpu, cpu = (statistics.median(c for _, c in runs) for runs in (bare, this))
                ratios = [c / bare_c for (_, c), (_, bare_c) in zip(this, bare, strict=True)]
                paired = statistics.median(ratios)
                if variant not in ("fresh-dir", "no-data-dir"):  # those pay for a data directory
                    worst = max(worst, paired)
                report(
                    f"{era:<11} {variant:<12} {bare_wall:>9.0f} {wall:>7.0f} {wall / bare_wall:>6.3f}   "
                    f"{bare_cpu:>8.0f} {cpu:>7.0f} {paired:>6.3f} [{min(ratios):.2f}-{max(ratios):.2f}]"
                )
        verdict = "within" if worst <= TARGET_RATIO else "over"
        report(f"worst CPU ratio (`rendered`, tool counts) {worst:.3f}: {verdict} the target {TARGET_RATIO}")
        report(load_average("at the end"))
        if args.imports:
            print_imports(workdir, env)
        if args.instructions:
            print_instructions(workdir, env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
