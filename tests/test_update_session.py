"""`nox -s update` in a generated project: the one command an owner runs to update.

A later template release changes a line the owner also changed, and the owner switches the
idempotency backend: the session must fail listing the conflict, and still print that
release's Upgrading notes and what the switch does to existing keys. Where the template's tags
did not travel, releases are found by the commits its CHANGELOG.md names; an update already
made by hand (as owners of 0.1.0 projects do) is checked and its notes shown; and a project
that is up to date is told so, with no notes. Updating a project that vendored the core
(releases before 0.4.0) removes the core files its owner left alone and names, with the change,
each one the owner changed: copier alone removes both kinds alike. The Upgrading notes show on
the first run whichever version's session runs copier: copier prints them after the update.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from packaging.version import Version

from .answers import DEFAULT_ANSWERS, answers
from .gitrepo import commit_all, git, init_and_commit
from .releases import CHANGELOG, changelog_entries, released_versions
from .rendering import render, update

NEXT = "v9.9.9"
NOTE = "- Run `nox -s lint`: the line length is 100 now."
# A template-owned file the next release drops.
DROPPED = "deploy/observability/grafana-dashboard.json"
COPIER_ARGS = ["--defaults", "--vcs-ref", NEXT, "--data", "idempotency_backend=postgres"]


def release_next_version(template: Path) -> str:
    """A release after the work tree: a new line length, and one template file less (DROPPED).

    Returns its commit, which the commit after it names in CHANGELOG.md (README.md, "Releasing").
    """
    ruff_config = template / "template" / "ruff.toml.jinja"
    ruff_config.write_text(
        ruff_config.read_text(encoding="utf-8").replace("line-length = 110", "line-length = 100"),
        encoding="utf-8",
    )
    (template / "template" / DROPPED).unlink()
    changelog = template / "CHANGELOG.md"
    entry = f"## [{NEXT[1:]}] - 2026-12-02\n\nCommit: `0000000`\n\n### Upgrading\n\n{NOTE}\n\n"
    changelog.write_text(
        changelog.read_text(encoding="utf-8").replace("## [Unreleased]", entry + "## [Unreleased]", 1),
        encoding="utf-8",
    )
    commit_all(template, f"Template {NEXT}", force=True)
    git(template, "tag", "--annotate", "--message", f"Template {NEXT}", NEXT)
    released = git(template, "rev-parse", "HEAD").strip()
    changelog.write_text(
        changelog.read_text(encoding="utf-8").replace("Commit: `0000000`", f"Commit: `{released}`", 1),
        encoding="utf-8",
    )
    commit_all(template, f"CHANGELOG.md names the commit of {NEXT}", force=True)
    return released


def nox_update(project: Path, *copier_args: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "nox", "--non-interactive", "-s", "update", "--", *copier_args],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.fixture
def template(release_repo: Path, tmp_path: Path) -> Path:
    """The releases and the work tree, in a copy this test may release a new version from."""
    copy = tmp_path / "template"
    shutil.copytree(release_repo, copy, symlinks=True)
    return copy


def new_project(template: Path, destination: Path) -> Path:
    """A project made from the template's HEAD with the default answers, committed."""
    project = render(template, destination, answers(), "HEAD")
    init_and_commit(project, "Project")
    return project


@pytest.mark.generated
def test_nox_update_lists_the_conflicts_and_prints_the_upgrading_notes(
    template: Path, tmp_path: Path
) -> None:
    project = new_project(template, tmp_path / "project")
    ruff_config = project / "ruff.toml"
    ruff_config.write_text(
        ruff_config.read_text(encoding="utf-8").replace("line-length = 110", "line-length = 120"),
        encoding="utf-8",
    )
    init_and_commit(project, "Owner prefers longer lines")
    release_next_version(template)

    returncode, output = nox_update(project, *COPIER_ARGS)

    assert returncode == 1, output
    assert "unmerged: ruff.toml" in output
    assert "conflict marker: ruff.toml:" in output
    assert f"[{NEXT[1:]}]\n{NOTE}" in output
    assert "[Unreleased]" not in output, "notes of versions past the new one"
    assert (
        "idempotency_backend changed from sqlite to postgres: the keys recorded in sqlite are not moved"
        in output
    )
    assert "no longer has these files, which you had not changed: removed.\n" in output
    assert f"\n  {DROPPED}\n" in output
    assert not (project / DROPPED).exists()


