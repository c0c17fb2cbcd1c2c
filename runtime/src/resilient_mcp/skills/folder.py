"""Where the owner's skills are, found without loading the catalog: a project with no skill
(the template ships skills/ with only its README.md) serves without the skills modules."""

from __future__ import annotations

from pathlib import Path

from resilient_mcp.authoring.errors import FatalError

NOT_SKILLS = {"__pycache__"}  # what Python or an editor may leave beside the skills


def skills_folder(tools_package_file: str | None) -> Path | None:
    """The skills/ folder beside the owner's tools/ package (`src/<package>/skills`), if any."""
    if tools_package_file is None:
        return None
    return Path(tools_package_file).resolve().parent.parent / "skills"


def skill_folders(folder: Path | None) -> list[Path]:
    """The folders in `folder` that are skills (none when there is no such folder), sorted."""
    if folder is None or not folder.exists():
        return []
    if not folder.is_dir():
        raise FatalError(f"{folder} is not a folder", "make skills/ a folder with one folder per skill")
    return sorted(
        entry
        for entry in folder.iterdir()
        if not entry.name.startswith(".")
        and entry.name not in NOT_SKILLS
        and entry.is_dir()  # a linked folder too: refused when the catalog loads it
    )
