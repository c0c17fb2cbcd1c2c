"""The READMEs' commands as a newcomer runs them: in order, in one shell, each as written.

Every command of a bash block is matched by one rule. Most run as written; a server runs until
it answers (stdio: `initialize` on stdin; HTTP: `/livez`), then stops; a command whose run
belongs to a longer test names that test, which must exist, and why. A command no rule knows
fails the walk, so a new README line cannot go untested unseen.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
TESTS = Path(__file__).parent
LIBRARY_TESTS = TESTS.parent / "runtime" / "tests"  # the runtime library's own suite


@dataclass(frozen=True)
class Step:
    readme: str
    command: str  # as written, continuation lines joined, the comment dropped


def readme_steps(readme: Path, label: str, *, after: str = "", blocks: int | None = None) -> list[Step]:
    """The commands of the bash blocks of `readme`: all, or the first `blocks` after the text `after`."""
    text = readme.read_text(encoding="utf-8")
    if after:
        text = text.split(after, 1)[1]
    steps = []
    for block in BASH_BLOCK.findall(text)[:blocks]:
        for line in block.replace("\\\n", " ").splitlines():
            command = strip_comment(line).strip()
            if command:
                steps.append(Step(label, command))
    return steps


def strip_comment(line: str) -> str:
    """The line without its trailing `# comment` (a `#` inside quotes is kept)."""
    for found in re.finditer(r"\s#", line):
        head = line[: found.start()]
        if head.count('"') % 2 == 0 and head.count("'") % 2 == 0:
            return head
    return line


@dataclass(frozen=True)
class Covered:
    """Run by a longer test, not by the walk."""

    test: str  # a path under tests/ or runtime/tests/
    why: str


# A shell line made from the command; a note for a command the walk does not need to run (with
# why); or the test that runs it.
Action = Callable[[str], str] | str | Covered


def run_as_written(command: str) -> str:
    return command


def without_the_second_nox(command: str) -> str:
    # Offline there is no newer library to upgrade to: the lock and the venv stay as they were
    # when the README's `nox` passed a few steps earlier, and a second `nox` would only repeat it.
    return command.removesuffix(" && nox")


def stdio_probe(command: str) -> str:
    return f"probe_stdio {command}"


def http_probe(url: str) -> Callable[[str], str]:
    return lambda command: f"probe_http {shlex.quote(url)} {command}"


def sandboxed_home(command: str) -> str:
    # The client's real files stay untouched: HOME is the walk's own.
    return f'HOME="$WALK_HOME" XDG_CONFIG_HOME="$WALK_HOME/.config" {command}'


def committed_first(command: str) -> str:
    # "With a clean git tree": what the walk made so far (uv.lock, .mcp.json) is committed first.
    return f'git add -A && git commit -qm "Before the update" --allow-empty && {command}'


def from_this_template(command: str) -> str:
    # The checkout is the test's template repository; the answers are the walk's, not asked.
    copy = command.replace("/path/to/this/checkout", '"$WALK_TEMPLATE"')
    return copy.replace("copier copy", "copier copy --defaults $WALK_ANSWERS", 1)


def database_stopped_at_the_end(command: str) -> str:
    # `nox -s db -- stop` (the README's next paragraph) when the walk ends, however it ends.
    return f"{command} && trap 'nox -s db -- stop >/dev/null 2>&1 || true' EXIT"


def rules(slug: str, prefix: str) -> list[tuple[str, Action]]:
    """(regular expression over the whole command, what the walk does with it), first match wins."""
    s = re.escape(slug)
    return [
        # The template's README
        (
            r"python3 -m pip install (copier uv|nox uv)",
            "installed: the walk runs in this repository's test venv",
        ),
        (r"copier copy --vcs-ref HEAD /path/to/this/checkout my-server", from_this_template),
        (r"nox -s demo", Covered("test_readme_walk.py", "the demo, in a copy of this repository")),
        (r"nox", run_as_written),
        # Installing, committing
        (r"cd my-server && uv sync && source \.venv/bin/activate", run_as_written),
        (r"uv sync", run_as_written),
        (r"source \.venv/bin/activate", run_as_written),
        (r"git init && git add -A && git commit -qm \"New project\"", run_as_written),
        (r"nox -s db && source \.nox/postgres/env\.sh", database_stopped_at_the_end),
        # Running it
        (rf"{s} (check|contract|--version|budget|keys list --in-doubt)", run_as_written),
        (rf"{s}", stdio_probe),
        (rf"{s} serve --transport http --port 8000", http_probe("http://127.0.0.1:8000/livez")),
        (rf"{s} diagnose", run_as_written),
        (rf"{s} list|{s} call .*", run_as_written),
        (rf"{s} list --http .*", Covered("test_list_and_call.py", "over HTTP, with and without the token")),
        (rf"{s} client-config .*", sandboxed_home),
        (
            rf"{s} dev.*|nox -s dev .*",
            Covered("test_dev.py", "reload after an edit and the Inspector, timed"),
        ),
        (rf"{s} diagnose -- python other_server.py", Covered("test_diagnose.py", "any stdio server")),
        (rf"{s} diagnose --http .*", Covered("test_diagnose.py", "an HTTP server's report, 401/421 hints")),
        (rf"{s} keys settle .*", Covered("test_keys_command.py", "settles real keys in doubt")),
        (rf"{re.escape(prefix)}METRICS=true {s}", Covered("test_telemetry.py", "/metrics scraped")),
        (r"OTEL_EXPORTER_OTLP_ENDPOINT=.*", Covered("test_telemetry.py", "spans and metrics to a receiver")),
        (
            rf"npx @modelcontextprotocol/inspector@[\d.]+ ({s}|--cli http://\S+ --header .*)",
            Covered("test_inspector.py", "the pinned Inspector CLI, over stdio and with a bearer token"),
        ),
        # Shipping
        (r"docker .*|.*docker compose up --build", Covered("test_image.py", "built and run with podman")),
        (r"kubectl .*", Covered("test_shipping.py", "the Secret and kustomize, without a cluster")),
        # Developing
        (r"nox -s (fmt|lock|diagnose|budget)", run_as_written),
        (r"uv lock --upgrade-package resilient-mcp && uv sync && nox", without_the_second_nox),
        (r"nox -s tests -- -k \w+", run_as_written),
        (r"nox -s contract", run_as_written),
        (r"pre-commit install", run_as_written),
        # Updating
        (r"nox -s update", committed_first),
        (
            r"nox -s update -- --vcs-ref v\d+\.\d+\.\d+ --defaults",
            Covered("test_update_session.py", "a release"),
        ),
        (r"git diff", run_as_written),
    ]


def action_for(command: str, slug: str, prefix: str) -> Action:
    for pattern, action in rules(slug, prefix):
        if re.fullmatch(pattern, command):
            return action
    raise AssertionError(
        f"README command {command!r} has no rule in tests/readme_walk.py: say how the walk runs it"
        " (as written, as a server it probes, or the test that runs it)"
    )


def covered_test_exists(cover: Covered) -> bool:
    """The test a covered command names is there: the template's or the library's."""
    return any((root / cover.test).exists() for root in (TESTS, LIBRARY_TESTS))
