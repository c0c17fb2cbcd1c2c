"""The runtime library's suite serves a stand-in project (runtime/tests/sample_project): its files
that the template also generates must be what the template generates, or the library is tested
against a project no owner has."""

from __future__ import annotations

import pytest

from .gitrepo import REPO_ROOT

TEMPLATE_PACKAGE = REPO_ROOT / "template" / "src" / "{{package_name}}"
SAMPLE_PACKAGE = REPO_ROOT / "runtime" / "tests" / "sample_project" / "src" / "sample_server"
HEADER = "# Template-owned: "


@pytest.mark.parametrize("relpath", ["cli.py", "__main__.py", "core/__init__.py"])
def test_the_stand_in_project_has_the_templates_own_entry_and_re_export(relpath: str) -> None:
    generated = (TEMPLATE_PACKAGE / relpath).read_text(encoding="utf-8")
    assert generated.startswith(HEADER)  # plain Python, rendered as it is but for this line

    stand_in = (SAMPLE_PACKAGE / relpath).read_text(encoding="utf-8")

    assert stand_in == generated.split("\n", 1)[1], f"copy template/src/{{{{package_name}}}}/{relpath} over"


def test_the_stand_in_projects_identity_names_every_field_the_templates_does() -> None:
    template = (TEMPLATE_PACKAGE / "project.py.jinja").read_text(encoding="utf-8")
    stand_in = (SAMPLE_PACKAGE / "project.py").read_text(encoding="utf-8")
    fields = [
        line.split("=")[0].strip()
        for line in template.split("PROJECT: Final = Project(")[1].split(")")[0].splitlines()
        if "=" in line
    ]

    assert "env_prefix" in fields
    assert [field for field in fields if f"    {field}=" not in stand_in] == []
