"""`copier update` from every released version, with an owner's edits, to the work tree.

The bar: nothing to merge by hand, the owner's files byte for byte as the owner left them,
and the rest equal to a fresh copy of the new version with the same owner edits: the core that
releases before 0.4.0 vendored is gone, and the project depends on the runtime library. The same
holds for an answer change, and `copier recopy` keeps the owner's files too.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import copier
import pytest
from packaging.version import Version

from . import owner_edits
from .answers import DEFAULT_ANSWERS, answers
from .gitrepo import git, init_and_commit
from .project_env import SUITE_TIMEOUT_S, project_nox, quick_start_environ, run
from .releases import Release, released_versions
from .rendering import is_owner_owned, library_requirement, render, tree, update

PACKAGE = DEFAULT_ANSWERS["package_name"]
RELEASES = released_versions()
NEWEST = "HEAD"  # the work tree, committed on top of the releases
# The releases that vendored the core into each project (0.4.0 made it the library).
VENDORING = [release for release in RELEASES if Version(release.version) < Version("0.4.0")]
# What releases before 0.4.0 vendored: the library holds it now (gitignore-like, `*` within a folder).
VENDORED = [
    f"src/{PACKAGE}/core/_[a-z]*.py",
    f"src/{PACKAGE}/core/_idempotency/*",
    f"src/{PACKAGE}/diagnose/*",
    f"src/{PACKAGE}/client_config*.py",
    f"src/{PACKAGE}/dev.py",
    "tests/core/*",
    "benchmarks/*",
    "conformance/*",
]


@dataclass(frozen=True)
class OwnedProject:
    path: Path
    owner_bytes: dict[str, bytes]  # every owner-owned file as committed before the update


def owner_files(root: Path) -> dict[str, bytes]:
    return {relpath: data for relpath, data in tree(root).items() if is_owner_owned(relpath, PACKAGE)}


def template_files(root: Path) -> dict[str, bytes]:
    return {relpath: data for relpath, data in tree(root).items() if not is_owner_owned(relpath, PACKAGE)}


def owned_copy(template: Path, destination: Path, vcs_ref: str, **changes: Any) -> OwnedProject:
    """`copier copy` of a version, then the owner's edits, committed as an owner would."""
    project = render(template, destination, answers(**changes), vcs_ref)
    init_and_commit(project, f"Project from template {vcs_ref}")
    owner_edits.make_it_mine(project)
    init_and_commit(project, "Owner's tools, tests, settings, README and tool settings")
    return OwnedProject(project, owner_files(project))


def fresh_copy_with_owner_edits(template: Path, destination: Path, **changes: Any) -> Path:
    project = render(template, destination, answers(**changes), NEWEST)
    owner_edits.make_it_mine(project)
    return project


def assert_merged_cleanly(project: Path) -> None:
    unmerged = git(project, "diff", "--name-only", "--diff-filter=U")
    rejected = [str(path.relative_to(project)) for path in project.rglob("*.rej")]
    with_markers = [
        relpath
        for relpath, data in tree(project).items()
        if b"\n<<<<<<< " in data or data.startswith(b"<<<<<<< ")
    ]
    assert (unmerged, rejected, with_markers) == ("", [], []), "copier left work to do by hand"


# Release 0.1.0 excluded every `README.md` on update, not only the project's, and copier applies
# the old version's exclusions to its render of that version: a file it excluded there is not
# one copier removes. The Upgrading notes tell 0.1.0 owners to delete it.
LEFT_BY_0_1_0 = ["benchmarks/README.md"]


def assert_same_as_fresh(updated: OwnedProject, fresh: Path, *, left: list[str] | None = None) -> None:
    """Owner files as the owner left them; every other file as a fresh copy with the owner's edits
    (`left`: files copier leaves, that a fresh copy has not)."""
    assert owner_files(updated.path) == updated.owner_bytes, "the update changed the owner's files"
    after, expected = template_files(updated.path), template_files(fresh)
    assert [relpath for relpath in left or [] if relpath in after] == (left or [])
    after = {relpath: data for relpath, data in after.items() if relpath not in (left or [])}
    assert sorted(after) == sorted(expected)
    differing = [relpath for relpath in expected if after[relpath] != expected[relpath]]
    assert differing == [], f"differ from a fresh copy with the owner's edits: {differing}"


