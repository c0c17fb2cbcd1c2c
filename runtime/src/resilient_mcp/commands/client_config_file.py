"""`<command> client-config CLIENT --install`: merge the entry into the client's JSON file.

Every other server and key of the file is kept; the file is written whole to a temporary
file beside it and renamed over it (a crash leaves the old file or the new one, never half
of one), after a copy of the old one is kept beside it. A file that is not a JSON object is
refused untouched: rewriting what we cannot read would lose the owner's settings. Standard
library only, as `client_config`.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from resilient_mcp.records import record


class UnreadableConfig(Exception):
    """The file exists but is not a JSON object with an object under the servers key."""


@record
class Merged:
    """The file's text before and after the entry is merged in."""

    path: Path
    before: str | None  # None: the file does not exist yet
    after: str
    replaced: bool  # an entry of that name was there already

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        lines = difflib.unified_diff(
            (self.before or "").splitlines(keepends=True),
            self.after.splitlines(keepends=True),
            fromfile=str(self.path) if self.before is not None else "/dev/null",
            tofile=str(self.path),
        )
        return "".join(lines)


def merge(path: Path, servers_key: str, name: str, entry: dict[str, Any]) -> Merged:
    """The file at `path` with `entry` under `servers_key`/`name`; nothing is written."""
    # utf-8-sig: a file last saved by Windows Notepad starts with a byte-order mark.
    before = path.read_text(encoding="utf-8-sig") if path.exists() else None
    document = _parse(path, before)
    servers = document.setdefault(servers_key, {})
    if not isinstance(servers, dict):
        raise UnreadableConfig(
            f"{path}: {servers_key!r} is a {type(servers).__name__}, not an object of servers; "
            f"fix that key by hand, then run this again"
        )
    replaced = name in servers
    servers[name] = entry  # an existing entry keeps its place among the others
    after = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return Merged(path, before, after, replaced)


def _parse(path: Path, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableConfig(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); it was "
            "left untouched. Fix it (comments and trailing commas are not JSON), or merge the entry "
            "printed without --install by hand"
        ) from None
    if not isinstance(document, dict):
        raise UnreadableConfig(
            f"{path} holds a JSON {type(document).__name__}, not an object; it was left untouched. "
            "Fix it, or merge the entry printed without --install by hand"
        )
    return document


def write(merged: Merged) -> Path | None:
    """Write the merged file atomically; return the backup of the old one (None for a new file)."""
    # A symlinked config (a dotfiles checkout) stays a link: its target is what gets replaced.
    target = merged.path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = _backup(target) if merged.before is not None else None
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(merged.after)
            stream.flush()
            os.fsync(stream.fileno())
        if backup is not None:
            shutil.copymode(backup, temporary)  # mkstemp made it 0600: keep the owner's mode
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return backup


def _backup(target: Path) -> Path:
    """`<file>.bak`, or a timestamped one when that is taken: an earlier backup is never lost."""
    backup = target.with_name(f"{target.name}.bak")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    attempt = 0
    while backup.exists():
        attempt += 1
        backup = target.with_name(f"{target.name}.{stamp}{f'-{attempt}' if attempt > 1 else ''}.bak")
    shutil.copy2(target, backup)
    return backup
