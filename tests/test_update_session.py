"""`nox -s update` in a generated project: the one command an owner runs to update.

A later template release changes a line the owner also changed, and the owner switches the
idempotency backend: the session must fail listing the conflict, and still print that
release's Upgrading notes and what the switch does to existing keys. Where the template's tags
did not travel, releases are found by the commits its CHANGELOG.md names; an update already
made by hand (as owners of 0.1.0 projects do) is checked and its notes shown; and a project
that is up to date is told so, with no notes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .answers import answers
from .gitrepo import commit_all, git, init_and_commit
from .rendering import render, update

NEXT = "v9.9.9"
NOTE = "- Run `nox -s lint`: the line length is 100 now."
BENCHMARKS_LINE = "\nBenchmarks of 9.9.9 say more.\n"
COPIER_ARGS = ["--defaults", "--vcs-ref", NEXT, "--data", "idempotency_backend=postgres"]


def release_next_version(template: Path) -> str:
    """A release after the work tree: a new line length, one benchmark less, a benchmarks README line.

    Returns its commit, which the commit after it names in CHANGELOG.md (README.md, "Releasing").
    """
    ruff_config = template / "template" / "ruff.toml.jinja"
    ruff_config.write_text(
        ruff_config.read_text(encoding="utf-8").replace("line-length = 110", "line-length = 100"),
        encoding="utf-8",
    )
    (template / "template" / "benchmarks" / "bench_overhead.py.jinja").unlink()
    benchmarks = template / "template" / "benchmarks" / "README.md"
    benchmarks.write_text(benchmarks.read_text(encoding="utf-8") + BENCHMARKS_LINE, encoding="utf-8")
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
    assert "no longer has these files" in output
    assert "\n  benchmarks/bench_overhead.py" in output
    # benchmarks/README.md is the template's: only the project's own README.md is excluded.
    assert (project / "benchmarks" / "README.md").read_text(encoding="utf-8").endswith(BENCHMARKS_LINE)


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