@pytest.fixture(scope="session")
def updated_from(release_repo: Path, open_tmp: Path) -> Callable[[Release], OwnedProject]:
    """An owner's project made from a release, updated to HEAD (once per session; do not change it)."""
    cache: dict[str, OwnedProject] = {}

    def get(release: Release) -> OwnedProject:
        if release.version not in cache:
            owned = owned_copy(release_repo, open_tmp / f"updated-from-{release.version}", release.tag)
            update(owned.path, NEWEST)
            cache[release.version] = owned
        return cache[release.version]

    return get


def committed_copy(owned: OwnedProject, destination: Path) -> OwnedProject:
    """A private copy of an updated project, the update committed, for a test's own next step."""
    shutil.copytree(owned.path, destination, symlinks=True)
    init_and_commit(destination, "Update to the newest template")
    return OwnedProject(destination, owner_files(destination))


@pytest.mark.parametrize("release", RELEASES, ids=[release.tag for release in RELEASES])
def test_update_from_a_release_leaves_nothing_to_merge_by_hand(
    updated_from: Callable[[Release], OwnedProject], release: Release
) -> None:
    assert_merged_cleanly(updated_from(release).path)


@pytest.mark.parametrize("release", RELEASES, ids=[release.tag for release in RELEASES])
def test_update_from_a_release_equals_a_fresh_copy_with_the_owner_edits(
    release_repo: Path, updated_from: Callable[[Release], OwnedProject], tmp_path: Path, release: Release
) -> None:
    updated = updated_from(release)

    left = LEFT_BY_0_1_0 if release.version == "0.1.0" else []
    assert_same_as_fresh(updated, fresh_copy_with_owner_edits(release_repo, tmp_path / "fresh"), left=left)
    assert [relpath for relpath in owner_edits.DELETED_EXAMPLE if (updated.path / relpath).exists()] == []


@pytest.mark.parametrize("release", VENDORING, ids=[release.tag for release in VENDORING])
def test_update_from_a_release_removes_the_vendored_core_and_depends_on_the_library(
    release_repo: Path, updated_from: Callable[[Release], OwnedProject], release: Release
) -> None:
    updated = updated_from(release)
    before = git(updated.path, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    vendored = [path for path in before if any(fnmatchcase(path, pattern) for pattern in VENDORED)]
    pyproject = tomllib.loads((updated.path / "pyproject.toml").read_text(encoding="utf-8"))

    assert len(vendored) > 20, f"{release.tag} vendored the core: its files were committed"
    left = LEFT_BY_0_1_0 if release.version == "0.1.0" else []
    assert [path for path in vendored if (updated.path / path).exists()] == left
    assert library_requirement("sqlite") in pyproject["project"]["dependencies"]
    assert "httpx>=0.27" in pyproject["project"]["dependencies"], "the owner's dependency stays"


@pytest.mark.parametrize("release", RELEASES, ids=[release.tag for release in RELEASES])
def test_owner_rule_checks_only_the_owner_code_after_an_update(
    updated_from: Callable[[Release], OwnedProject], release: Release
) -> None:
    """The owner added ruff's N set: template names such as `ServerClosed` (N818) are not theirs."""
    project = updated_from(release).path

    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], project)
    run([sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], project)


