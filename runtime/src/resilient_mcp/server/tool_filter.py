"""Which tools a deployment declares: `READ_ONLY`, `TOOLS_ALLOW`, `TOOLS_DENY`.

health_check is always declared. A pattern that matches no tool is a start-up error: a
typo in a deny list would otherwise leave the tool it meant to hide in service.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.project import this_project


def declared_tools(specs: list[ToolSpec], settings: CoreSettings, *, always: str) -> list[ToolSpec]:
    """The specs to serve, in their order; `always` (health_check) is never filtered out."""
    names = [spec.name for spec in specs]
    _check_patterns("TOOLS_ALLOW", settings.tools_allow, names)
    _check_patterns("TOOLS_DENY", settings.tools_deny, names)

    def keep(spec: ToolSpec) -> bool:
        if spec.name == always:
            return True
        if settings.read_only and not spec.read_only:
            return False
        if settings.tools_allow and not _matches(spec.name, settings.tools_allow):
            return False
        return not _matches(spec.name, settings.tools_deny)

    return [spec for spec in specs if keep(spec)]


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def _check_patterns(setting: str, patterns: list[str], names: list[str]) -> None:
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in names):
            variable = f"{this_project().env_prefix}{setting}"
            raise FatalError(
                f"{variable} pattern {pattern!r} matches no tool (declared: {', '.join(names)})",
                f"fix or remove it in {variable} (comma-separated names or globs like 'notes_*')",
            )
