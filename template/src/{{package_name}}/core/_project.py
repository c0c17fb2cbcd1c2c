# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Who this project is, for the core's modules: defined in `<package>.project`.

That module sits outside `core/` so that commands which must not load the SDK
(`--help`, `--version`, `client-config`, `diagnose`) can read it without running
this package's `__init__`, which imports the public API and with it the SDK.
"""

from ..project import (
    DESCRIPTION,
    DISPLAY_NAME,
    ENV_PREFIX,
    IDEMPOTENCY_BACKEND,
    PACKAGE,
    SLUG,
    STRICT_ARGUMENTS,
    TOOL_BUDGET,
    TOOL_LIST_BYTES_BUDGET,
    installed_version,
)

__all__ = [
    "DESCRIPTION",
    "DISPLAY_NAME",
    "ENV_PREFIX",
    "IDEMPOTENCY_BACKEND",
    "PACKAGE",
    "SLUG",
    "STRICT_ARGUMENTS",
    "TOOL_BUDGET",
    "TOOL_LIST_BYTES_BUDGET",
    "installed_version",
]
