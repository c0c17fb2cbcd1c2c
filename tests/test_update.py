"""`copier update`: template changes arrive, the owner's files stay as the owner left them.

The bar: an updated project equals a fresh copy of the new template version, except
for the owner-owned files, which are byte for byte what the owner committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from .answers import DEFAULT_ANSWERS, answers
from .gitrepo import BASE_TAG, TemplateRepo, git, init_and_commit
from .project_env import ProjectEnv
from .rendering import is_owner_owned, render, tree, update

PACKAGE = DEFAULT_ANSWERS["package_name"]
NEW_TAG = "0.2.0"

CORE_CHANGE = "# Template 0.2.0: a line every updated core module must show.\n"
NOXFILE_CHANGE = "# Template 0.2.0: a line every updated noxfile must show.\n"
# The template also changes files the owner owns: updates must still leave those alone.
# (folder under template/, a fragment of the source file's name, line appended)
OWNER_OWNED_CHANGES = [
    ("", "README.md", "\nTemplate 0.2.0 README line.\n"),
    ("src/{{package_name}}", "settings.py", "# Template 0.2.0 settings line.\n"),
    ("src/{{package_name}}/tools", "example.py", "# Template 0.2.0 example line.\n"),
]

OWNER_TOOL = '''"""The owner's own tool, added after `copier copy`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..core import tool


@tool(read_only=True)
def greet(name: Annotated[str, Field(description="Who to greet")]) -> str:
    """Say hello to someone by name."""
    return f"Hello, {name}!"
'''
OWNER_TOOL_TEST = f'''"""The owner's test of the owner's tool."""

from {PACKAGE}.tools.greetings import greet


def test_greet_names_the_person() -> None:
    assert greet("Ada") == "Hello, Ada!"
