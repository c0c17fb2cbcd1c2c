"""A YAML loader whose values are the ones a YAML 1.2 reader (JavaScript's `yaml`) gets.

PyYAML follows YAML 1.1: `yes`, `no`, `on` and `off` become booleans and `2026-01-31` a date.
A host parses SKILL.md with a YAML 1.2 reader and compares its frontmatter field by field with
the entry the server sent (SEP-2640): those values must stay strings, as they do there. Only
`true` and `false` are booleans; nothing is a date. It is PyYAML's safe loader otherwise.
"""

from __future__ import annotations

import re

import yaml

_BOOL = "tag:yaml.org,2002:bool"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class JsonYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2's booleans and no dates."""


JsonYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_BOOL, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
JsonYamlLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
