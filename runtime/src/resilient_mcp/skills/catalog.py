"""The owner's skills/ folder, read once at start-up: every skill checked, every file hashed.

One folder per skill, named as its `SKILL.md` frontmatter `name` (the Agent Skills naming
rules), holding `SKILL.md` and any other files in any subfolders. Anything wrong (no
frontmatter, a name that is not its folder's, no description, a symlink, a file over
`MAX_FILE_BYTES`, a skill over `MAX_SKILL_FILES` or `MAX_SKILL_BYTES`, a `SKILL.md` in a
subfolder) is a `FatalError` naming the file and what to fix: the server does not start.
Files at the top of skills/ (its README.md) and hidden entries are not skills.

Each file is served at `skill://<name>/<path>` with the SHA-256 digest and size of its bytes
as read here; `read_verified` reads it again for a client and refuses bytes that changed.
Only the files found here are served, by their resolved path inside the skill's folder.
"""

from __future__ import annotations

import hashlib
import math
import mimetypes
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.records import record
from resilient_mcp.skills.folder import NOT_SKILLS, skill_folders
from resilient_mcp.skills.frontmatter import FrontmatterError, parse_frontmatter

SCHEME = "skill://"
MANIFEST = "SKILL.md"
MANIFEST_MIME_TYPE = "text/markdown"
DIRECTORY_MIME_TYPE = "inode/directory"
MAX_FILE_BYTES = 1024 * 1024  # one file: skills are instructions and small references
MAX_SKILL_BYTES = 16 * 1024 * 1024  # SEP-2640: a server SHOULD NOT serve a larger skill
MAX_SKILL_FILES = 512  # SEP-2640: nor one with more files
MAX_DESCRIPTION_CHARS = 1024  # the Agent Skills limit
# The Agent Skills naming rules: 1-64 lowercase letters, digits and hyphens; no leading,
# trailing or doubled hyphen.
NAME = re.compile(r"^(?!.*--)[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
_FRONTMATTER = re.compile(r"^---\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|$)", re.DOTALL)
_RESERVED_METADATA = "io.modelcontextprotocol/"


@record
class SkillFile:
    """One file of a skill, as served: its URI, where it is, and the bytes it had at start-up."""

    uri: str
    path: Path  # resolved, inside the skill's folder
    size: int
    digest: str  # sha256:<64 lowercase hex>
    mime_type: str

    def manifest_entry(self) -> dict[str, Any]:
        return {"uri": self.uri, "digest": self.digest, "size": self.size}


@record
class Skill:
    """One skill: its frontmatter verbatim (as JSON), its files with SKILL.md first."""

    name: str
    frontmatter: dict[str, Any]
    files: tuple[SkillFile, ...]

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.name}/{MANIFEST}"

    @property
    def description(self) -> str:
        return str(self.frontmatter["description"])

    def entry(self) -> dict[str, Any]:
        """The skill entry of skills/list and skills/get."""
        return {
            "uri": self.uri,
            "frontmatter": self.frontmatter,
            "resources": [file.manifest_entry() for file in self.files],
        }


@record
class SkillCatalog:
    """Every skill served, and every file and directory of theirs by URI."""

    skills: tuple[Skill, ...] = ()
    files: Mapping[str, SkillFile] = field(default_factory=dict)
    # A directory's URI (`skill://<name>`, `skill://<name>/<dir>`) -> its direct children.
    directories: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    def skill(self, uri: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.uri == uri), None)

    def directory(self, uri: str) -> tuple[dict[str, Any], ...] | None:
        return self.directories.get(uri.rstrip("/"))


def load_catalog(folder: Path | None) -> SkillCatalog:
    """Every skill in `folder`; an empty catalog when there is no folder or no skill in it."""
    return catalog_of(skill_folders(folder))


def catalog_of(found: Sequence[Path]) -> SkillCatalog:
    """Every skill of these skill folders (`skill_folders` found them), checked and hashed."""
    if not found:
        return SkillCatalog()
    skills = tuple(_load_skill(entry) for entry in found)
    files = {file.uri: file for skill in skills for file in skill.files}
    return SkillCatalog(skills, files, _directories(skills))


def _load_skill(folder: Path) -> Skill:
    if folder.is_symlink():
        raise FatalError(f"skill folder {folder} is a symlink", "put the skill's folder itself in skills/")
    name = folder.name
    if not NAME.match(name):
        raise FatalError(
            f"skill folder {folder} is not a valid skill name",
            "use 1-64 lowercase letters, digits and single hyphens, not at either end (e.g. pdf-processing)",
        )
    manifest = folder / MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        raise FatalError(
            f"skill folder {folder} has no {MANIFEST}", f"add {manifest} with name and description"
        )
    root = folder.resolve()
    frontmatter = _frontmatter(manifest, _read_bounded(manifest, root), name)
    files: list[SkillFile] = []
    total = 0
    for path in _files(folder):
        relative = path.relative_to(folder).as_posix()
        if relative != MANIFEST and path.name == MANIFEST:
            raise FatalError(
                f"{path} is a {MANIFEST} inside skill {name!r}",
                "skills do not nest: move that folder to skills/ as a skill of its own",
            )
        data = _read_bounded(path, root)
        total += len(data)
        if len(files) >= MAX_SKILL_FILES or total > MAX_SKILL_BYTES:
            raise FatalError(
                f"skill {name!r} ({folder}) has more than {MAX_SKILL_FILES} files or "
                f"{MAX_SKILL_BYTES // (1024 * 1024)} MiB",
                "split it into smaller skills, or serve large data from a tool or resource",
            )
        files.append(
            SkillFile(
                uri=f"{SCHEME}{name}/{quote(relative, safe='/')}",  # a space or `#` percent-encoded
                path=path.resolve(),
                size=len(data),
                digest=digest_of(data),
                mime_type=_mime_type(relative, data),
            )
        )
    files.sort(key=lambda file: (file.uri != f"{SCHEME}{name}/{MANIFEST}", file.uri))
    return Skill(name=name, frontmatter=frontmatter, files=tuple(files))


