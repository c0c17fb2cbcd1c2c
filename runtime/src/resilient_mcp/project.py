"""Who the served project is: its names, settings prefix and answers, given by the project itself.

A generated project builds one `Project` in its own `project.py` and hands it to the library
(`use_project`, done by its `core` package and its command); every module here reads it at run
time through `this_project()`. Standard library only: `diagnose` reads it without the SDK.
"""

from __future__ import annotations

from importlib import metadata
from typing import Literal

from resilient_mcp.records import record

Backend = Literal["sqlite", "postgres"]


@record
class Project:
    """A served project: fixed by the answers given at `copier copy`."""

    slug: str  # distribution and command name
    package: str  # import name: its `tools` package and `settings.Settings` are the owner's code
    env_prefix: str  # every setting is `<env_prefix><FIELD>`
    display_name: str = ""
    description: str = ""  # served in serverInfo, with the package's instructions.md and icon.png
    website_url: str = ""  # the project's homepage, served in serverInfo (empty: none)
    idempotency_backend: Backend = "sqlite"
    strict_arguments: bool = True
    tool_budget: int = 10  # most tools, and the tools/list bytes they may take
    tool_list_bytes_budget: int = 12000

    def installed_version(self) -> str:
        """The version of the installed distribution (its pyproject.toml's, the one place it is set)."""
        try:
            return metadata.version(self.slug)
        except metadata.PackageNotFoundError:
            return "0+unknown"


_current: Project | None = None


def use_project(project: Project) -> None:
    """Make `project` the one this process serves (a generated project's `core` package does it)."""
    global _current
    _current = project


def this_project() -> Project:
    """The project this process serves; an error that says what to do when none was given."""
    if _current is None:
        raise RuntimeError(
            "no project is set: import your project's `core` package (`from <package>.core import tool`) "
            "or call resilient_mcp.project.use_project(Project(...)) first"
        )
    return _current


def project_if_set() -> Project | None:
    """The project, if one was given (`diagnose` also serves projects it does not belong to)."""
    return _current
