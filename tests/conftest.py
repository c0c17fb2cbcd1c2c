"""Fixtures: an isolated git and copier, the tagged template snapshot, rendered projects."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .answers import MATRIX, answers
from .gitrepo import BASE_TAG, TemplateRepo
from .project_env import ProjectEnv
from .releases import build_release_repo, released_versions
from .rendering import render

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


@pytest.fixture(scope="session", autouse=True)
def isolated_tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Commits need an identity, and the user's git or copier settings must not leak in."""
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
