"""Git plumbing: the template's work tree as a tagged repository, and project commits."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BASE_TAG = "0.1.0"

# Build and cache folders never belong in a snapshot; uncommitted edits do.
SNAPSHOT_IGNORE = shutil.ignore_patterns(
    ".git",
    ".nox",
    ".venv",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "*.egg-info",
)


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Run git in `cwd`; a failure shows git's own message (or, unchecked, gives empty output)."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        if not check:
            return ""
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}:\n{result.stdout}{result.stderr}")
    return result.stdout


def init_and_commit(repo: Path, message: str, *, force: bool = False) -> None:
    """`git init` (if needed) and commit everything in `repo`."""
    if not (repo / ".git").exists():
        git(repo, "init", "--quiet")
    commit_all(repo, message, force=force)


def commit_all(repo: Path, message: str, *, force: bool = False) -> None:
    """Stage every change (ignored files too when `force`) and commit it."""
    git(repo, "add", "--all", *(["--force"] if force else []), ".")
    git(repo, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", message)


@dataclass(frozen=True)
class TemplateRepo:
    """A committed copy of the template with version tags, so copier renders from real refs."""

    path: Path

    @classmethod
    def snapshot(cls, destination: Path) -> TemplateRepo:
        """Copy the work tree (uncommitted edits included), commit it and tag `BASE_TAG`."""
        shutil.copytree(REPO_ROOT, destination, ignore=SNAPSHOT_IGNORE)
        # --force: the template's own .gitignore must not hide template files from the commit.
        init_and_commit(destination, "Template snapshot", force=True)
        git(destination, "tag", BASE_TAG)
        return cls(destination.resolve())
