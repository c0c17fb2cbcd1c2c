"""README.md's questions table says what copier.yml asks, so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

import yaml

from .gitrepo import REPO_ROOT


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
