# Template-owned: `copier update` replaces this file; put your code in tools/.
"""How big a tool result may be: text is cut to the limit, structured content is refused.

A result is read by the model on every turn that follows, so one huge answer can push
everything else out of its context window. Text can be cut anywhere (on a UTF-8
boundary) and still makes sense with a note saying what is missing; structured content
cannot be cut without breaking the schema the tool declared, so it becomes `too_large`.
"""

from __future__ import annotations

from typing import Any

from mcp.types import CallToolResult, TextContent

from ._errors import ResultTooLargeError

MIN_RESULT_BYTES = 1000  # room for the note and a little text; below this every answer is a note
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
