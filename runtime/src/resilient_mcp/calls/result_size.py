"""How big a tool result may be: text is cut to the limit, structured content is refused.

A result is read by the model on every turn that follows, so one huge answer can push
everything else out of its context window. Text can be cut anywhere (on a UTF-8
boundary) and still makes sense with a note saying what is missing; structured content
cannot be cut without breaking the schema the tool declared, so it becomes `too_large`.
"""

from __future__ import annotations

from typing import Any

from mcp.types import CallToolResult, TextContent

from resilient_mcp.authoring.errors import ResultTooLargeError

_MEASURED = {"content", "structured_content"}
_WRAPPED = "result"  # the SDK wraps a primitive return (`-> str`) as {"result": value}


def fit_result(
    result: CallToolResult, limit: int, tool_name: str, *, side_effect: bool = False
) -> CallToolResult:
    """The result itself when within `limit` bytes, else its text cut to fit.

    Raises:
        ResultTooLargeError: the result has structured content (or non-text content) and is
            over the limit.
    """
    if _surely_within(result, limit):
        return result
    texts = _texts_only(result)
    if texts is not None:
        if sum(map(len, texts)) * 4 <= limit:  # UTF-8 takes at most 4 bytes a character: no need to encode
            return result
        size = sum(len(text.encode()) for text in texts)
        return result if size <= limit else _cut(result, texts, size, limit)
    size = _wire_size(result)
    if size <= limit:
        return result
    done = " The call itself completed: do not repeat it to get the result." if side_effect else ""
    raise ResultTooLargeError(
        f"{tool_name} returned {size} bytes, over the limit of {limit} bytes for one result; only text "
        f"is cut, as cutting structured content would break its schema.{done} Ask for less: narrow the "
        "query, request fewer items or one page at a time, or ask for a summary"
    )


def _surely_within(result: CallToolResult, limit: int) -> bool:
    """A cheap upper bound of both measures below, for the common small result: no encoding.

    JSON writes a character in at most 6 bytes (`\\u001f`); a plain text block adds 25 bytes
    of its own, the result's keys 40. Anything the bound does not cover is measured exactly.
    """
    size = 40
    for block in result.content:
        if type(block) is not TextContent or block.annotations is not None or block.meta is not None:
            return False
        size += 26 + 6 * len(block.text)
    structured = result.structured_content
    if structured is not None:
        bound = _json_bound(structured, limit - size)
        if bound is None:
            return False
        size += bound
    return size <= limit


def _json_bound(value: Any, room: int, depth: int = 0) -> int | None:
    """At least the bytes of `value` as JSON, or None past `room`, a few levels deep or an unknown type."""
    if isinstance(value, str):
        return 6 * len(value) + 2
    if value is None or isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return value.bit_length() // 3 + 2  # a decimal digit holds more than 3 bits; and a sign
    if isinstance(value, float):
        return 24  # the longest repr of a float, -2.2250738585072014e-308, is 23 characters
    if depth >= 3 or not isinstance(value, dict | list) or len(value) > 64:
        return None
    size = 2
    items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
    for key, item in items:
        if key is not None:
            if not isinstance(key, str):
                return None
            size += 6 * len(key) + 3  # quotes and colon
        bound = _json_bound(item, room - size, depth + 1)
        if bound is None:
            return None
        size += bound + 1  # the comma
        if size > room:
            return None
    return size


def _texts_only(result: CallToolResult) -> list[str] | None:
    """The text blocks when the result is text only (a `-> str` tool's echo counts as text), else None."""
    if not all(isinstance(block, TextContent) for block in result.content):
        return None
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    structured = result.structured_content
    if structured is None or _is_text_echo(structured, texts):
        return texts
    return None


def _is_text_echo(structured: dict[str, Any], texts: list[str]) -> bool:
    return len(texts) == 1 and structured == {_WRAPPED: texts[0]}


def _cut(result: CallToolResult, texts: list[str], size: int, limit: int) -> CallToolResult:
    """Keep the first `limit` bytes of text (the note included) and say what was cut."""
    room = max(0, limit - len(_note(size, size, limit).encode()))  # the longest the note can be
    kept: list[str] = []
    for text in texts:
        data = text.encode()
        if len(data) <= room:
            kept.append(text)
            room -= len(data)
            continue
        kept.append(data[:room].decode(errors="ignore"))  # drops a character split by the cut
        break
    shown = sum(len(text.encode()) for text in kept)
    kept[-1] += _note(size - shown, size, limit)
    content = [TextContent(type="text", text=text) for text in kept]
    structured = {_WRAPPED: kept[0]} if result.structured_content is not None else None
    meta: dict[str, Any] = dict(result.meta or {})
    meta["truncated"] = {"bytes": size, "limit": limit}
    return result.model_copy(update={"content": content, "structured_content": structured, "meta": meta})


def _note(cut: int, size: int, limit: int) -> str:
    return (
        f"\n\n[cut: {cut} of {size} bytes not shown, over the {limit}-byte limit for one result. "
        "Ask for less: narrow the query, request a page or a range, or ask for a summary]"
    )


def _wire_size(result: CallToolResult) -> int:
    """Bytes of the content and structured content as the SDK writes them (compact JSON, UTF-8)."""
    serializer = type(result).__pydantic_serializer__  # bytes straight from pydantic-core: no str copy
    return len(serializer.to_json(result, by_alias=True, exclude_none=True, include=_MEASURED))
