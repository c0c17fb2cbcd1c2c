"""Rows of text as aligned columns, as the operator commands print them (`keys`, `tasks`)."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[Sequence[str]]) -> str:
    """Each column padded to its widest cell; the last column comes as it is, unpadded."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = (
        "  ".join(
            [*(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)), row[-1]]
        ).rstrip()
        for row in rows
    )
    return "".join(line + "\n" for line in lines)
