"""A client entry written as TOML (Codex) or YAML (Goose), for printing: standard library only.

The values are what `client_config` builds (strings, booleans, integers, lists of strings, tables of
strings): each string is written as a JSON string, which is also a valid TOML basic string and a
valid YAML double-quoted scalar, so every character survives the trip through the client's parser.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def as_toml(snippet: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """`{"mcp_servers": {name: entry}}` as `[mcp_servers.name]` tables, nested tables after."""
    lines: list[str] = []
    for table, entries in snippet.items():
        for name, entry in entries.items():
            header = f"{table}.{_key(name)}"
            lines.append(f"[{header}]")
            nested = {key: value for key, value in entry.items() if isinstance(value, Mapping)}
            lines += [f"{_key(key)} = {_scalar(value)}" for key, value in entry.items() if key not in nested]
            for key, table_value in nested.items():
                if not table_value:
                    continue
                lines += ["", f"[{header}.{_key(key)}]"]
                lines += [f"{_key(item)} = {_scalar(value)}" for item, value in table_value.items()]
    return "\n".join(lines) + "\n"


def as_yaml(snippet: Mapping[str, Any], indent: int = 0) -> str:
    """Block mappings of scalars and lists of strings (flow style for the lists)."""
    lines = []
    for key, value in snippet.items():
        pad = " " * indent
        if isinstance(value, Mapping):
            if not value:
                lines.append(f"{pad}{_key(key)}: {{}}\n")
                continue
            lines.append(f"{pad}{_key(key)}:\n{as_yaml(value, indent + 2)}")
        else:
            lines.append(f"{pad}{_key(key)}: {_scalar(value)}\n")
    return "".join(lines)


def _scalar(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _key(key: str) -> str:
    """A key bare where both formats read it so (letters, digits, `-`, `_`), else quoted."""
    bare = key.replace("-", "").replace("_", "").isalnum() and key.isascii() and not key[0].isdigit()
    return key if bare else json.dumps(key)
