"""The answers the tests render with: one shared default set, and named variations of it.

Plain data, so noxfile.py loads this file too. DEFAULT_ANSWERS equals copier.yml's
defaults (test_questions.py checks it); a test overrides only what it is about.
"""

from __future__ import annotations

from typing import Any

DEFAULT_ANSWERS: dict[str, Any] = {
    "project_name": "Example Tools",
    "project_slug": "example-tools",
    "package_name": "example_tools",
    "description": "An MCP server that does not fail quietly.",
    "author_name": "Example Author",
    "author_email": "author@example.com",
    "repository_url": "https://github.com/example-author/example-tools",
    "public_url": "",
    "license": "MIT",
    "python_version": "3.11",
    "env_prefix": "EXAMPLE_TOOLS_",
    "tool_budget": 10,
    "idempotency_backend": "sqlite",
    "strict_arguments": True,
}

# Together: both idempotency backends, strict arguments on and off, every supported
# Python version, every license, and names other than the defaults.
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "postgres-strictoff-py313": {
        "idempotency_backend": "postgres",
        "strict_arguments": False,
        "python_version": "3.13",
    },
    "apache-budget1-py312": {
        "license": "Apache-2.0",
        "tool_budget": 1,
        "python_version": "3.12",
        "repository_url": "",
    },
    "bsd-weather-names": {
        "license": "BSD-3-Clause",
        "project_name": "Weather Tools",
        "project_slug": "weather-tools",
        "package_name": "weather_tools",
        "env_prefix": "WX_",
        "description": 'Forecasts for "any" city, {braces} included.',
        "author_name": "Zoë O'Brien",
        "repository_url": "https://github.com/zoe-obrien/weather-tools",
        "public_url": "https://weather.example.org/mcp",
    },
    "proprietary-postgres": {"license": "Proprietary", "idempotency_backend": "postgres"},
}


def answers(**overrides: Any) -> dict[str, Any]:
    """The shared default answers with this test's changes."""
    return {**DEFAULT_ANSWERS, **overrides}
