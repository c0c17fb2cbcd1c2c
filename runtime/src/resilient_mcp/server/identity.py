"""Who the server says it is: description, instructions, website and icon, in `serverInfo`.

The description and website come from the project's answers (`Project`); the instructions
and the icon are files the owner keeps in the package, `instructions.md` and `icon.png`,
read once at start-up. Both are bounded: clients hand the instructions to the model and
the icon (a `data:` URI) rides in every handshake. A file that is too large, not UTF-8 or
not a PNG stops the server with a FatalError that names it; a missing file serves nothing.
"""

from __future__ import annotations

import base64
import struct
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Final

from mcp.types import Icon

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.project import Project
from resilient_mcp.records import record

INSTRUCTIONS_FILE: Final = "instructions.md"
ICON_FILE: Final = "icon.png"
# About 2,000 tokens: the model reads them in every conversation, beside the tools.
MAX_INSTRUCTIONS_BYTES: Final = 8 * 1024
# Base64 adds a third, in every initialize and server/discover answer.
MAX_ICON_BYTES: Final = 16 * 1024
_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


@record
class Identity:
    """The `serverInfo` fields beyond name, title and version, and the instructions."""

    description: str | None = None
    instructions: str | None = None
    website_url: str | None = None
    icons: list[Icon] | None = None


def server_identity(project: Project) -> Identity:
    """The project's identity, its files read from its package; FatalError names a bad file."""
    package = resources.files(project.package)
    return Identity(
        description=project.description or None,
        instructions=read_instructions(package / INSTRUCTIONS_FILE),
        website_url=project.website_url or None,
        icons=read_icons(package / ICON_FILE),
    )


def read_instructions(path: Traversable) -> str | None:
    """The instructions file's text (None when absent or blank), within MAX_INSTRUCTIONS_BYTES."""
    data = _bounded(
        path, MAX_INSTRUCTIONS_BYTES, "shorten it: clients give it to the model in every conversation"
    )
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FatalError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})", "save it as UTF-8"
        ) from None
    return text.strip() or None


def read_icons(path: Traversable) -> list[Icon] | None:
    """The icon file as a `data:` URI icon with its size (None when absent), a bounded PNG."""
    data = _bounded(path, MAX_ICON_BYTES, "use a smaller PNG (64x64 or 128x128 is plenty)")
    if data is None:
        return None
    if not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise FatalError(
            f"{path} is not a PNG image", "replace it with a PNG (MCP bundles accept only PNG icons)"
        )
    width, height = struct.unpack(">II", data[16:24])
    source = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return [Icon(src=source, mime_type="image/png", sizes=[f"{width}x{height}"])]


def _bounded(path: Traversable, limit: int, fix: str) -> bytes | None:
    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FatalError(f"cannot read {path} ({exc.strerror or exc})", "make it readable") from None
    if len(data) > limit:
        raise FatalError(f"{path} is {len(data)} bytes, over the {limit} bytes it may take", fix)
    return data
