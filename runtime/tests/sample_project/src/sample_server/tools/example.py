"""An example read-only tool: copy this file to start your own."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..core import ToolInputError, tool


@tool(read_only=True, open_world=False)
def word_count(
    text: Annotated[str, Field(description="The text to count words in")],
    min_length: Annotated[int, Field(description="Count only words at least this long", ge=1)] = 1,
) -> int:
    """Count the words in a text, optionally only the longer ones."""
    if not text.strip():
        raise ToolInputError("text is empty: pass the text whose words should be counted")
    return sum(1 for word in text.split() if len(word) >= min_length)
