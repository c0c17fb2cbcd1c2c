"""CHANGELOG.md names every release's commit, and a clone without that history says what to do."""

from __future__ import annotations

import pytest

from .releases import Release, changelog_entries, release_commit, released_versions


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
