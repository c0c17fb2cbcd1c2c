"""`current_settings()`: the settings the server was built with, for tools and dependency checks.

Set by `create_server`, so a tool reads what the server validated at start-up instead of
reading the environment again on every call (`Settings()` would, and could see other values).
Not named `settings()`: `core.settings` is the module kept for code written against 0.2, and
importing it would replace a function of that name on the package.
"""

from __future__ import annotations

from typing import TypeVar, overload

from resilient_mcp.authoring.settings import CoreSettings

SettingsT = TypeVar("SettingsT", bound=CoreSettings)

_built_with: CoreSettings | None = None


def use_settings(settings: CoreSettings) -> None:
    """Make `settings` what `current_settings()` answers: the server being built."""
    global _built_with
    _built_with = settings


@overload
def current_settings() -> CoreSettings: ...
@overload
def current_settings(kind: type[SettingsT]) -> SettingsT: ...
def current_settings(kind: type[CoreSettings] = CoreSettings) -> CoreSettings:
    """The server's settings, typed as `kind`: `current_settings(Settings).weather_api_url` in a tool.

    Raises RuntimeError before a server is built (at import time, say: read it inside the
    tool), and TypeError if the server was built with settings of another class.
    """
    if _built_with is None:
        raise RuntimeError("current_settings() answers once the server is built: call it inside the tool")
    if not isinstance(_built_with, kind):
        raise TypeError(f"the server was built with {type(_built_with).__name__}, not {kind.__name__}")
    return _built_with
