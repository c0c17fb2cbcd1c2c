"""copier.yml's questions: defaults that work, and validators that say what is wrong."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import copier
import pytest
import yaml

from .answers import DEFAULT_ANSWERS, answers
from .gitrepo import BASE_TAG, REPO_ROOT, TemplateRepo, git, init_and_commit
from .project_env import find_python, run, uv_executable
from .releases import released_versions
from .rendering import render, update

# package_name's own pattern: only such names need refusing.
PACKAGE_PATTERN = re.compile(r"[a-z_][a-z0-9_]*")


def reserved_names() -> dict[str, list[str]]:
    """The lists package_name's validator refuses, by kind, as copier.yml reads them."""
    loaded: dict[str, list[str]] = yaml.safe_load(
        (REPO_ROOT / "questions" / "reserved_names.yml").read_text(encoding="utf-8")
    )
    return loaded


def version_installed(version: str) -> bool:
    command = [uv_executable(), "python", "find", "--no-python-downloads", version]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def recorded_answers(project: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((project / ".copier-answers.yml").read_text(encoding="utf-8"))
    return loaded


def test_copy_with_defaults_only_gives_the_shared_default_answers(
    template_repo: TemplateRepo, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    copier.run_copy(str(template_repo.path), project, defaults=True, vcs_ref=BASE_TAG, quiet=True)

    recorded = recorded_answers(project)
    assert {name: recorded[name] for name in DEFAULT_ANSWERS} == DEFAULT_ANSWERS
    assert (project / "src" / "example_tools" / "core").is_dir()


def test_names_are_derived_from_the_project_name(template_repo: TemplateRepo, tmp_path: Path) -> None:
    project = tmp_path / "project"
    copier.run_copy(
        str(template_repo.path),
        project,
        data={"project_name": "Weather  Tools_2"},
        defaults=True,
        vcs_ref=BASE_TAG,
        quiet=True,
    )

    recorded = recorded_answers(project)
    assert recorded["project_slug"] == "weather-tools-2"
    assert recorded["package_name"] == "weather_tools_2"
    assert recorded["env_prefix"] == "WEATHER_TOOLS_2_"


# (question, bad answer, words the message must contain besides the bad value)
REJECTED: list[tuple[str, Any, list[str]]] = [
    ("project_slug", "Weather-Tools", ["lowercase", "hyphens"]),
    ("project_slug", "weather tools", ["lowercase", "hyphens"]),
    ("project_slug", "2weather", ["starting with a letter"]),
    ("project_slug", "weather--tools", ["single hyphens"]),
    ("project_slug", "weather-", ["single hyphens"]),
    ("package_name", "weather-tools", ["not a valid Python identifier", "underscores"]),
    ("package_name", "2weather", ["not a valid Python identifier"]),
    ("package_name", "class", ["keyword"]),
    ("package_name", "json", ["shadow", "standard-library module"]),
    ("package_name", "tomllib", ["shadow", "standard-library module"]),
    ("package_name", "_thread", ["shadow", "standard-library module"]),
    ("package_name", "distutils", ["shadow", "standard-library module"]),  # Python 3.11 only
    ("package_name", "mcp", ["shadow", "package this server depends on"]),
    ("package_name", "typing_extensions", ["shadow", "package this server depends on"]),
    ("package_name", "psycopg", ["shadow", "package this server depends on"]),  # postgres backend
    ("package_name", "pytest", ["shadow", "package this server depends on"]),  # dev extra
    ("package_name", "flask", ["shadow", "popular 'flask' package", "choose another name"]),
    ("package_name", "numpy", ["shadow", "popular 'numpy' package"]),
    ("package_name", "tests", ["the generated project uses itself", "choose another name"]),
    ("package_name", "test_smoke", ["the generated project uses itself"]),
    ("author_email", "not-an-email", ["name@example.com"]),
    ("author_email", "team@localhost", ["name@example.com"]),
    ("author_email", "two words@example.com", ["name@example.com"]),
    ("repository_url", "github.com/owner/repo", ["https://github.com/OWNER/REPO", "empty"]),
    ("repository_url", "https://gitlab.com/owner/repo", ["https://github.com/OWNER/REPO"]),
    ("repository_url", "https://github.com/owner/repo.git", ["no .git"]),
    ("repository_url", "https://github.com/owner/repo/", ["no trailing slash"]),
    ("env_prefix", "example_tools_", ["uppercase", "ending with '_'"]),
    ("env_prefix", "EXAMPLE_TOOLS", ["ending with '_'"]),
    ("env_prefix", "9LIVES_", ["uppercase"]),
    ("tool_budget", 0, ["1 to 40"]),
    ("tool_budget", 41, ["1 to 40"]),
    ("python_version", "3.10", ["3.11", "3.12", "3.13"]),
    ("python_version", "3.14", ["3.11", "3.12", "3.13"]),
    ("idempotency_backend", "mysql", ["sqlite", "postgres"]),
]


@pytest.mark.parametrize(
    ("question", "bad", "words"), REJECTED, ids=[f"{question}={bad!r}" for question, bad, _ in REJECTED]
)
def test_bad_answer_is_rejected_with_a_message_naming_it(
    template_repo: TemplateRepo, tmp_path: Path, question: str, bad: Any, words: list[str]
) -> None:
    destination = tmp_path / "new-server"

    # In --defaults mode copier raises the validator's text (or its own choice error) as ValueError.
    with pytest.raises(ValueError, match=re.escape(question)) as rejected:
        render(template_repo.path, destination, answers(**{question: bad}), BASE_TAG)

    message = str(rejected.value)
    assert repr(bad) in message or str(bad) in message, message
    for word in words:
        assert word in message, message
    assert not destination.exists(), "a rejected answer must not leave a half-made project behind"


def test_multi_line_description_is_rejected(template_repo: TemplateRepo, tmp_path: Path) -> None:
    destination = tmp_path / "new-server"

    with pytest.raises(ValueError, match="description must be one line"):
        render(template_repo.path, destination, answers(description="Two\nlines"), BASE_TAG)

    assert not destination.exists()


def test_blank_project_name_is_rejected(template_repo: TemplateRepo, tmp_path: Path) -> None:
    destination = tmp_path / "new-server"

    with pytest.raises(ValueError, match="project_name must not be empty"):
        render(template_repo.path, destination, answers(project_name="   "), BASE_TAG)

    assert not destination.exists()


def test_rejected_answer_leaves_an_existing_destination_untouched(
    template_repo: TemplateRepo, tmp_path: Path
) -> None:
    destination = tmp_path / "existing"
    destination.mkdir()
    (destination / "notes.txt").write_text("mine\n", encoding="utf-8")

    with pytest.raises(ValueError, match="package_name 'json'"):
        render(template_repo.path, destination, answers(package_name="json"), BASE_TAG)

    assert sorted(path.name for path in destination.iterdir()) == ["notes.txt"]


def test_invalid_slug_derived_from_the_project_name_is_rejected(
    template_repo: TemplateRepo, tmp_path: Path
) -> None:
    destination = tmp_path / "new-server"

    with pytest.raises(ValueError, match="project_slug '123-tools' is not a valid"):
        copier.run_copy(
            str(template_repo.path),
            destination,
            data={"project_name": "123 Tools"},
            defaults=True,
            vcs_ref=BASE_TAG,
            quiet=True,
        )

    assert not destination.exists()


def test_first_copy_reads_no_earlier_answers(template_repo: TemplateRepo, tmp_path: Path) -> None:
    """The rename validators look at .copier-answers.yml only where one exists: no warning on a first copy."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # copier warns when it reads a missing answers file
        render(template_repo.path, tmp_path / "new-server", answers(), BASE_TAG)
        copier.run_copy(
            str(template_repo.path), tmp_path / "asked", defaults=True, vcs_ref=BASE_TAG, quiet=True
        )


# (project_name, the project_slug derived from it): accented Latin letters are spelled in ASCII.
TRANSLITERATED: list[tuple[str, str]] = [
    ("Über Café", "uber-cafe"),
    ("Zoë O'Brien", "zoe-obrien"),
    ("Crème Brûlée Straße", "creme-brulee-strasse"),
    ("Łódź Æsir Œuvre Þing Ørsted", "lodz-aesir-oeuvre-thing-orsted"),
    ("Ștefan Țară Đurđevac", "stefan-tara-durdevac"),
    ("天气 Weather Tools", "weather-tools"),
]


@pytest.mark.parametrize(("project_name", "slug"), TRANSLITERATED, ids=[slug for _, slug in TRANSLITERATED])
def test_accented_project_name_gives_an_ascii_slug(
    template_repo: TemplateRepo, tmp_path: Path, project_name: str, slug: str
) -> None:
    project = tmp_path / "project"
    copier.run_copy(
        str(template_repo.path),
        project,
        data={"project_name": project_name},
        defaults=True,
        vcs_ref=BASE_TAG,
        quiet=True,
    )

    recorded = recorded_answers(project)
    assert recorded["project_name"] == project_name
    assert recorded["project_slug"] == slug
    assert recorded["package_name"] == slug.replace("-", "_")


def test_accented_author_gives_an_ascii_repository_owner(template_repo: TemplateRepo, tmp_path: Path) -> None:
    derived, no_url = tmp_path / "derived", tmp_path / "no-url"
    for project, data in [
        (derived, {"author_name": "Zoë O'Brien"}),
        (no_url, {"author_name": "Zoë O'Brien", "repository_url": ""}),
    ]:
        copier.run_copy(
            str(template_repo.path), project, data=data, defaults=True, vcs_ref=BASE_TAG, quiet=True
        )

    assert recorded_answers(derived)["repository_url"] == "https://github.com/zoe-o-brien/example-tools"
    # With no URL the registry name still guesses the owner from the author, spelled the same way.
    for project in (derived, no_url):
        registry_name = json.loads((project / "server.json").read_text(encoding="utf-8"))["name"]
        assert registry_name == "io.github.zoe-o-brien/example-tools"


def test_project_name_with_nothing_to_spell_in_ascii_asks_for_a_slug(
    template_repo: TemplateRepo, tmp_path: Path
) -> None:
    destination = tmp_path / "new-server"

    with pytest.raises(ValueError, match="project_slug is empty") as rejected:
        copier.run_copy(
            str(template_repo.path),
            destination,
            data={"project_name": "天气工具"},
            defaults=True,
            vcs_ref=BASE_TAG,
            quiet=True,
        )

    message = str(rejected.value)
    assert "'天气工具'" in message
    assert "-d project_slug=" in message
    assert not destination.exists()


def test_project_name_with_nothing_to_spell_in_ascii_works_with_a_given_slug(
    template_repo: TemplateRepo, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    copier.run_copy(
        str(template_repo.path),
        project,
        data={"project_name": "天气工具", "project_slug": "tianqi-tools"},
        defaults=True,
        vcs_ref=BASE_TAG,
        quiet=True,
    )

    recorded = recorded_answers(project)
    assert (recorded["project_name"], recorded["package_name"]) == ("天气工具", "tianqi_tools")


# --- The names package_name refuses (questions/reserved_names.yml) -------------------------

SUPPORTED_PYTHONS = ["3.11", "3.12", "3.13"]


def python_stdlib_names(version: str) -> set[str]:
    """sys.stdlib_module_names of an installed Python `version` that package_name's pattern allows."""
    python = find_python(version)
    listed = run([python, "-c", "import sys; print('\\n'.join(sys.stdlib_module_names))"], REPO_ROOT)
    return {name for name in listed.split() if PACKAGE_PATTERN.fullmatch(name)}


def test_reserved_name_lists_are_sorted_distinct_and_valid_package_names() -> None:
    lists = reserved_names()

    assert sorted(lists) == ["popular_packages", "project_layout", "server_dependencies", "standard_library"]
    for kind, names in lists.items():
        assert names == sorted(set(names)), f"{kind}: keep it sorted, each name once"
        assert all(isinstance(name, str) and PACKAGE_PATTERN.fullmatch(name) for name in names), kind
    for kind, other in itertools.combinations(lists, 2):
        # One name, one message: a name listed twice would get the first kind's message only.
        assert set(lists[kind]).isdisjoint(lists[other]), f"{kind} and {other} share names"


@pytest.mark.parametrize("version", SUPPORTED_PYTHONS)
def test_standard_library_list_holds_every_module_of_python(version: str) -> None:
    missing = python_stdlib_names(version) - set(reserved_names()["standard_library"])

    assert missing == set(), f"add to standard_library in questions/reserved_names.yml: {sorted(missing)}"


def test_standard_library_list_holds_only_modules_of_the_supported_pythons() -> None:
    installed = [version for version in SUPPORTED_PYTHONS if version_installed(version)]
    if installed != SUPPORTED_PYTHONS:
        pytest.skip(f"needs every Python of {SUPPORTED_PYTHONS} to know the union; installed: {installed}")
    union = set().union(*(python_stdlib_names(version) for version in SUPPORTED_PYTHONS))

    stale = set(reserved_names()["standard_library"]) - union

    assert stale == set(), f"no supported Python has these; drop them: {sorted(stale)}"


def test_project_layout_list_holds_every_module_of_the_tests_folder(
    rendered_project: Callable[[str], Path],
) -> None:
    """pytest puts tests/ first on sys.path to import its modules: a package of one of their names
    would be shadowed in the project's own tests."""
    modules = {
        path.stem
        for entry in ["defaults", "proprietary-postgres"]
        for path in (rendered_project(entry) / "tests").iterdir()
        if path.suffix == ".py" and not path.name.startswith("__")
    }

    assert "test_smoke" in modules
    assert modules - set(reserved_names()["project_layout"]) == set()


def test_project_named_before_its_name_was_reserved_still_updates(release_repo: Path, tmp_path: Path) -> None:
    """A refused name binds new projects only: an existing `typer` project is not locked out of updates."""
    # The newest release that still let a project be called `typer`.
    before_reserved = next(
        release.tag
        for release in reversed(released_versions())
        if not re.search(
            r"\btyper\b",
            git(release_repo, "show", f"{release.tag}:questions/reserved_names.yml", check=False),
        )
    )
    project = render(release_repo, tmp_path / "project", answers(package_name="typer"), before_reserved)
    init_and_commit(project, "Project named before 'typer' was reserved")

    update(project, "HEAD")
    init_and_commit(project, "Updated")
    # The name given again, as `copier update -d package_name=typer` does.
    copier.run_update(
        project,
        data={"package_name": "typer"},
        overwrite=True,
        defaults=True,
        vcs_ref="HEAD",
        unsafe=False,
        quiet=True,
    )

    assert recorded_answers(project)["package_name"] == "typer"
    assert (project / "src" / "typer" / "core").is_dir()
    # A new project still gets the refusal.
    with pytest.raises(ValueError, match="popular 'typer' package"):
        render(release_repo, tmp_path / "new", answers(package_name="typer"), "HEAD")
