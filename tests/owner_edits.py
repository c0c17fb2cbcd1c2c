"""What an owner does to a generated project, as one function that works on any template version.

Two tools and their tests, a fixture in the owner's conftest, a setting, a README paragraph,
and the edits owners make most in pyproject.toml (a dependency, a lint rule, a mypy override,
a pytest option); the example tool is deleted. Each edit finds its place the way an owner
would, and fails loudly when a template version moved that place.
"""

from __future__ import annotations

import re
from pathlib import Path

from .answers import DEFAULT_ANSWERS

PACKAGE = DEFAULT_ANSWERS["package_name"]
PREFIX = DEFAULT_ANSWERS["env_prefix"]

GREETINGS = '''"""The owner's greeting tool."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..core import tool
from ..settings import Settings


@tool(read_only=True)
def greet(name: Annotated[str, Field(description="Who to greet")]) -> str:
    """Say hello to someone by name."""
    return f"{Settings().greeting}, {name}!"
'''
WEATHER = '''"""The owner's weather tool: it builds URLs with httpx, the dependency the owner added."""

from __future__ import annotations

from typing import Annotated

import httpx
from pydantic import Field

from ..core import tool

FORECAST_API = "https://weather.example.com/forecast"


@tool(read_only=True)
def forecast_url(city: Annotated[str, Field(description="City name, e.g. Lisbon")]) -> str:
    """The address that asks the weather service for a city's forecast."""
    return str(httpx.URL(FORECAST_API, params={"city": city}))


def legacy_city_code(city):  # untyped on purpose: the owner's mypy override allows it
    return city[:3].upper()
'''
CONFTEST = '''"""The owner's fixtures, beside the template's tests/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture
def visitor() -> str:
    return "Ada"
'''
TEST_GREETINGS = f'''"""The owner's tests of the greeting tool and its setting."""

from __future__ import annotations

import pytest

from {PACKAGE}.settings import Settings
from {PACKAGE}.tools.greetings import greet


def test_greet_names_the_visitor(visitor: str) -> None:
    assert greet(visitor) == "Hello, Ada!"


def test_greeting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("{PREFIX}GREETING", "Hi")
    assert Settings().greeting == "Hi"
'''
TEST_WEATHER = f'''"""The owner's tests of the weather tool; `slow` is the marker the owner registered."""

from __future__ import annotations

import pytest

from {PACKAGE}.tools.weather import forecast_url


@pytest.mark.slow
def test_forecast_url_asks_for_the_city() -> None:
    assert forecast_url("Lisbon") == "https://weather.example.com/forecast?city=Lisbon"
'''
SKILL = """---
name: greeting-style
description: Greet visitors warmly with greet. Use when someone arrives.
---

Call `greet` with the visitor's name.
"""
OWNER_FILES = {
    f"src/{PACKAGE}/tools/greetings.py": GREETINGS,
    f"src/{PACKAGE}/skills/greeting-style/SKILL.md": SKILL,
    f"src/{PACKAGE}/tools/weather.py": WEATHER,
    "tests/tools/conftest.py": CONFTEST,
    "tests/tools/test_greetings.py": TEST_GREETINGS,
    "tests/tools/test_weather.py": TEST_WEATHER,
}
DELETED_EXAMPLE = [f"src/{PACKAGE}/tools/example.py", "tests/tools/test_example.py"]
README_PARAGRAPH = "\n## Owner's notes\n\nThis server greets people and finds forecasts.\n"
SETTING = '\n    greeting: str = "Hello"\n'

OWNER_DEPENDENCY = '    "httpx>=0.27",  # the owner\'s dependency\n'
OWNER_RULE = '"N"'
OWNER_MYPY_OVERRIDE = (
    "\n[[tool.mypy.overrides]]\n"
    f'module = ["{PACKAGE}.tools.weather"]\n'
    "disallow_untyped_defs = false  # the owner's legacy helper\n"
)
OWNER_PYTEST_OPTION = 'markers = ["slow: the owner\'s slow tests"]\n'
# The owner's own passing tests, as `pytest -v` names them.
OWNER_TESTS = [
    "tests/tools/test_greetings.py::test_greet_names_the_visitor PASSED",
    "tests/tools/test_greetings.py::test_greeting_comes_from_the_environment PASSED",
    "tests/tools/test_weather.py::test_forecast_url_asks_for_the_city PASSED",
]


def make_it_mine(project: Path) -> None:
    """Apply every owner edit to a freshly generated project."""
    for relpath, text in OWNER_FILES.items():
        (project / relpath).parent.mkdir(parents=True, exist_ok=True)  # skills/<name>/ is new
        (project / relpath).write_text(text, encoding="utf-8")
    for relpath in DELETED_EXAMPLE:
        (project / relpath).unlink()
    append(project / "README.md", README_PARAGRAPH)
    append(project / "src" / PACKAGE / "settings.py", SETTING)
    edit_pyproject(project / "pyproject.toml")


def edit_pyproject(path: Path) -> None:
    """The owner's tool settings, each where the owner would put it."""
    text = path.read_text(encoding="utf-8")
    # A dependency at the end of [project] dependencies.
    text = replace_once(text, r"(?ms)^(dependencies = \[\n.*?)^\]\n", rf"\g<1>{OWNER_DEPENDENCY}]\n")
    # A lint rule added to the selection.
    text = replace_once(text, r"(?m)^(select = \[.*)\]$", rf"\g<1>, {OWNER_RULE}]")
    # A mypy override after the [tool.mypy] table.
    text = replace_once(text, r"(?ms)^(\[tool\.mypy\]\n.*?)\n\n", rf"\g<1>\n{OWNER_MYPY_OVERRIDE}\n")
    # A pytest option at the end of [tool.pytest.ini_options], the file's last table.
    assert text.rstrip().rsplit("\n[", 1)[-1].startswith("tool.pytest.ini_options]"), "pytest is not last"
    path.write_text(text + OWNER_PYTEST_OPTION, encoding="utf-8")


def replace_once(text: str, pattern: str, replacement: str) -> str:
    edited, count = re.subn(pattern, replacement, text, count=1)
    assert count == 1, f"no place for an owner's edit in pyproject.toml: {pattern}"
    return edited


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")
