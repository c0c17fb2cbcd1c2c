"""Text cut to a length for a log field or a message: one rule, everywhere."""

from __future__ import annotations

# Ends a text cut for a reader. A log field is cut without it (`mark=""`): redaction hides the
# token-like run just before a "..." as a possibly cut secret, so a long name would be lost whole.
CUT_MARK = "..."


def clip(text: str, limit: int, *, mark: str = CUT_MARK) -> str:
    """`text` itself when it has at most `limit` characters; else its start and `mark`, `limit`
    characters in all (a limit below the mark's length gives the mark alone).

    Counted in characters, not bytes: a multi-byte character is kept whole or left out.
    """
    if len(text) <= limit:
        return text
    return text[: max(limit - len(mark), 0)] + mark
