"""SKILL.md frontmatter as a YAML 1.2 reader (JavaScript's `yaml`, a host's) gets it.

PyYAML follows YAML 1.1: `yes`, `no`, `on` and `off` become booleans and `2026-01-31` a date.
A host parses SKILL.md with a YAML 1.2 reader and compares its frontmatter field by field with
the entry the server sent (SEP-2640): those values must stay strings, as they do there. So the
loader is PyYAML's safe loader with only `true` and `false` as booleans and nothing a date.

Most frontmatter is `name: text` lines, whose YAML value is the text itself: those are read
here without PyYAML, whose import costs a server more CPU at start-up than the rest of reading
its skills.
"""

from __future__ import annotations

import functools
import re
from typing import Any

# `key: value` where the value is a plain scalar that can only be text: it starts with a letter
# and holds no `:` or `#` (no mapping, no comment), on a line of its own (no continuation).
_PLAIN_LINE = re.compile(r"^([A-Za-z0-9_-]+):[ \t]+([A-Za-z][^:#\n]*?)[ \t]*$")
_NOT_TEXT = {"null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE"}


class FrontmatterError(ValueError):
    """Not YAML: `problem` and the 1-based line within the frontmatter, when known."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem)
        self.problem, self.line = problem, line


def parse_frontmatter(text: str) -> Any:
    """The frontmatter block's value (a dict when it is `name: value` lines)."""
    plain = _plain_lines(text)
    if plain is not None:
        return plain
    import yaml  # only frontmatter beyond plain lines pays for it

    try:
        return yaml.load(text, Loader=_loader())  # a safe loader: see `_loader`
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise FrontmatterError(str(problem), where.line + 1 if where is not None else None) from None


def _plain_lines(text: str) -> dict[str, str] | None:
    """The lines as a dict when each is `key: text` (blank lines aside); else None."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _PLAIN_LINE.match(line)
        if match is None or match.group(2) in _NOT_TEXT:
            return None
        found[match.group(1)] = match.group(2)  # a repeated key: the last, as PyYAML keeps it
    return found


@functools.cache
def _loader() -> type[Any]:
    """`yaml.SafeLoader` with YAML 1.2's booleans and no dates."""
    import yaml

    boolean, timestamp = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp"

    class JsonYamlLoader(yaml.SafeLoader):
        pass

    JsonYamlLoader.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag not in (boolean, timestamp)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    JsonYamlLoader.add_implicit_resolver(
        boolean, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return JsonYamlLoader
