"""Rendering the template through copier's Python API, and reading what came out."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import copier
import yaml

from .gitrepo import REPO_ROOT

QUESTIONS: list[str] = [
    name
    for name in yaml.safe_load((REPO_ROOT / "copier.yml").read_text(encoding="utf-8"))
    if not name.startswith("_")
]
TEMPLATE_OWNED_HEADER = "# Template-owned:"
LIBRARY_VERSION: str = tomllib.loads((REPO_ROOT / "runtime" / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"
]["version"]


def library_requirement(backend: str) -> str:
    """What a rendered project depends on: the library at this version, as a compatible release."""
    extra = "[postgres]" if backend == "postgres" else ""
    return f"resilient-mcp{extra}~={LIBRARY_VERSION.rsplit('.', 1)[0]}.0"


# The owner's files: copier update never touches them ({pkg} is the package name).
OWNER_OWNED = (
    "src/{pkg}/tools/*",
    "src/{pkg}/skills/*/*",  # a skill's files; skills/README.md is the template's until edited
    "src/{pkg}/settings.py",
    "tests/tools/*",
    "README.md",
)

# Never part of a rendered tree: made by running the project, not by copier.
NOT_RENDERED = {
    ".git",
    ".venv",
    ".nox",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
}


def render(template: Path, destination: Path, data: Mapping[str, Any], vcs_ref: str) -> Path:
    """`copier copy --defaults` with `data`, trust-free, from the tagged template."""
    copier.run_copy(
        str(template), destination, data=dict(data), defaults=True, vcs_ref=vcs_ref, quiet=True, unsafe=False
    )
    return destination


def update(project: Path, vcs_ref: str) -> None:
    """`copier update --defaults` to `vcs_ref`, trust-free."""
    copier.run_update(project, overwrite=True, defaults=True, vcs_ref=vcs_ref, unsafe=False, quiet=True)


def tree(root: Path) -> dict[str, bytes]:
    """Every rendered file under `root`, by relative POSIX path."""
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if NOT_RENDERED.intersection(relative.parts) or not path.is_file():
            continue
        files[relative.as_posix()] = path.read_bytes()
    return files


def is_owner_owned(relpath: str, package: str) -> bool:
    return any(fnmatchcase(relpath, pattern.format(pkg=package)) for pattern in OWNER_OWNED)


# Jinja's delimiters, matched tightly: Python f-strings (`f"{{x}}"`), dicts,
# `${#array}` in shell and GitHub expressions (`${{ a || b }}`) also contain braces,
# but not a question name, a filter or a statement.
_VARIABLES = "|".join([*QUESTIONS, r"_copier_\w+"])
JINJA_LEFTOVER = re.compile(
    r"\{\{-?\s*(?:" + _VARIABLES + r")\b[^{}\n]*\}\}"
    r"|\{\{[^{}\n]*(?<!\|)\|(?!\|)\s*[a-z_]+[^{}\n]*\}\}"
    r"|\{%-?\s*(?:if|elif|else|endif|for|endfor|set|raw|endraw|macro|endmacro|include|import|with|endwith)\b"
    r"|\{#-?\s(?:(?!#\}).){0,2000}#\}",
    re.DOTALL,
)


def jinja_leftovers(text: str) -> list[str]:
    """The Jinja expressions, statements and comments left in a rendered text."""
    return [match.group(0) for match in JINJA_LEFTOVER.finditer(text)]
