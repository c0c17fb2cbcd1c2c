"""Fixtures: an isolated git and copier, the tagged template snapshot, rendered projects."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .answers import MATRIX, answers
from .gitrepo import BASE_TAG, TemplateRepo
from .library_wheel import build_wheel_folder, find_links_environ
from .project_env import ProjectEnv
from .releases import build_release_repo, released_versions
from .rendering import render
from .runtime_env import create_runtime_env

_PAIRED = 4  # workers that start with a long test and a short one; more than the noxfile uses


def minutes(item: pytest.Item) -> float:
    """A generated test's rough length (`generated(minutes=...)`); -1 for other tests."""
    marker = item.get_closest_marker("generated")
    return -1 if marker is None else float(marker.kwargs.get("minutes", 0))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest generated tests first, each followed by one of the shortest, then the rest.

    pytest-xdist (`--maxschedchunk=1`) starts each worker on two consecutive tests and then
    hands the next test to whichever worker runs short: up to `_PAIRED` workers each begin
    with one long test and one short one, so no worker queues a long test behind another.
    """
    items.sort(key=minutes, reverse=True)
    generated = [item for item in items if minutes(item) >= 0]
    pairs = min(_PAIRED, len(generated) // 2)
    longest, shortest = generated[:pairs], generated[len(generated) - pairs :][::-1]
    paired = [item for pair in zip(longest, shortest, strict=True) for item in pair]
    items[: len(generated)] = paired + generated[pairs : len(generated) - pairs]


LONG_S = 30.0  # a test this long is named when it ends
HEARTBEAT_S = 60.0  # how often the tests still running are named


class LongTestProgress:
    """Names each long test as it ends (its time and outcome) and, every minute, the tests still
    running: a run of ten minutes otherwise shows only dots."""

    def __init__(self, reporter: pytest.TerminalReporter) -> None:
        self.reporter = reporter
        self.began = time.monotonic()
        self.running: dict[str, float] = {}
        self.failed: set[str] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self.beat, name="long-test-progress", daemon=True).start()

    def say(self, text: str) -> None:
        writer = getattr(self.reporter, "_tw", None)  # pytest keeps no public handle on the line
        if writer is not None and writer.width_of_current_line:
            self.reporter.write("\n")  # after the dots of the tests before
        self.reporter.write_line(f"[{clock(time.monotonic() - self.began)}] {text}")

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(report.nodeid)
        if report.when != "teardown":
            return
        with self.lock:
            started = self.running.pop(report.nodeid, None)
        if started is not None and time.monotonic() - started >= LONG_S:
            outcome = "FAILED" if report.nodeid in self.failed else "done"
            self.say(f"{outcome} in {clock(time.monotonic() - started)}: {report.nodeid}")

    def beat(self) -> None:
        while not self.stopped.wait(HEARTBEAT_S):
            now = time.monotonic()
            with self.lock:
                long = [(nodeid, now - started) for nodeid, started in self.running.items()]
            long = [(nodeid, elapsed) for nodeid, elapsed in long if elapsed >= HEARTBEAT_S]
            if long:
                shown = ", ".join(f"{nodeid} ({clock(elapsed)})" for nodeid, elapsed in long)
                self.say(f"still running: {shown}")


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


@pytest.hookimpl(trylast=True)  # after the terminal reporter is made
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    # On the controller only: pytest-xdist's workers report to it, and their output is not shown.
    if reporter is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(LongTestProgress(reporter), "long-test-progress")


def pytest_unconfigure(config: pytest.Config) -> None:
    progress = config.pluginmanager.get_plugin("long-test-progress")
    if isinstance(progress, LongTestProgress):
        progress.stopped.set()


@pytest.fixture(scope="session")
def wheel_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime library's wheel, built from the work tree: where rendered projects install it from."""
    return build_wheel_folder(tmp_path_factory.mktemp("wheels"))


@pytest.fixture(scope="session", autouse=True)
def isolated_tools(tmp_path_factory: pytest.TempPathFactory, wheel_folder: Path) -> Iterator[None]:
    """Commits need an identity, the user's git or copier settings must not leak in, and the
    library installs from its wheel (PyPI may not have this version yet)."""
    home = tmp_path_factory.mktemp("config")
    gitconfig = home / "gitconfig"
    gitconfig.write_text(
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n[tag]\n\tgpgsign = false\n",
        encoding="utf-8",
    )
    copier_settings = home / "copier-settings.yml"
    copier_settings.write_text("trust: []\n", encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        for variable, value in {
            **find_links_environ(wheel_folder),
            "GIT_AUTHOR_NAME": "Template Tests",
            "GIT_AUTHOR_EMAIL": "template-tests@example.com",
            "GIT_COMMITTER_NAME": "Template Tests",
            "GIT_COMMITTER_EMAIL": "template-tests@example.com",
            "GIT_CONFIG_GLOBAL": str(gitconfig),
            "GIT_CONFIG_NOSYSTEM": "1",
            "COPIER_SETTINGS_PATH": str(copier_settings),
        }.items():
            patch.setenv(variable, value)
        yield


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory: pytest.TempPathFactory) -> TemplateRepo:
    """The work tree as it is now, committed and tagged `BASE_TAG`; read-only for tests."""
    return TemplateRepo.snapshot(tmp_path_factory.mktemp("snapshot") / "template")


@pytest.fixture(scope="session")
def release_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every release in CHANGELOG.md as a real tag `vX.Y.Z`, and the work tree as HEAD; read-only."""
    return build_release_repo(tmp_path_factory.mktemp("releases") / "template", released_versions())


@pytest.fixture(scope="session")
def open_tmp() -> Iterator[Path]:
    """A temporary folder other users may traverse, for rendered projects and their venvs.

    pytest's own temporary folders are private (0700), but a rendered project's PostgreSQL
    tests, run as root, start the server binaries inside its venv as an unprivileged user.
    """
    root = Path(tempfile.mkdtemp(prefix="mcp-template-tests-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def rendered_project(template_repo: TemplateRepo, open_tmp: Path) -> Callable[[str], Path]:
    """The project rendered for a MATRIX entry, once per session; tests must not change it."""
    cache: dict[str, Path] = {}

    def get(entry: str) -> Path:
        if entry not in cache:
            destination = open_tmp / f"rendered-{entry}"
            cache[entry] = render(template_repo.path, destination, answers(**MATRIX[entry]), BASE_TAG)
        return cache[entry]

    return get


@pytest.fixture(scope="session")
def project_env(rendered_project: Callable[[str], Path], open_tmp: Path) -> Callable[[str], ProjectEnv]:
    """The rendered project of a MATRIX entry installed in its own venv, once per session."""
    cache: dict[str, ProjectEnv] = {}

    def get(entry: str) -> ProjectEnv:
        if entry not in cache:
            venv = open_tmp / f"venv-{entry}"
            cache[entry] = ProjectEnv.create(
                rendered_project(entry), venv, answers(**MATRIX[entry])["python_version"]
            )
        return cache[entry]

    return get


@pytest.fixture(scope="session")
def runtime_env(open_tmp: Path) -> ProjectEnv:
    """The runtime library and its stand-in project in a venv of their own, once per session."""
    return create_runtime_env(open_tmp / "venv-runtime")
