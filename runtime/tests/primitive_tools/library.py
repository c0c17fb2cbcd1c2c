"""Resources, prompts and completers that fail in each way an owner's may, or take their time,
for test_primitives."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import Field

from resilient_mcp import Context, FatalError, TransientError, completion, prompt, resource, tool
from resilient_mcp.server.startup import load_settings
from sample_server.settings import Settings

LEAKED = "postgres://app:hunter2-s3cret@db.internal:5432/books"  # must never reach a client
BOOKS = {"1": "Dune", "2": "Solaris"}
NAMES = [f"name-{index:03d}" for index in range(150)]


@resource("books://catalogue", mime_type="text/plain")
def catalogue() -> str:
    """Every book's title, one per line."""
    return "\n".join(BOOKS.values())


@resource("books://{book_id}/title", mime_type="text/plain")
def title(book_id: int) -> str:
    """One book's title, by its number."""
    return BOOKS[str(book_id)]


@resource("books://broken", mime_type="text/plain")
def broken() -> str:
    """A resource whose database driver fails with its address in the message."""
    raise RuntimeError(f"could not connect to {LEAKED}")


@resource("books://busy", mime_type="text/plain")
def busy() -> str:
    """A resource whose dependency is temporarily away."""
    raise TransientError("the catalogue service is restarting", retry_after=3)


@resource("books://watched", mime_type="text/plain")
def watched() -> str:
    """A resource clients may follow."""
    return "watched"


@prompt
def review(
    book: Annotated[str, Field(description="the book's title")],
    tone: Annotated[str, Field(description="how the review sounds")] = "kind",
) -> str:
    """Ask for a short review of a book."""
    if book == "bad":
        raise ValueError("no such book in /srv/app/data/books.db")
    return f"Write a {tone} review of {book}."


@prompt(title="Broken prompt")
def broken_prompt() -> str:
    """A prompt whose template engine crashes."""
    raise RuntimeError(f"template store at {LEAKED} is down")


@completion("review")
def complete_review(argument: str, value: str, context: dict[str, str]) -> list[str]:
    """150 names, filtered by what was typed: more than one answer may hold."""
    return [name for name in NAMES if name.startswith(value)]


@tool
async def touch_watched(ctx: Context) -> str:
    """Announce that books://watched changed."""
    await ctx.notify_resource_updated("books://watched")
    return "touched"


@resource("books://doomed", mime_type="text/plain")
def doomed() -> str:
    """A resource whose disk is gone for good."""
    raise FatalError("the catalogue's disk is gone", "replace the disk, then restart")


@tool(read_only=True)
async def count_books() -> int:
    """How many books there are."""
    return len(BOOKS)


@resource("books://slow/{seconds}", mime_type="text/plain")
async def slow(seconds: float) -> str:
    """A resource that takes `seconds` to read."""
    await anyio.sleep(seconds)
    return "read slowly"


@prompt
async def slow_prompt(seconds: Annotated[str, Field(description="how long it takes")]) -> str:
    """A prompt that takes `seconds` to render."""
    await anyio.sleep(float(seconds))
    return "rendered slowly"


@completion("books://slow/{seconds}")
async def complete_slowly(argument: str, value: str, context: dict[str, str]) -> list[str]:
    """Takes as many seconds as the value typed so far says."""
    await anyio.sleep(float(value or 0))
    return [value]


@completion("slow_prompt")
def complete_slowly_in_sync(argument: str, value: str, context: dict[str, str]) -> list[str]:
    """A sync completer that blocks as many seconds as the value typed so far says."""
    time.sleep(float(value or 0))
    return [value]


def marker(name: str) -> Path:
    path = load_settings(Settings).data_dir / "markers" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@resource("books://held/{name}", mime_type="text/plain")
async def held(name: str) -> str:
    """Write `<name>.started`, then wait (a minute at most) for `release`."""
    marker(name + ".started").touch()
    for _ in range(3000):
        if marker("release").exists():
            return "released"
        await anyio.sleep(0.02)
    return "never released"