@pytest.mark.generated
def test_nox_update_where_tags_did_not_travel_and_after_an_update_by_hand(
    template: Path, tmp_path: Path
) -> None:
    by_tag, by_hand = (new_project(template, tmp_path / name) for name in ("by-tag", "by-hand"))
    released = release_next_version(template)
    for tag in git(template, "tag", "--list").split():
        git(template, "tag", "--delete", tag)

    returncode, named = nox_update(by_tag, "--vcs-ref", NEXT, "--defaults")
    commit_all(by_tag, "Updated")
    _, up_to_date = nox_update(by_tag)
    # An owner of a 0.1.0 project updates with copier itself, then runs the session it brought.
    update(by_hand, released)
    _, checked = nox_update(by_hand)

    assert returncode == 0, named
    assert f"has no tag {NEXT}: using its commit {released[:12]}" in named
    assert "No git tags found" not in named
    assert f"[{NEXT[1:]}]\n{NOTE}" in named
    assert "line-length = 100" in (by_tag / "ruff.toml").read_text(encoding="utf-8")
    assert f"Already at template {released[:7]}" in up_to_date, up_to_date
    assert NOTE not in up_to_date
    assert "copier update has already run here" in checked, checked
    assert f"[{NEXT[1:]}]\n{NOTE}" in checked
    assert "[Unreleased]" not in checked


PACKAGE = DEFAULT_ANSWERS["package_name"]
VENDORED_RELEASE = next(release for release in released_versions() if release.version == "0.3.1")
# The owner's change to a file of the core 0.3.1 vendored, and the line that shows it.
EDITED_CORE = f"src/{PACKAGE}/core/_resilience.py"
CORE_EDIT = ("_BACKOFF_CAP_S = 2.0\n", "_BACKOFF_CAP_S = 5.0\n")
# A file of the vendored core that no owner touched in these tests.
UNTOUCHED_CORE = f"src/{PACKAGE}/core/_app.py"


def vendored_project(release_repo: Path, destination: Path, *, edit_core: bool) -> Path:
    """A project made from 0.3.1 (which vendored the core), committed; `edit_core`: one constant changed."""
    project = render(release_repo, destination, answers(), VENDORED_RELEASE.tag)
    init_and_commit(project, f"Project from template {VENDORED_RELEASE.tag}")
    if edit_core:
        path = project / EDITED_CORE
        text = path.read_text(encoding="utf-8")
        assert text.count(CORE_EDIT[0]) == 1, f"{EDITED_CORE} no longer holds {CORE_EDIT[0]!r}"
        path.write_text(text.replace(*CORE_EDIT), encoding="utf-8")
        init_and_commit(project, "Owner: a longer backoff cap")
    return project


