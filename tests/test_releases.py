"""CHANGELOG.md names every release's commit, and a clone without that history says what to do;
the library is released with the template, by the repository's release workflow."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.version import Version

from .gitrepo import REPO_ROOT
from .project_env import run
from .releases import Release, changelog_entries, release_commit, released_versions
from .test_shipping import tool


def test_changelog_names_the_first_release_and_its_commit() -> None:
    assert released_versions()[0] == Release("0.1.0", "3546c8fea020a1293cbd5833dd1c67b096404415")


def test_a_release_missing_from_this_clone_fails_with_what_to_do() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"run `git fetch --unshallow`"):
        release_commit(Release("9.9.9", "0" * 40))


def test_every_changelog_entry_says_what_an_owner_does_by_hand() -> None:
    entries = changelog_entries()

    assert "Unreleased" in entries
    assert [version for version, body in entries.items() if "\n### Upgrading\n" not in body] == []


def test_a_release_without_a_commit_line_needs_its_tag() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"add its `Commit:` line"):
        release_commit(Release("9.9.9", None))


def test_the_library_is_the_next_release_after_every_one_in_the_changelog() -> None:
    """runtime/pyproject.toml names the version the next tag releases: template and library alike."""
    library = tomllib.loads((REPO_ROOT / "runtime" / "pyproject.toml").read_text(encoding="utf-8"))
    version = Version(library["project"]["version"])
    released = [Version(release.version) for release in released_versions()]

    assert version > max(released), f"runtime/pyproject.toml's {version} is not ahead of {max(released)}"


def test_the_repositorys_release_workflow_passes_actionlint_with_every_action_pinned() -> None:
    workflow = REPO_ROOT / ".github" / "workflows" / "release.yml"
    text = workflow.read_text(encoding="utf-8")

    run([tool("actionlint"), "-no-color", str(workflow)], REPO_ROOT)
    uses = re.findall(r"uses: (\S+)", text)
    assert uses
    assert [action for action in uses if not re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action)] == []
    assert "uv build runtime" in text
    assert "trusted-publishing" in text
    assert "attest-build-provenance" in text
