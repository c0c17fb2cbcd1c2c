"""Rendering every MATRIX entry: clean output, recorded answers, lint, types, own tests."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from .answers import MATRIX, answers
from .gitrepo import BASE_TAG, REPO_ROOT, TemplateRepo
from .project_env import SUITE_TIMEOUT_S, ProjectEnv, project_nox, quick_start_environ, run
from .rendering import (
    TEMPLATE_OWNED_HEADER,
    is_owner_owned,
    jinja_leftovers,
    library_requirement,
    render,
    tree,
)

ENTRIES = list(MATRIX)
# Entries whose project also runs its own `nox` (its default sessions). The sqlite one is the
# default answers' project updated from a release, with an owner's edits (test_update.py).
OWN_NOX_ENTRIES = ["proprietary-postgres"]
# The default answers' checks run there, so that each runs once per answer set.
RUN_ON_UPDATE = "defaults"
# The others get mypy and their own tests (the owner's and the smoke suite) run directly. The
# core's whole suite is the runtime library's, run in this repository (runtime/tests).
DIRECT_ENTRIES = [entry for entry in ENTRIES if entry not in [*OWN_NOX_ENTRIES, RUN_ON_UPDATE]]
# A new project is the owner's code and its scaffolding: the core lives in the library.
MOST_FILES = 80
# What would make a generated project install only beside this checkout: a path, a git URL, a
# direct URL reference (`name @ url`), a local index or find-links, uv sources.
NOT_FROM_AN_INDEX = re.compile(
    r"git\+[a-z]+://|file://|\[tool\.uv\.sources\]|\{\s*path\s*=|--find-links|find-links\s*=|"
    r"\bUV_FIND_LINKS\b|\bPIP_FIND_LINKS\b|^\s*-e\s+\.\.|\s@\s*(https?|git|file|ssh)[:+]",
    re.MULTILINE,
)
# A rendered test that hangs gets its stack dumped after this long, so the report shows where.
HANG_REPORT = ["-o", "faulthandler_timeout=120"]
RenderedProject = Callable[[str], Path]

LICENSE_FIRST_WORDS = {
    "MIT": "MIT License",
    "Apache-2.0": "Apache License",
    "BSD-3-Clause": "BSD 3-Clause License",
}


def text_files(project: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    for relpath, content in tree(project).items():
        try:
            texts[relpath] = content.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary: nothing Jinja could have left in it
    return texts


def test_leftover_detector_flags_jinja_but_not_python_braces() -> None:
    assert jinja_leftovers("name = '{{ package_name }}'") == ["{{ package_name }}"]
    assert jinja_leftovers("x = '{{ project_slug | upper }}'") == ["{{ project_slug | upper }}"]
    assert jinja_leftovers("{%- if license != 'MIT' %}") == ["{%- if"]
    assert jinja_leftovers("{# a note\n for later #}") == ["{# a note\n for later #}"]
    python = 'f"{{literal}} {value}"\nd = {"a": {"b": 1}}\necho "${#items[@]}"\nf"{{{x}}}"\n'
    workflow = "token: ${{ secrets.TOKEN || github.token }}\ntags: type=semver,pattern={{version}}\n"
    assert jinja_leftovers(python) == []
    assert jinja_leftovers(workflow) == []


@pytest.mark.parametrize("entry", ENTRIES)
def test_no_jinja_is_left_in_names_or_text(rendered_project: RenderedProject, entry: str) -> None:
    project = rendered_project(entry)

    leftovers = {
        relpath: found for relpath, text in text_files(project).items() if (found := jinja_leftovers(text))
    }
    odd_names = [relpath for relpath in tree(project) if relpath.endswith(".jinja") or "{" in relpath]

    assert leftovers == {}, f"unrendered Jinja: {leftovers}"
    assert odd_names == [], f"unrendered file names: {odd_names}"


@pytest.mark.parametrize("entry", ENTRIES)
def test_answers_file_records_the_answers(
    template_repo: TemplateRepo, rendered_project: RenderedProject, entry: str
) -> None:
    recorded = yaml.safe_load((rendered_project(entry) / ".copier-answers.yml").read_text(encoding="utf-8"))

    assert {name: recorded.get(name) for name in answers()} == answers(**MATRIX[entry])
    assert recorded["_src_path"] == str(template_repo.path)
    assert recorded["_commit"] == BASE_TAG


@pytest.mark.parametrize("entry", ENTRIES)
def test_template_owned_python_files_say_so_in_their_first_line(
    rendered_project: RenderedProject, entry: str
) -> None:
    project = rendered_project(entry)
    package = answers(**MATRIX[entry])["package_name"]

    template_owned = [
        relpath
        for relpath in text_files(project)
        if relpath.endswith(".py") and not is_owner_owned(relpath, package)
    ]
    without_header = [
        relpath
        for relpath in template_owned
        if not (project / relpath).read_text(encoding="utf-8").startswith(TEMPLATE_OWNED_HEADER)
    ]

    assert f"src/{package}/cli.py" in template_owned
    assert without_header == [], f"no {TEMPLATE_OWNED_HEADER!r} line first in: {', '.join(without_header)}"


@pytest.mark.parametrize("entry", ENTRIES)
def test_license_file_matches_the_chosen_license(rendered_project: RenderedProject, entry: str) -> None:
    project = rendered_project(entry)
    chosen = answers(**MATRIX[entry])["license"]
    metadata = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    if chosen == "Proprietary":
        assert not (project / "LICENSE").exists()
        assert "license" not in metadata
    else:
        text = (project / "LICENSE").read_text(encoding="utf-8")
        assert text.strip().startswith(LICENSE_FIRST_WORDS[chosen])
        assert metadata["license"] == chosen
        if chosen != "Apache-2.0":  # the Apache text has no copyright line to fill in
            assert answers(**MATRIX[entry])["author_name"] in text


@pytest.mark.parametrize("entry", ENTRIES)
def test_second_render_with_the_same_answers_is_byte_identical(
    template_repo: TemplateRepo, rendered_project: RenderedProject, tmp_path: Path, entry: str
) -> None:
    again = render(template_repo.path, tmp_path / "again", answers(**MATRIX[entry]), BASE_TAG)

    first, second = tree(rendered_project(entry)), tree(again)
    assert sorted(first) == sorted(second)
    differing = [relpath for relpath in first if first[relpath] != second[relpath]]
    assert differing == [], f"differ between two renders: {differing}"


@pytest.mark.parametrize("entry", ENTRIES)
def test_ruff_check_passes(rendered_project: RenderedProject, entry: str) -> None:
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], rendered_project(entry))


@pytest.mark.parametrize("entry", ENTRIES)
def test_ruff_format_leaves_nothing_to_change(rendered_project: RenderedProject, entry: str) -> None:
    run([sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], rendered_project(entry))


def test_description_with_quotes_and_backslashes_gives_valid_python(
    template_repo: TemplateRepo, tmp_path: Path
) -> None:
    description = 'Reads "quoted" text, {braces}, a C:\\path\\ and ends with "quotes"'
    project = render(template_repo.path, tmp_path / "project", answers(description=description), BASE_TAG)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an invalid escape such as "\p" is a SyntaxWarning
        for relpath, text in text_files(project).items():
            if relpath.endswith(".py"):
                ast.parse(text, filename=relpath)
    metadata = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert metadata["description"] == description
    run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], project)


def test_default_project_holds_the_owner_code_and_its_scaffolding_only(
    rendered_project: RenderedProject,
) -> None:
    project = rendered_project("defaults")
    files = sorted(tree(project))
    package = answers()["package_name"]

    assert len(files) <= MOST_FILES, f"{len(files)} files (at most {MOST_FILES}): {files}"
    assert [path for path in files if path.startswith(("tests/core/", "benchmarks/", "conformance/"))] == []
    assert [path for path in files if re.fullmatch(rf"src/{package}/core/_[a-z].*", path)] == []


@pytest.mark.parametrize("entry", ENTRIES)
def test_project_depends_on_the_library_from_an_index_only(
    rendered_project: RenderedProject, wheel_folder: Path, entry: str
) -> None:
    """No path, git or URL dependency, and no trace of where the tests found the library's wheel."""
    project = rendered_project(entry)
    chosen = answers(**MATRIX[entry])
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))

    found = {
        relpath: [match.group(0) for match in NOT_FROM_AN_INDEX.finditer(text)]
        for relpath, text in text_files(project).items()
    }
    local = [str(REPO_ROOT), str(wheel_folder)]
    # The answers file records where copier found the template: that is copier's, not a dependency.
    mentions = [
        relpath
        for relpath, text in text_files(project).items()
        if relpath != ".copier-answers.yml" and any(path in text for path in local)
    ]

    assert {relpath: matches for relpath, matches in found.items() if matches} == {}
    assert mentions == []
    assert library_requirement(chosen["idempotency_backend"]) in pyproject["project"]["dependencies"]


