"""The stand-in project's identity: a generated project's `project.py`, with the backend and the
strictness chosen by the environment, so the suite runs against both answer sets."""

import os
from typing import Final, Literal, cast

from resilient_mcp.project import Project

SLUG: Final = "sample-server"
PACKAGE: Final = "sample_server"
DISPLAY_NAME: Final = "Sample Server"
DESCRIPTION: Final = "An MCP server that does not fail quietly."
WEBSITE_URL: Final = "https://github.com/example/sample-server"
ENV_PREFIX: Final = "SAMPLE_SERVER_"
# SAMPLE_PROJECT_BACKEND=postgres and SAMPLE_PROJECT_STRICT=false give the other answers.
IDEMPOTENCY_BACKEND: Final = cast(
    Literal["sqlite", "postgres"], os.environ.get("SAMPLE_PROJECT_BACKEND", "sqlite")
)
STRICT_ARGUMENTS: Final = os.environ.get("SAMPLE_PROJECT_STRICT", "true") == "true"
TOOL_BUDGET: Final = 10
TOOL_LIST_BYTES_BUDGET: Final = 12000

PROJECT: Final = Project(
    slug=SLUG,
    package=PACKAGE,
    env_prefix=ENV_PREFIX,
    display_name=DISPLAY_NAME,
    description=DESCRIPTION,
    website_url=WEBSITE_URL,
    idempotency_backend=IDEMPOTENCY_BACKEND,
    strict_arguments=STRICT_ARGUMENTS,
    tool_budget=TOOL_BUDGET,
    tool_list_bytes_budget=TOOL_LIST_BYTES_BUDGET,
)


def installed_version() -> str:
    return PROJECT.installed_version()
