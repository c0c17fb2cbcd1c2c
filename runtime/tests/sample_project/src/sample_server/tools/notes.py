"""An example side-effecting tool: copy this pattern for anything that must not happen twice.

`side_effect=True` gives the tool a required `idempotency_key` argument and runs it
behind the idempotency table: a retried call with the same key and arguments gets the
first call's answer and the note is written once.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, Field

from ..core import ToolInputError, current_settings, tool
from ..settings import Settings


class NoteReceipt(BaseModel):
    number: int = Field(description="The note's position in the notebook, from 1")
    notebook: str = Field(description="The notebook the note was appended to")


@tool(side_effect=True, open_world=False)
def append_note(
    notebook: Annotated[str, Field(description="Notebook name: letters, digits, '-' or '_'", max_length=64)],
    text: Annotated[str, Field(description="The note to append", max_length=10_000)],
) -> NoteReceipt:
    """Append a note to a notebook (a file in the server's data directory)."""
    if not notebook.replace("-", "").replace("_", "").isalnum():
        raise ToolInputError(f"notebook {notebook!r} may only hold letters, digits, '-' and '_'")
    path = current_settings(Settings).data_dir / "notebooks" / f"{notebook}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    with path.open(encoding="utf-8") as file:
        number = sum(1 for _ in file)
    return NoteReceipt(number=number, notebook=notebook)