def assert_nothing_to_merge(project: Path) -> None:
    statuses = git(project, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert [line for line in statuses if line.startswith(("U", "AA", "DD")) or line.endswith(".rej")] == []
    assert git(project, "grep", "-n", "-I", "-E", "^(<<<<<<<|>>>>>>>)( |$)", check=False) == ""


@pytest.mark.generated
def test_nox_update_from_a_vendored_core_removes_it_when_the_owner_left_it_alone(
    release_repo: Path, tmp_path: Path
) -> None:
    """0.3.1's own session updates (it is the one that runs), and the new one checks the result."""
    project = vendored_project(release_repo, tmp_path / "project", edit_core=False)

    updated, updated_output = nox_update(project, "--defaults", "--vcs-ref", "HEAD")
    checked, output = nox_update(project)

    assert updated == 0, updated_output
    assert "run\n`nox -s update` (again, if it ran this update)" in updated_output, "copier's note is shown"
    assert checked == 0, output
    assert "copier update has already run here" in output
    assert "no longer has these files, which you had not changed: removed.\n" in output
    assert f"\n  src/{PACKAGE}/core/ (" in output
    assert "\n  tests/core/ (" in output
    # No file is named as changed (the Upgrading notes quote the words, with `<path>`).
    assert re.findall(r"removed, with your change in it: (?!<path>)\S+", output) == []
    assert "Updated cleanly" in output
    assert_nothing_to_merge(project)
    assert not (project / UNTOUCHED_CORE).exists()
    assert not (project / "tests" / "core").exists()


@pytest.mark.generated
def test_nox_update_names_a_vendored_core_file_the_owner_changed_with_the_change(
    release_repo: Path, tmp_path: Path
) -> None:
    project = vendored_project(release_repo, tmp_path / "project", edit_core=True)

    updated, updated_output = nox_update(project, "--defaults", "--vcs-ref", "HEAD")
    checked, output = nox_update(project)

    assert updated == 0, updated_output
    assert checked == 1, output
    assert f"You changed {EDITED_CORE}, which the new template version removes:" in output
    assert f"-{CORE_EDIT[0]}+{CORE_EDIT[1]}" in output, "the owner's change, as a diff against 0.3.1"
    assert f"removed, with your change in it: {EDITED_CORE} (`git show HEAD:{EDITED_CORE}`)" in output
    assert "a setting in settings.py, a module in tools/), as the Upgrading notes say" in output
    assert f"with your change in it: {UNTOUCHED_CORE}" not in output
    assert_nothing_to_merge(project)
    assert git(project, "show", f"HEAD:{EDITED_CORE}").count(CORE_EDIT[1]) == 1, "the change is in git"


OLDEST_SESSION = next(release for release in released_versions() if release.version == "0.2.0")


def first_upgrading_line(version: str) -> str:
    """The first line of a release's Upgrading notes in CHANGELOG.md."""
    body = changelog_entries()[version]
    return body.split("\n### Upgrading\n", 1)[1].strip().splitlines()[0]


@pytest.mark.generated
def test_the_first_update_shows_every_upgrading_note_whichever_session_runs_it(
    template: Path, tmp_path: Path
) -> None:
    """0.2.0's own session runs the update, to a commit (the tags did not travel): it reads the
    changelog as 0.2.0 knew it and finds no release there; copier's message after the update
    (the new version's) prints the notes of every release in between, on this first run."""
    made_from = git(template, "rev-parse", f"{OLDEST_SESSION.tag}^{{commit}}").strip()
    for tag in git(template, "tag", "--list").split():
        git(template, "tag", "--delete", tag)
    # Without tags copier records the short hash; 0.2.0's session reads one of only digits (about
    # one commit in 27, `1234567`) as release 1234567 and prints every release's notes. Its code is
    # released, so HEAD gets a hash it reads as a commit (the template's own sessions need no help).
    while git(template, "describe", "--always", "HEAD").strip().isdigit():
        commit_all(template, "HEAD under another hash")
    head = git(template, "rev-parse", "HEAD").strip()
    project = render(template, tmp_path / "project", answers(), made_from)
    init_and_commit(project, f"Project from template {OLDEST_SESSION.tag}")

    returncode, output = nox_update(project, "--defaults", "--vcs-ref", head)

    assert returncode == 0, output
    oldest = Version(OLDEST_SESSION.version)
    later = [release.version for release in released_versions() if Version(release.version) > oldest]
    assert later, "releases after 0.2.0"
    assert "What to do by hand, from TEMPLATE_CHANGELOG.md (template " in output
    missing = [version for version in later if f"[{version}]\n{first_upgrading_line(version)}" not in output]
    assert missing == [], output[-6000:]
    assert f"[{OLDEST_SESSION.version}]\n" not in output, "the notes of the version it was made from"
    assert "run\n`nox -s update` (again, if it ran this update)" in output, "the core it vendored"


def test_the_changelog_reads_the_same_through_jinja() -> None:
    """copier's message after an update includes CHANGELOG.md as a Jinja template: text Jinja
    would read as its own (`{{`, `{%`, `{#`) would break every owner's update."""
    text = CHANGELOG.read_text(encoding="utf-8")
    assert jinja2.Environment(keep_trailing_newline=True).from_string(text).render() == text
