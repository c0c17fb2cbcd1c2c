"""copier.yml's questions: defaults that work, and validators that say what is wrong."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import copier
import pytest
import yaml

from .answers import DEFAULT_ANSWERS, answers
from .gitrepo import BASE_TAG, TemplateRepo
from .rendering import render


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
    ("package_name", "mcp", ["shadow"]),
    ("package_name", "json", ["shadow", "standard-library"]),
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
