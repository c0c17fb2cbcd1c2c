"""How big one result may be: text cut to the limit with a note, structured content refused (in-process)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.types import CallToolResult, ImageContent, TextContent

from resilient_mcp.authoring.errors import ResultTooLargeError
from resilient_mcp.calls.result_size import _surely_within, _wire_size, fit_result

LIMIT = 2000


def text_result(*texts: str, echo: bool = False) -> CallToolResult:
    content = [TextContent(type="text", text=text) for text in texts]
    return CallToolResult(content=content, structured_content={"result": texts[0]} if echo else None)


def text_bytes(result: CallToolResult) -> int:
    return sum(len(block.text.encode()) for block in result.content if isinstance(block, TextContent))


def test_a_result_within_the_limit_is_passed_on_as_it_is() -> None:
    result = text_result("a" * 100, "b" * 100)
    assert fit_result(result, LIMIT, "lookup") is result


@pytest.mark.parametrize("char", ["a", "é", "€", "😀"], ids=["ascii", "2-byte", "3-byte", "4-byte"])
def test_long_text_is_cut_to_the_limit_on_a_character_boundary_with_a_note(char: str) -> None:
    original = char * 5000
    fitted = fit_result(text_result(original), LIMIT, "lookup")

    (block,) = fitted.content
    assert isinstance(block, TextContent)
    assert text_bytes(fitted) <= LIMIT
    kept, note = block.text.split("\n\n[cut: ")
    assert set(kept) == {char}, "no character is split, none replaced"
    size = len(original.encode())
    cut = size - len(kept.encode())
    assert note.startswith(f"{cut} of {size} bytes not shown, over the {LIMIT}-byte limit")
    assert fitted.meta == {"truncated": {"bytes": size, "limit": LIMIT}}


def test_text_under_the_limit_in_characters_but_over_it_in_bytes_is_cut() -> None:
    fitted = fit_result(text_result("😀" * 1000), LIMIT, "lookup")
    assert text_bytes(fitted) <= LIMIT


def test_blocks_past_the_cut_are_dropped() -> None:
    fitted = fit_result(text_result("a" * 1500, "b" * 1500, "c" * 1500), LIMIT, "lookup")

    assert [block.text[0] for block in fitted.content if isinstance(block, TextContent)] == ["a", "b"]
    assert text_bytes(fitted) <= LIMIT


def test_a_str_tools_echo_follows_its_cut_text() -> None:
    fitted = fit_result(text_result("a" * 5000, echo=True), LIMIT, "lookup")

    (block,) = fitted.content
    assert isinstance(block, TextContent)
    assert fitted.structured_content == {"result": block.text}


@pytest.mark.parametrize("side_effect", [False, True])
def test_structured_content_over_the_limit_is_refused_not_cut(side_effect: bool) -> None:
    result = CallToolResult(
        content=[TextContent(type="text", text="rows")], structured_content={"rows": ["x" * 100] * 50}
    )
    with pytest.raises(ResultTooLargeError) as refused:
        fit_result(result, LIMIT, "lookup", side_effect=side_effect)

    assert f"over the limit of {LIMIT} bytes" in str(refused.value)
    assert ("do not repeat it" in str(refused.value)) is side_effect


def test_non_text_content_over_the_limit_is_refused() -> None:
    image = ImageContent(type="image", data="A" * 5000, mime_type="image/png")
    with pytest.raises(ResultTooLargeError):
        fit_result(CallToolResult(content=[image]), LIMIT, "lookup")


# The fast path's answers, against the measure it stands in for: "surely within" is never wrong.
SHAPES: list[Any] = [
    {"n": 1},
    {"text": "\x1f" * 300},  # JSON's longest escape, 6 bytes a character
    {"text": "é" * 300},
    {"big": 2**200, "neg": -(2**63), "f": -2.2250738585072014e-308, "flags": [True, False, None]},
    {"nested": {"a": {"b": {"c": ["deep"] * 3}}}},
    {"list": list(range(60))},
    {"quote": '"\\' * 150},
]


@pytest.mark.parametrize("structured", SHAPES)
@pytest.mark.parametrize("limit", [200, 1000, 2000, 4000])
def test_the_fast_bound_never_passes_a_result_the_exact_measure_refuses(structured: Any, limit: int) -> None:
    text = TextContent(type="text", text="\x1f" * 50)
    result = CallToolResult(content=[text], structured_content=structured)
    if _surely_within(result, limit):
        assert _wire_size(result) <= limit
