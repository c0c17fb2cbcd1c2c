"""Rendering every MATRIX entry: clean output, recorded answers, lint, types, own tests."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path

import copier
import pytest
import yaml

from . import readme_walk
from .answers import MATRIX, answers
from .gitrepo import BASE_TAG, REPO_ROOT, TemplateRepo
from .project_env import SUITE_TIMEOUT_S, ProjectEnv, quick_start_environ, run
from .rendering import (
    TEMPLATE_OWNED_HEADER,
    is_owner_owned,
    jinja_leftovers,
    library_requirement,
    render,
    tree,
)

ENTRIES = list(MATRIX)
# Entries whose project, made as its owner makes it, also runs its own CI steps (its nox sessions).
# The sqlite one is the default answers' project updated from a release, with an owner's edits
# (test_update.py).
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


# The actions a workflow sets the machine up with: this test's machine is set up already.
SETUP_ACTIONS = ("actions/checkout@", "actions/setup-python@")
# How GitHub runs a `run:` step (its default shell on Linux).
STEP_SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]
# CI's install of the tools its steps run: this test runs with the same (beside its interpreter).
TOOLS_INSTALL = re.compile(r"python -m pip install( (nox|uv))+")


@pytest.mark.generated(minutes=4)
@pytest.mark.parametrize("entry", OWN_NOX_ENTRIES)
def test_a_new_project_passes_its_own_ci_on_its_first_push(
    template_repo: TemplateRepo, open_tmp: Path, capsys: pytest.CaptureFixture[str], entry: str
) -> None:
    """`copier copy`, the commands copier then prints up to the first commit, as its owner runs
    them; then a checkout of that commit, and every `run:` step of its .github/workflows/ci.yml as
    written, on the project's Python. A job's service is what the other generated tests use: the
    project's tests start a throwaway PostgreSQL of their own."""
    chosen = answers(**MATRIX[entry])
    project, checkout = open_tmp / f"first-push-{entry}", open_tmp / f"first-push-{entry}-ci"
    copier.run_copy(
        str(template_repo.path), project, data=chosen, defaults=True, vcs_ref=BASE_TAG, unsafe=False
    )
    env = first_push_environ()

    run(["bash", "-euo", "pipefail", "-c", owner_first_steps(capsys.readouterr().err)], project, env=env)
    run(["git", "clone", "--quiet", str(project), str(checkout)], open_tmp, env=env)
    steps = ci_steps(checkout / ".github" / "workflows" / "ci.yml", chosen["python_version"])
    outputs = {
        step: run([*STEP_SHELL, step], checkout, env={**env, **job_env}, timeout=SUITE_TIMEOUT_S)
        for step, job_env in steps
    }

    assert {"uv.lock", "contract.json"} <= set(run(["git", "ls-files"], project).split()), "first commit"
    gate = [output for step, output in outputs.items() if step.endswith("-s contract")]
    assert gate, f"CI runs no contract gate: {list(outputs)}"
    assert "OK: contract.json holds for" in gate[0], "checked against the committed contract.json"


def owner_first_steps(message: str) -> str:
    """The commands of copier's message after copy, up to the first commit, as one shell script."""
    commands = [
        readme_walk.strip_comment(line).strip() for line in message.splitlines() if line.startswith("  ")
    ]
    last = next(i for i, command in enumerate(commands) if command.startswith("git init"))
    return "\n".join(commands[: last + 1])


def first_push_environ() -> dict[str, str]:
    """This environment, its tools (nox, uv, this Python) first on PATH, and no virtual environment."""
    env = quick_start_environ()
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    for variable in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "CONDA_PREFIX"):
        env.pop(variable, None)
    env["PYTEST_ADDOPTS"] = " ".join(HANG_REPORT)
    return env


def ci_steps(workflow: Path, python_version: str) -> list[tuple[str, dict[str, str]]]:
    """Each job's `run:` steps, with the job's environment, for `python_version`."""
    steps = []
    for name, job in yaml.safe_load(workflow.read_text(encoding="utf-8"))["jobs"].items():
        versions = job.get("strategy", {}).get("matrix", {}).get("python-version", [python_version])
        assert python_version in versions, f"job {name} runs no Python {python_version}"
        services = job.get("services", {})
        assert set(services) <= {"postgres"}, f"job {name}: a service this test does not stand in for"
        # The service's address: the project's tests start their own server instead.
        ports = [port.split(":")[0] for service in services.values() for port in service.get("ports", [])]
        job_env = {
            key: str(value)
            for key, value in job.get("env", {}).items()
            if not any(f"localhost:{port}" in str(value) for port in ports)
        }
        for step in job["steps"]:
            if "uses" in step:
                assert step["uses"].startswith(SETUP_ACTIONS), f"job {name}: set up by {step['uses']}?"
                continue
            command = step["run"].strip()
            assert "${{" not in command, f"job {name}: {command} needs GitHub's expressions"
            if TOOLS_INSTALL.fullmatch(command):
                tools = Path(sys.executable).parent
                assert [tool for tool in ("nox", "uv") if not (tools / tool).exists()] == [], command
                continue
            steps.append((command, job_env))
    return steps


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