@pytest.mark.generated(minutes=5)
# From the oldest release only: the test above proves every release updates to the same tree
# (a fresh copy with the owner's edits), so one run of that tree's checks speaks for all.
@pytest.mark.parametrize("release", RELEASES[:1], ids=[release.tag for release in RELEASES[:1]])
def test_project_updated_from_a_release_passes_its_own_nox_sessions(
    updated_from: Callable[[Release], OwnedProject], open_tmp: Path, release: Release
) -> None:
    """Its default sessions (lint, typecheck with the owner's override for their untyped helper,
    the owner's tests and the smoke suite), with the library installed from its wheel.

    This is also the default answers' own suite (test_render.py runs it nowhere else).
    """
    updated = updated_from(release)
    env = quick_start_environ()
    env["PYTEST_ADDOPTS"] = "-v -p no:cacheprovider -o faulthandler_timeout=120"
    envdir = open_tmp / f"nox-updated-from-{release.version}"  # outside the tree other tests copy

    output = run(
        project_nox(envdir),
        updated.path,
        env=env,
        timeout=SUITE_TIMEOUT_S,
    )

    missing = [line for line in owner_edits.OWNER_TESTS if line not in output]
    assert missing == [], f"the owner's tests did not pass: {missing}"


@pytest.mark.parametrize(
    "change",
    [{"tool_budget": 5}, {"strict_arguments": False}, {"idempotency_backend": "postgres"}],
    ids=["tool_budget", "strict_arguments", "backend"],
)
def test_an_answer_change_on_update_equals_a_fresh_copy_with_that_answer(
    release_repo: Path,
    updated_from: Callable[[Release], OwnedProject],
    tmp_path: Path,
    change: dict[str, Any],
) -> None:
    owned = committed_copy(updated_from(RELEASES[-1]), tmp_path / "project")

    copier.run_update(
        owned.path, data=change, overwrite=True, defaults=True, vcs_ref=NEWEST, unsafe=False, quiet=True
    )

    assert_merged_cleanly(owned.path)
    assert_same_as_fresh(owned, fresh_copy_with_owner_edits(release_repo, tmp_path / "fresh", **change))


def test_recopy_keeps_the_owner_files_and_the_deleted_example(
    release_repo: Path, updated_from: Callable[[Release], OwnedProject], tmp_path: Path
) -> None:
    owned = committed_copy(updated_from(RELEASES[-1]), tmp_path / "project")

    copier.run_recopy(owned.path, overwrite=True, defaults=True, vcs_ref=NEWEST, unsafe=False, quiet=True)

    assert_merged_cleanly(owned.path)
    assert owner_files(owned.path) == owned.owner_bytes
    # A recopy is a fresh start for the template's files: edits there (pyproject.toml's) go.
    fresh = render(release_repo, tmp_path / "fresh", answers(), NEWEST)
    assert template_files(owned.path) == template_files(fresh)


def test_update_to_the_same_version_changes_nothing(
    updated_from: Callable[[Release], OwnedProject], tmp_path: Path
) -> None:
    owned = committed_copy(updated_from(RELEASES[-1]), tmp_path / "project")

    update(owned.path, NEWEST)

    assert git(owned.path, "status", "--porcelain") == ""


@pytest.mark.parametrize(
    ("question", "new"), [("package_name", "other_tools"), ("project_slug", "other-tools")]
)
def test_a_name_cannot_change_on_update(
    updated_from: Callable[[Release], OwnedProject], tmp_path: Path, question: str, new: str
) -> None:
    owned = committed_copy(updated_from(RELEASES[-1]), tmp_path / "project")

    with pytest.raises(
        ValueError, match=f"{question} cannot change on update: it was '{DEFAULT_ANSWERS[question]}'"
    ):
        copier.run_update(
            owned.path, data={question: new}, overwrite=True, defaults=True, vcs_ref=NEWEST, quiet=True
        )

    assert git(owned.path, "status", "--porcelain") == "", "a refused update must leave the project as it was"


def test_a_name_cannot_change_on_recopy(
    updated_from: Callable[[Release], OwnedProject], tmp_path: Path
) -> None:
    owned = committed_copy(updated_from(RELEASES[-1]), tmp_path / "project")

    with pytest.raises(ValueError, match="package_name cannot change on update: it was 'example_tools'"):
        copier.run_recopy(
            owned.path,
            data={"package_name": "other_tools"},
            overwrite=True,
            defaults=True,
            vcs_ref=NEWEST,
            quiet=True,
        )

    assert git(owned.path, "status", "--porcelain") == ""
