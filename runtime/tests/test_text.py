"""`clip`, the one rule by which the core cuts a log field or a message to a length."""

from __future__ import annotations

import pytest

from resilient_mcp.telemetry.text import CUT_MARK, clip


def test_a_text_of_exactly_the_limit_is_kept_whole() -> None:
    assert clip("a" * 40, 40) == "a" * 40


def test_one_character_over_the_limit_is_cut_to_the_limit_with_the_mark() -> None:
    clipped = clip("abcdefghijk", 10)
    assert clipped == "abcdefg..."
    assert len(clipped) == 10


def test_an_empty_text_stays_empty() -> None:
    assert clip("", 40) == ""


@pytest.mark.parametrize("char", ["é", "😀", "中"])
def test_multi_byte_characters_count_as_one_and_are_never_split(char: str) -> None:
    assert clip(char * 10, 10) == char * 10  # ten characters, more than ten bytes: kept
    clipped = clip(char * 11, 10)
    assert clipped == char * 7 + CUT_MARK  # whole characters: seven of them, then the mark


def test_a_limit_shorter_than_the_mark_gives_the_mark_alone() -> None:
    assert clip("abcdef", 2) == CUT_MARK


def test_a_log_field_is_cut_to_the_limit_without_a_mark() -> None:
    assert clip("abcdefghijk", 10, mark="") == "abcdefghij"
    assert clip("abcdefghij", 10, mark="") == "abcdefghij"