'''
EXAMPLE_FILES = [f"src/{PACKAGE}/tools/example.py", "tests/tools/test_example.py"]
OWNER_FILES = {
    f"src/{PACKAGE}/tools/greetings.py": OWNER_TOOL,
    "tests/tools/test_greetings.py": OWNER_TOOL_TEST,
}


@dataclass(frozen=True)
class OwnedProject:
    path: Path
    owner_bytes: dict[str, bytes]  # every owner-owned file as committed before the update


def copy_and_make_it_mine(template: TemplateRepo, destination: Path, *, delete_example: bool) -> OwnedProject:
    """Copy the base version, then do what an owner does: add a tool, edit owned files, commit."""
    project = render(template.path, destination, answers(), BASE_TAG)
    init_and_commit(project, "Project from template 0.1.0")
    for relpath, text in OWNER_FILES.items():
        (project / relpath).parent.mkdir(parents=True, exist_ok=True)
        (project / relpath).write_text(text, encoding="utf-8")
    with (project / "README.md").open("a", encoding="utf-8") as readme:
        readme.write("\n## Owner's notes\n\nThis server greets people.\n")
    with (project / "src" / PACKAGE / "settings.py").open("a", encoding="utf-8") as settings:
        settings.write("# Owner: greeting settings will go here.\n")
    if delete_example:
        for relpath in EXAMPLE_FILES:
            (project / relpath).unlink(missing_ok=True)
    init_and_commit(project, "Owner's tool and notes")
    owned = {relpath: data for relpath, data in tree(project).items() if is_owner_owned(relpath, PACKAGE)}
    return OwnedProject(project, owned)


def release_new_version(template: TemplateRepo) -> str:
    template.append("src/{{package_name}}/core/errors.py", CORE_CHANGE)
    template.append("noxfile.py", NOXFILE_CHANGE)
    for folder, name, text in OWNER_OWNED_CHANGES:
        # Source names may carry Jinja (`{% if ... %}example.py{% endif %}`): find the file.
        (source,) = [path for path in (template.path / "template" / folder).iterdir() if name in path.name]
        template.append(f"{folder}/{source.name}".lstrip("/"), text)
    return template.release(NEW_TAG)


def assert_merged_cleanly(project: Path) -> None:
    assert git(project, "diff", "--name-only", "--diff-filter=U") == "", "unmerged paths after update"
    assert sorted(project.rglob("*.rej")) == []
    with_markers = [
        relpath
        for relpath, data in tree(project).items()
        if b"\n<<<<<<< " in data or data.startswith(b"<<<<<<< ")
    ]
    assert with_markers == [], f"conflict markers in {with_markers}"


@pytest.fixture
def updated(own_template_repo: TemplateRepo, tmp_path: Path) -> OwnedProject:
    """An owner's project, updated from 0.1.0 to 0.2.0."""
    owned = copy_and_make_it_mine(own_template_repo, tmp_path / "project", delete_example=False)
    update(owned.path, release_new_version(own_template_repo))
    return owned


def test_update_merges_without_conflicts(updated: OwnedProject) -> None:
    assert_merged_cleanly(updated.path)


def test_update_brings_the_template_change(updated: OwnedProject) -> None:
    core = (updated.path / "src" / PACKAGE / "core" / "errors.py").read_text(encoding="utf-8")
    noxfile = (updated.path / "noxfile.py").read_text(encoding="utf-8")

    assert core.endswith(CORE_CHANGE)
    assert noxfile.endswith(NOXFILE_CHANGE)
    assert f"_commit: {NEW_TAG}\n" in (updated.path / ".copier-answers.yml").read_text(encoding="utf-8")


def test_update_leaves_owner_files_byte_identical(updated: OwnedProject) -> None:
    after = {
        relpath: data for relpath, data in tree(updated.path).items() if is_owner_owned(relpath, PACKAGE)
    }

    assert sorted(after) == sorted(updated.owner_bytes)
    changed = [relpath for relpath in after if after[relpath] != updated.owner_bytes[relpath]]
    assert changed == [], f"update changed owner-owned files: {changed}"


def test_updated_project_equals_a_fresh_copy_apart_from_owner_files(
    own_template_repo: TemplateRepo, updated: OwnedProject, tmp_path: Path
) -> None:
    fresh = render(own_template_repo.path, tmp_path / "fresh", answers(), NEW_TAG)

    def template_side(root: Path) -> dict[str, bytes]:
        return {relpath: data for relpath, data in tree(root).items() if not is_owner_owned(relpath, PACKAGE)}

    updated_files, fresh_files = template_side(updated.path), template_side(fresh)
    assert sorted(updated_files) == sorted(fresh_files)
    differing = [relpath for relpath in fresh_files if updated_files[relpath] != fresh_files[relpath]]
    assert differing == [], f"updated project differs from a fresh copy in {differing}"


def test_update_does_not_bring_back_a_deleted_example_tool(
    own_template_repo: TemplateRepo, tmp_path: Path
) -> None:
    owned = copy_and_make_it_mine(own_template_repo, tmp_path / "project", delete_example=True)

    update(owned.path, release_new_version(own_template_repo))

    assert_merged_cleanly(owned.path)
    assert [relpath for relpath in EXAMPLE_FILES if (owned.path / relpath).exists()] == []


def test_update_to_the_same_version_changes_nothing(own_template_repo: TemplateRepo, tmp_path: Path) -> None:
    owned = copy_and_make_it_mine(own_template_repo, tmp_path / "project", delete_example=False)

    update(owned.path, BASE_TAG)

    assert git(owned.path, "status", "--porcelain") == ""


@pytest.mark.generated
def test_updated_project_passes_its_own_tests(updated: OwnedProject, open_tmp: Path) -> None:
    env = ProjectEnv.create(updated.path, open_tmp / "venv-updated", DEFAULT_ANSWERS["python_version"])

    output = env.run(
        "python", "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "faulthandler_timeout=120"
    )

    assert "tests/tools/test_greetings.py::test_greet_names_the_person PASSED" in output


def test_owner_edit_to_a_template_owned_file_is_merged_with_the_template_change(
    own_template_repo: TemplateRepo, tmp_path: Path
) -> None:
    project = render(own_template_repo.path, tmp_path / "project", answers(), BASE_TAG)
    init_and_commit(project, "Project from template 0.1.0")
    pyproject = project / "pyproject.toml"
    owner_dependency = '    "httpx>=0.28",  # the owner\'s own dependency\n'
    pyproject.write_text(
        pyproject.read_text(encoding="utf-8").replace(
            "dependencies = [\n", "dependencies = [\n" + owner_dependency
        ),
        encoding="utf-8",
    )
    init_and_commit(project, "Owner adds a dependency")
    own_template_repo.append("pyproject.toml.jinja", "# Template 0.2.0 pyproject line.\n")

    update(project, own_template_repo.release(NEW_TAG))

    assert_merged_cleanly(project)
    merged = pyproject.read_text(encoding="utf-8")
    assert owner_dependency in merged
    assert merged.endswith("# Template 0.2.0 pyproject line.\n")