def _files(folder: Path) -> Iterator[Path]:
    """Every regular file under `folder`, hidden ones left out; a symlink anywhere is refused."""
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name in NOT_SKILLS:
            continue
        if entry.is_symlink():
            raise FatalError(
                f"{entry} is a symlink", "put the file itself in the skill's folder: links are not served"
            )
        if entry.is_dir():
            yield from _files(entry)
        elif entry.is_file():
            yield entry


def _read_bounded(path: Path, root: Path) -> bytes:
    """The file's bytes, at most MAX_FILE_BYTES, from inside `root` only."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise FatalError(f"{path} is outside its skill's folder", "keep every file of a skill in its folder")
    with resolved.open("rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise FatalError(
            f"{path} is larger than {MAX_FILE_BYTES // 1024} KiB, the most a skill file may be",
            "shorten it or split it into files the SKILL.md points to",
        )
    return data


def _frontmatter(path: Path, data: bytes, name: str) -> dict[str, Any]:
    """The YAML frontmatter of SKILL.md as JSON values; a FatalError saying what to fix."""
    fix = "begin it with ---, then name: and description: lines, then --- (see skills/README.md)"
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise FatalError(f"{path} is not UTF-8 text", "save it as UTF-8") from None
    found = _FRONTMATTER.match(text)
    if found is None:
        raise FatalError(f"{path} has no YAML frontmatter", fix)
    parsed = _parse_yaml(found.group(1), path)
    if not isinstance(parsed, dict):
        raise FatalError(f"{path}: its frontmatter is not a set of name: value lines", fix)
    if not _json_like(parsed):
        raise FatalError(
            f"{path}: frontmatter holds a value JSON cannot carry",
            "use text, numbers, true/false, lists and name: value maps with text names only",
        )
    if parsed.get("name") != name:
        raise FatalError(
            f"{path}: frontmatter name {parsed.get('name')!r} is not its folder's name {name!r}",
            f"set name: {name} (or rename the folder)",
        )
    description = parsed.get("description")
    if not isinstance(description, str) or not description.strip():
        raise FatalError(
            f"{path}: frontmatter has no description",
            "add description: what the skill does and when to use it (the model reads it to choose)",
        )
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise FatalError(
            f"{path}: description is {len(description)} characters, over {MAX_DESCRIPTION_CHARS}",
            "shorten it; put the details in the body of SKILL.md",
        )
    metadata = parsed.get("metadata")
    if isinstance(metadata, dict) and any(str(key).startswith(_RESERVED_METADATA) for key in metadata):
        raise FatalError(
            f"{path}: metadata keys starting {_RESERVED_METADATA} are reserved for MCP extensions",
            "rename those keys",
        )
    return parsed


def _json_like(value: object) -> bool:
    """Whether the value is sent as it is written: JSON has no bytes, sets, infinity or non-text keys."""
    if isinstance(value, dict):
        return all(isinstance(key, str) and _json_like(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_json_like(item) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int)


def _parse_yaml(text: str, path: Path) -> object:
    try:
        return parse_frontmatter(text)
    except FrontmatterError as exc:
        line = f" (line {exc.line + 1})" if exc.line is not None else ""  # the file's: after its ---
        raise FatalError(
            f"{path}: frontmatter is not valid YAML{line}: {exc.problem}",
            'fix it, quoting values that hold a colon (description: "...")',
        ) from None


def _mime_type(relative: str, data: bytes) -> str:
    if relative == MANIFEST or relative.endswith(".md"):
        return MANIFEST_MIME_TYPE
    guessed, _ = mimetypes.guess_type(relative, strict=False)
    if guessed is not None:
        return guessed
    return "text/plain" if is_text(data) else "application/octet-stream"


def is_text(data: bytes) -> bool:
    """Sent as `text` (UTF-8) rather than a base64 `blob`: the same bytes, either way."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _directories(skills: tuple[Skill, ...]) -> dict[str, tuple[dict[str, Any], ...]]:
    """Each directory of each skill -> its direct children: files, then subdirectories."""
    children: dict[str, dict[str, dict[str, Any]]] = {}
    for skill in skills:
        base = f"{SCHEME}{skill.name}"
        children.setdefault(base, {})
        for file in skill.files:
            parts = file.uri.removeprefix(base + "/").split("/")
            parent = base
            for part in parts[:-1]:  # every folder on the way is a child of the one above
                here = f"{parent}/{part}"
                children.setdefault(parent, {})[here] = {
                    "uri": here,
                    "name": unquote(part),
                    "mimeType": DIRECTORY_MIME_TYPE,
                }
                children.setdefault(here, {})
                parent = here
            children[parent][file.uri] = {
                "uri": file.uri,
                "name": unquote(parts[-1]),
                "mimeType": file.mime_type,
                "size": file.size,
            }
    return {uri: tuple(entries[key] for key in sorted(entries)) for uri, entries in children.items()}


def read_verified(file: SkillFile) -> bytes:
    """The file's bytes for a client, only if they are the ones its digest and size describe.

    Opened without following a symlink put in its place since start-up.
    """
    descriptor = os.open(file.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as opened:
        data = opened.read(file.size + 1)
    if len(data) != file.size or digest_of(data) != file.digest:
        raise RuntimeError(
            f"skill file {file.path} changed since the server started; restart it to serve the new content"
        )
    return data