@pytest.mark.generated(minutes=3)
@pytest.mark.parametrize("entry", DIRECT_ENTRIES)
def test_mypy_strict_and_project_own_tests_pass(project_env: Callable[[str], ProjectEnv], entry: str) -> None:
    """mypy --strict, then the project's own tests: the owner's and the smoke suite."""
    env = project_env(entry)
    assert_package_name_refuses_every_installed_name(env, entry)
    env.run("mypy", "--strict")
    env.run(
        "python",
        "-m",
        "pytest",
        "-v",
        "-p",
        "no:cacheprovider",
        *HANG_REPORT,
        timeout=SUITE_TIMEOUT_S,
    )


@pytest.mark.generated(minutes=3)
@pytest.mark.parametrize("entry", OWN_NOX_ENTRIES)
def test_project_own_nox_sessions_pass(rendered_project: RenderedProject, open_tmp: Path, entry: str) -> None:
    """`nox` as its owner runs it: the default sessions (lint, typecheck, the owner's tests and the
    smoke suite), whatever the project names them."""
    env = quick_start_environ()
    envdir = open_tmp / f"nox-{entry}"
    run(project_nox(envdir), rendered_project(entry), env=env, timeout=SUITE_TIMEOUT_S)


def assert_package_name_refuses_every_installed_name(env: ProjectEnv, entry: str) -> None:
    """A dependency added to the template (or one of its own) must join server_dependencies."""
    listing = "import importlib.metadata as m; print('\\n'.join(m.packages_distributions()))"
    installed = {
        name for name in env.run("python", "-c", listing).split() if re.fullmatch(r"[a-z_][a-z0-9_]*", name)
    }
    reserved = yaml.safe_load((REPO_ROOT / "questions" / "reserved_names.yml").read_text(encoding="utf-8"))

    missing = installed - set(reserved["server_dependencies"]) - {answers(**MATRIX[entry])["package_name"]}

    assert "pydantic" in installed
    assert missing == set(), f"add to server_dependencies in questions/reserved_names.yml: {sorted(missing)}"
