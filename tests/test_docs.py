"""README.md's questions table says what copier.yml asks, so the two cannot drift apart; the first
commands after `copier copy` (README.md and the message copier prints) commit the project first
(the message's with its contract.json, which CI checks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import copier
import pytest
import yaml

from .gitrepo import BASE_TAG, REPO_ROOT, TemplateRepo


def question_rows() -> dict[str, list[str]]:
    """README table rows that start with a `question` cell, by question name."""
    rows: dict[str, list[str]] = {}
    for line in (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_readme_lists_every_question_with_its_help_and_default() -> None:
    config: dict[str, Any] = yaml.safe_load((REPO_ROOT / "copier.yml").read_text(encoding="utf-8"))
    # `when: false` entries are derived values, never asked: nothing to document.
    questions = {
        name: spec
        for name, spec in config.items()
        if not name.startswith("_") and spec.get("when") is not False
    }
    rows = question_rows()

    assert [name for name in rows if name in questions] == list(questions), "README order or names"
    for name, spec in questions.items():
        asks, default = rows[name][0], rows[name][1]
        assert asks == spec["help"], f"README row for {name}"
        value = spec["default"]
        if "{{" not in str(value):  # derived defaults are described, not quoted
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            assert f"`{shown}`" in default, f"README default for {name}"


def shell_lines(markdown: str) -> list[str]:
    """The lines of the ```bash blocks, in order."""
    return [
        line
        for block in re.findall(r"^```bash\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
        for line in block.splitlines()
    ]


def test_readme_commits_the_project_right_after_copier_copy_and_its_install() -> None:
    lines = shell_lines((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    copy = next(number for number, line in enumerate(lines) if line.startswith("copier copy "))

    assert "uv sync" in lines[copy + 1], "the install first: its uv.lock goes in the first commit"
    assert "git init && git add -A && git commit" in lines[copy + 2]


@pytest.mark.parametrize(
    "data",
    [{}, {"project_name": "A Rather Long Name For A Server", "idempotency_backend": "postgres"}],
    ids=["defaults", "long-slug-postgres"],
)
def test_the_message_after_copy_commits_first_and_lines_up_its_comments(
    template_repo: TemplateRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, str]
) -> None:
    copier.run_copy(
        str(template_repo.path),
        tmp_path / "project",
        data=data,
        defaults=True,
        vcs_ref=BASE_TAG,
        unsafe=False,
    )

    message = capsys.readouterr().err
    commands = [line for line in message.splitlines() if line.startswith("  ")]
    assert commands[0].strip().startswith("cd ")
    assert commands[1].strip().startswith("uv sync")
    assert commands[2].split("#")[0].split()[1:] == ["contract"], "contract.json goes in the first commit"
    assert commands[3].strip().startswith("git init && git add -A && git commit")
    assert "Without uv: python -m venv .venv" in message, "the pip line, for those without uv"
    columns = {line.index("# ") for line in commands[1:]}
    assert len(columns) == 1, message
    if data.get("idempotency_backend") == "postgres":
        assert any("nox -s db" in line for line in commands), message


@pytest.mark.parametrize("readme", ["README.md", "template/README.md.jinja"])
def test_every_version_the_readmes_name_is_released(readme: str) -> None:
    released = set(
        re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (REPO_ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    )
    named = re.findall(r"--vcs-ref v(\d+\.\d+\.\d+)", (REPO_ROOT / readme).read_text(encoding="utf-8"))

    assert named, "no --vcs-ref example left to check"
    assert set(named) <= released, (
        f"{readme} names {sorted(set(named) - released)}; released: {sorted(released)}"
    )
