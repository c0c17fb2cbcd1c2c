"""Released template versions, as users' copier sees them: real tags in a temporary repository.

CHANGELOG.md names each release's commit, so tags need not travel with a clone of this
repository; where a tag is present it must point at that commit. The temporary repository
holds the released commits tagged `vX.Y.Z` and, on top, the work tree as it is now.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from .gitrepo import REPO_ROOT, SNAPSHOT_IGNORE, commit_all, git

CHANGELOG = REPO_ROOT / "CHANGELOG.md"
# `## [0.1.0] - 2026-11-30`, or `## [Unreleased]`, and the entry's text up to the next one.
ENTRY = re.compile(r"^## \[(?P<version>[^\]]+)\][^\n]*\n(?P<body>.*?)(?=^## \[|\Z)", re.MULTILINE | re.DOTALL)
COMMIT_LINE = re.compile(r"^Commit: `(?P<commit>[0-9a-f]{7,40})`$", re.MULTILINE)


@dataclass(frozen=True)
class Release:
    version: str
    commit: str | None  # as CHANGELOG.md names it (full or abbreviated); None until the line is added

    @property
    def tag(self) -> str:
        return f"v{self.version}"


def changelog_entries(changelog: Path = CHANGELOG) -> dict[str, str]:
    """Each entry's text by its version (`Unreleased` included), newest first."""
    return {
        entry["version"]: entry["body"] for entry in ENTRY.finditer(changelog.read_text(encoding="utf-8"))
    }


def released_versions(changelog: Path = CHANGELOG) -> list[Release]:
    """Every release CHANGELOG.md lists, oldest first."""
    found = [
        Release(version, commit[1] if (commit := COMMIT_LINE.search(body)) else None)
        for version, body in changelog_entries(changelog).items()
        if version != "Unreleased"
    ]
    assert found, f"{changelog} names no release (`## [X.Y.Z] - YYYY-MM-DD`)"
    return found[::-1]


def release_commit(release: Release) -> str:
    """The full commit of a release in this clone's history, checked against its tag if there is one."""
    tagged = git(
        REPO_ROOT, "rev-parse", "--verify", "--quiet", f"{release.tag}^{{commit}}", check=False
    ).strip()
    if release.commit is None:
        if not tagged:
            pytest.fail(
                f"CHANGELOG.md names no commit for {release.version} and this clone has no tag "
                f"{release.tag}: add its `Commit:` line (README.md, 'Releasing the template'), or "
                "`git fetch --tags`."
            )
        return tagged
    found = git(REPO_ROOT, "rev-parse", "--verify", "--quiet", f"{release.commit}^{{commit}}", check=False)
    if not found:
        pytest.fail(
            f"Release {release.version} is commit {release.commit} (CHANGELOG.md), which this clone of "
            "the template does not have (a shallow clone?): run `git fetch --unshallow` (or clone "
            "without --depth), then run the tests again."
        )
    commit = found.strip()
    if tagged and tagged != commit:
        pytest.fail(f"tag {release.tag} is {tagged}, but CHANGELOG.md says {release.version} is {commit}")
    return commit


def build_release_repo(destination: Path, releases: list[Release]) -> Path:
    """A clone with each release tagged `vX.Y.Z` and the work tree committed on top (HEAD)."""
    commits = {release.tag: release_commit(release) for release in releases}
    head = git(REPO_ROOT, "rev-parse", "HEAD").strip()
    git(destination.parent, "clone", "--quiet", "--no-checkout", str(REPO_ROOT), destination.name)
    for tag, commit in commits.items():
        git(destination, "tag", "--force", "--annotate", "--message", f"Template {tag}", tag, commit)
    git(destination, "checkout", "--quiet", "-B", "main", head)
    # The work tree as it is now, uncommitted edits and deletions included.
    git(destination, "rm", "-r", "--quiet", "--cached", ".")
    for path in destination.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    shutil.copytree(REPO_ROOT, destination, ignore=SNAPSHOT_IGNORE, symlinks=True, dirs_exist_ok=True)
    commit_all(destination, "Work tree", force=True)
    return destination.resolve()
