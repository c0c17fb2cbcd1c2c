"""The generated project's tool configuration: pinned versions, and owners' rules on owners' code.

Ruff, pre-commit and the template's own tests use the versions in dev-tools.txt; a rule set an
owner adds never fails on a file the template owns; pre-commit refuses what copier update
leaves behind when it needs a hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from .answers import DEFAULT_ANSWERS
from .gitrepo import REPO_ROOT, init_and_commit
from .rendering import is_owner_owned, tree

RenderedProject = Callable[[str], Path]
PACKAGE = DEFAULT_ANSWERS["package_name"]
PINS = dict(
    re.findall(
        r"^([A-Za-z0-9_.-]+)==(\S+)$", (REPO_ROOT / "template" / "dev-tools.txt").read_text(), re.MULTILINE
    )
)


def ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def ruff_json(*args: str) -> Any:
    return json.loads(ruff(*args, "--output-format", "json", cwd=REPO_ROOT).stdout)


def lint_tables(project: Path) -> tuple[Any, Any]:
    """[tool.ruff.lint] of pyproject.toml (the owner's) and [lint] of ruff.toml (the template's)."""
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    template = tomllib.loads((project / "ruff.toml").read_text(encoding="utf-8"))
    return pyproject["tool"]["ruff"]["lint"], template["lint"]


def test_this_repository_tests_with_the_pinned_tool_versions() -> None:
    """The template's tests run the pinned ruff over rendered projects, and pre-commit's hooks."""
    tested = ("ruff", "pre-commit-hooks")
    assert {tool: version(tool) for tool in tested} == {tool: PINS[tool] for tool in tested}


def test_uv_sync_installs_the_dev_extra_and_the_pinned_tools(rendered_project: RenderedProject) -> None:
    """`uv sync` (the dev group, uv's default) gives what `pip install -e '.[dev]' -r dev-tools.txt` gives."""
    pyproject = tomllib.loads((rendered_project("defaults") / "pyproject.toml").read_text(encoding="utf-8"))
    slug = DEFAULT_ANSWERS["project_slug"]

    assert pyproject["dependency-groups"]["dev"] == [f"{slug}[dev]", *(f"{t}=={v}" for t, v in PINS.items())]
    assert any(
        requirement.startswith("uv") for requirement in pyproject["project"]["optional-dependencies"]["dev"]
    )


def test_every_ruff_rule_the_project_selects_is_known_to_the_pinned_ruff(
    rendered_project: RenderedProject,
) -> None:
    owners, template = lint_tables(rendered_project("defaults"))
    # Some preview rules have no code yet.
    codes = [rule["code"] for rule in ruff_json("rule", "--all") if rule["code"]]
    selectors = [*owners["select"], *owners["ignore"]]
    for table in (owners["per-file-ignores"], template["extend-per-file-ignores"]):
        selectors += [selector for listed in table.values() for selector in listed]

    unknown = sorted(
        {selector for selector in selectors if not any(code.startswith(selector) for code in codes)}
    )
    assert unknown == [], f"ruff {version('ruff')} knows no rule {unknown}"


def test_template_files_are_kept_off_every_linter_the_template_does_not_select(
    rendered_project: RenderedProject,
) -> None:
    owners, template = lint_tables(rendered_project("defaults"))
    linters = ruff_json("linter")
    prefixes = {linter["prefix"] for linter in linters if linter["prefix"]}
    # pycodestyle has no prefix of its own: its categories are E and W.
    prefixes |= {
        category["prefix"] for linter in linters if not linter["prefix"] for category in linter["categories"]
    }
    (ignored,) = template["extend-per-file-ignores"].values()

    expected = prefixes - set(owners["select"])
    assert (sorted(expected - set(ignored)), sorted(set(ignored) - expected)) == ([], []), "missing, extra"


def test_a_rule_set_the_owner_adds_checks_only_the_owner_code(
    rendered_project: RenderedProject, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    shutil.copytree(rendered_project("defaults"), project)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        re.sub(r"(?m)^(select = \[.*)\]$", r'\1, "ALL"]', pyproject.read_text(encoding="utf-8")),
        encoding="utf-8",
    )
    owner_tool = project / "src" / PACKAGE / "tools" / "BadNames.py"
    owner_tool.write_text("def GetWeather():\n    pass\n", encoding="utf-8")
    template_owned = [
        relpath
        for relpath in tree(project)
        if relpath.endswith(".py") and not is_owner_owned(relpath, PACKAGE)
    ]

    on_template = ruff("check", "--no-cache", *template_owned, cwd=project)
    on_owner = ruff("check", "--no-cache", "--output-format", "concise", str(owner_tool), cwd=project)

    assert on_template.returncode == 0, on_template.stdout
    assert on_owner.returncode == 1
    for code in ("N802", "N999", "D103", "ANN201"):  # naming, docstrings, annotations
        assert code in on_owner.stdout, on_owner.stdout


def test_pre_commit_runs_only_tools_installed_beside_the_project(rendered_project: RenderedProject) -> None:
    config = yaml.safe_load(
        (rendered_project("defaults") / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    )

    assert [repo["repo"] for repo in config["repos"]] == ["local"], (
        "a hook with its own rev drifts from the pins"
    )


@pytest.mark.parametrize(
    ("hook", "relpath", "content", "says"),
    [
        ("check-merge-conflict", f"src/{PACKAGE}/cli.py", None, "Merge conflict string '<<<<<<<'"),
        ("no-rej-files", "pyproject.toml.rej", "diff a/pyproject.toml\n", "copier update left .rej files"),
    ],
    ids=["conflict-markers", "rej-file"],
)
def test_pre_commit_refuses_what_copier_update_leaves_for_a_hand(
    rendered_project: RenderedProject, tmp_path: Path, hook: str, relpath: str, content: str | None, says: str
) -> None:
    project = tmp_path / "project"
    shutil.copytree(rendered_project("defaults"), project)
    init_and_commit(project, "Project")
    target = project / relpath
    if content is None:  # copier's inline conflict, outside any git merge
        original = target.read_text(encoding="utf-8")
        content = f"<<<<<<< before updating\n{original}=======\n{original}>>>>>>> after updating\n"
    target.write_text(content, encoding="utf-8")
    subprocess.run(["git", "add", "--force", relpath], cwd=project, check=True)
    # The hooks run tools installed beside pre-commit, as in the project's own environment.
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"

    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", hook, "--files", relpath],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert result.returncode == 1, result.stdout + result.stderr
    assert says in result.stdout, result.stdout


# An owner's module as first typed: imports out of order, a call past the line length.
UNFORMATTED = '''"""Typed in a hurry."""

import sys
import os


def where() -> str:
    """Where this runs."""
    return "-".join([os.sep, sys.platform, WORDS])
'''.replace("WORDS", ", ".join(['"a-long-enough-literal"'] * 4))


def owner_module_in_a_copy(rendered_project: RenderedProject, tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "project"
    shutil.copytree(rendered_project("defaults"), project)
    module = project / "src" / PACKAGE / "tools" / "typed_in_a_hurry.py"
    module.write_text(UNFORMATTED, encoding="utf-8")
    return project, module


def tools_on_path() -> dict[str, str]:
    """This environment's pinned ruff and pre-commit-hooks first on the PATH, as in the project's venv."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def assert_lint_clean(module: Path, project: Path) -> None:
    assert module.read_text(encoding="utf-8") != UNFORMATTED
    for check in (["check"], ["format", "--check"]):
        checked = ruff(*check, str(module), cwd=project)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_nox_fmt_fixes_and_formats_what_lint_would_fail_on(
    rendered_project: RenderedProject, tmp_path: Path
) -> None:
    project, module = owner_module_in_a_copy(rendered_project, tmp_path)
    assert ruff("check", str(module), cwd=project).returncode == 1

    # The session itself, with the tools of this environment instead of a venv of its own.
    formatted = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "fmt", "--no-venv", "--no-install", "--", str(module)],
        cwd=project,
        env=tools_on_path(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    assert_lint_clean(module, project)


def test_the_pre_commit_hooks_fix_and_format_a_module(
    rendered_project: RenderedProject, tmp_path: Path
) -> None:
    project, module = owner_module_in_a_copy(rendered_project, tmp_path)
    init_and_commit(project, "Project")
    relpath = str(module.relative_to(project))
    env = {**tools_on_path(), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit")}

    for hook in ("ruff", "ruff-format"):
        fixed = subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", hook, "--files", relpath],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert "files were modified by this hook" in fixed.stdout, fixed.stdout

    assert_lint_clean(module, project)
