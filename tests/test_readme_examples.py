"""The generated README's examples: the "Add a tool" snippet passes the project's own checks when
pasted into a tools module, no example tool is named like a tool the core's tests declare, and the
client-config commands run as written."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from .answers import MATRIX, answers
from .gitrepo import REPO_ROOT
from .project_env import ProjectEnv, run
from .readme_walk import BASH_BLOCK

TEMPLATE = REPO_ROOT / "template"
# An entry whose environment the generated tests create anyway, with a package name of its own.
ENTRY = "bsd-weather-names"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(readme: str) -> list[str]:
    return PYTHON_BLOCK.findall(readme)


def section_snippets(readme: str, heading: str) -> list[str]:
    section = readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return python_blocks(section)


def section_snippet(readme: str, heading: str) -> str:
    """The section's example: its first Python block (a second one is that example's test)."""
    return section_snippets(readme, heading)[0]


def example_tool_names(readme: str) -> set[str]:
    return {
        name
        for block in python_blocks(readme)
        for name in re.findall(r"@tool.*\n(?:async )?def (\w+)", block)
    }


def test_the_readme_examples_have_tools_with_names_no_core_test_declares() -> None:
    names = example_tool_names((TEMPLATE / "README.md.jinja").read_text(encoding="utf-8"))
    assert "parcel_quote" in names
    # An owner who pastes an example keeps it: a core test declaring the same name would then fail.
    for path in sorted((TEMPLATE / "tests").rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            for name in names:
                assert not re.search(rf"\b{name}\b", text), f"{name} from README.md is used in {path}"


@pytest.mark.generated
@pytest.mark.parametrize("heading", ["Add a tool", "Add a resource, a prompt, a completion"])
def test_the_readme_snippets_pass_ruff_and_mypy_in_a_tools_module(
    project_env: Callable[[str], ProjectEnv], tmp_path: Path, heading: str
) -> None:
    env = project_env(ENTRY)
    package = answers(**MATRIX[ENTRY])["package_name"]
    snippet = section_snippet((env.project / "README.md").read_text(encoding="utf-8"), heading)
    # A copy: the rendered project is shared by other tests, which import every module in tools/.
    project = tmp_path / "project"
    shutil.copytree(env.project, project, ignore=shutil.ignore_patterns(".venv", ".git", ".mypy_cache"))
    module = project / "src" / package / "tools" / "readme_example.py"
    module.write_text(f'"""The README\'s example."""\n\n{snippet}', encoding="utf-8")
    copy = ProjectEnv(project, env.venv)
    copy.run("ruff", "check", str(module))
    copy.run("ruff", "format", "--check", str(module))
    copy.run("mypy", "--strict", str(module))


@pytest.mark.generated
def test_the_readme_client_config_commands_run_as_written(
    project_env: Callable[[str], ProjectEnv], tmp_path: Path
) -> None:
    env = project_env(ENTRY)
    readme = (env.project / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Plug it into an MCP client\n", 1)[1].split("\n## ", 1)[0]
    commands = [line for block in BASH_BLOCK.findall(section) for line in block.splitlines() if line.strip()]
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    # Every client's file under this test's directory; a Claude Desktop file someone already uses.
    environ = {**env.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    desktop = home / ".config" / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir(parents=True)
    desktop.write_text('{"mcpServers": {"other": {"command": "other"}}, "theme": "dark"}', encoding="utf-8")

    for command in commands:
        run(["bash", "-c", command], work, env=environ, timeout=120)

    installed = json.loads(desktop.read_text(encoding="utf-8"))
    assert installed["theme"] == "dark"
    assert list(installed["mcpServers"]) == ["other", "weather-tools"]
    assert desktop.with_name(desktop.name + ".bak").exists()
    assert "weather-tools" in json.loads((work / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    generic = home / ".codeium" / "windsurf" / "mcp_config.json"
    assert "weather-tools" in json.loads(generic.read_text(encoding="utf-8"))["mcpServers"]


@pytest.mark.generated
@pytest.mark.parametrize(
    ("heading", "module", "selected"),
    [("Add a tool", "parcels", "parcel"), ("Long work: tasks", "primes", "primes")],
)
def test_a_readme_example_passes_the_test_the_readme_gives_it(
    project_env: Callable[[str], ProjectEnv], tmp_path: Path, heading: str, module: str, selected: str
) -> None:
    """The section's tool in tools/, its test in tests/tools/: ruff, mypy --strict and the test pass."""
    env = project_env(ENTRY)
    package = answers(**MATRIX[ENTRY])["package_name"]
    tool, test = section_snippets((env.project / "README.md").read_text(encoding="utf-8"), heading)
    project = tmp_path / "project"
    shutil.copytree(env.project, project, ignore=shutil.ignore_patterns(".venv", ".git", ".mypy_cache"))
    (project / "src" / package / "tools" / f"{module}.py").write_text(
        f'"""The README\'s example."""\n\n{tool}', encoding="utf-8"
    )
    test_file = project / "tests" / "tools" / f"test_{module}.py"
    test_file.write_text(f'"""The README\'s example\'s tests."""\n\n{test}', encoding="utf-8")
    copy = ProjectEnv(project, env.venv)
    copy.run("ruff", "check", str(test_file))
    copy.run("ruff", "format", "--check", str(test_file))
    copy.run("mypy", "--strict", str(test_file))
    # The copy's package first on the path: the venv's editable install points at the original.
    environ = {**copy.environ, "PYTHONPATH": str(project / "src")}
    passed = run(
        [str(env.venv / "bin" / "python"), "-m", "pytest", "-q", "-k", selected], project, env=environ
    )
    assert "2 passed" in passed
