"""Handler-side validation: a bad call is refused before the tool (or anything) runs.

Strict mode (the default) goes beyond the SDK, which coerces `"3"` to 3 and silently
drops unknown arguments: unknown names are refused with a did-you-mean, required
ones must be present, and types are not coerced. JSON sent as a string for a
structured parameter is refused too, with a hint to send the value itself: a model
that sends strings where objects belong should learn it from the first answer, not
be silently repaired on some calls and misread on others.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, to_json

from resilient_mcp.telemetry.text import clip

_SHOWN_CHARS = 40  # of a name or a value quoted in a message
_MAX_ERRORS = 5
_MAX_UNKNOWN = 3  # unknown names an answer lists; the rest are counted
_MAX_NAME_CHARS = 64  # of a client-chosen name compared for a did-you-mean
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


def _closest(name: str, candidates: list[str], cutoff: float) -> str | None:
    """The declared name closest to a mistaken one; difflib loads at the first mistake, not at start-up."""
    import difflib

    close = difflib.get_close_matches(name[:_MAX_NAME_CHARS], candidates, n=1, cutoff=cutoff)
    return close[0] if close else None


def unknown_name_message(kind: str, name: str, declared: Iterable[str], *, listed_at_most: int = 0) -> str:
    """A tool, prompt or resource name the server does not have: the closest one, and the declared ones
    (the first `listed_at_most` of them, when that is not 0)."""
    names = sorted(declared)
    close = _closest(name, names, cutoff=0.6)
    hint = f"did you mean {close!r}? " if close else ""
    listed = ", ".join(names[:listed_at_most] if listed_at_most else names) or "none"
    if listed_at_most and len(names) > listed_at_most:
        listed += ", ..."
    return f"no {kind} named {clip(name, _SHOWN_CHARS)!r}; {hint}declared {kind}s: {listed}"


def unknown_tool_message(name: str, declared: Iterable[str]) -> str:
    return unknown_name_message("tool", name, declared)


def unknown_arguments_message(given: Iterable[str], accepted: Collection[str]) -> str | None:
    """The names of a flat set of arguments that are not accepted, as a tool's are described."""
    unknown = [name for name in given if name not in accepted]
    if not unknown:
        return None
    described = [
        _unknown_argument(clip(name, _SHOWN_CHARS), name, accepted) for name in unknown[:_MAX_UNKNOWN]
    ]
    more = len(unknown) - len(described)
    return "; ".join(described) + (f"; and {more} more unknown" if more else "")


def _unknown_argument(where: str, key: str, accepted: Collection[str]) -> str:
    close = _closest(key, list(accepted), cutoff=0.5)
    hint = f" (did you mean {close!r}?)" if close else ""
    return f"unknown argument {where!r}{hint}; accepted here: {', '.join(accepted) or 'none'}"


def harden_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Say `additionalProperties: false` on every object schema that lists its properties."""
    hardened: dict[str, Any] = json.loads(json.dumps(schema))

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(hardened)
    return hardened


# Schema keywords whose values are data, not schemas: a "title" key inside them is the owner's.
_DATA_KEYWORDS = frozenset({"default", "examples", "const", "enum"})
# Keywords whose values map names to schemas: the names are property names, never keywords.
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})


def without_titles(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without pydantic's generated `title`s ("City", "forecastArguments", ...).

    They repeat the property or function name on every tools/list; a property that is
    itself called `title` stays.
    """

    def visit(node: Any) -> Any:
        if isinstance(node, list):
            return [visit(item) for item in node]
        if not isinstance(node, dict):
            return node
        trimmed: dict[str, Any] = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in _DATA_KEYWORDS:
                trimmed[key] = value
            elif key in _NAMED_SCHEMAS and isinstance(value, dict):
                trimmed[key] = {name: visit(item) for name, item in value.items()}
            else:
                trimmed[key] = visit(value)
        return trimmed

    result: dict[str, Any] = visit(schema)
    return result


class ArgumentValidator:
    """Checks one tool's arguments against its schema and its pydantic argument model."""

    def __init__(self, schema: dict[str, Any], metadata: FuncMetadata, *, strict: bool) -> None:
        self.schema = schema
        self.metadata = metadata
        self.strict = strict
        self._defs: dict[str, Any] = schema.get("$defs", {})
        # With no object-valued parameters, the top-level names are all a walk would check.
        properties = schema.get("properties", {})
        self._names = frozenset(properties)
        self._flat = not any(_may_hold_objects(node) for node in properties.values())

    def check(self, arguments: Mapping[str, Any]) -> tuple[str | None, BaseModel | None]:
        """(a message naming what is wrong, None) or (None, the validated arguments).

        The only validation a call gets: the tool is called with these arguments, and the
        SDK's own (lenient) validation is not run again. Lax mode validates as the SDK would.
        """
        model = self.metadata.arg_model
        try:
            if self.strict:
                walk = not (self._flat and self._names.issuperset(arguments))
                unknown: list[str] = []
                count = self._unknown_keys(arguments, self.schema, "", unknown) if walk else 0
                if count:
                    more = count - len(unknown)
                    return "; ".join(unknown) + (f"; and {more} more unknown" if more else ""), None
                return None, model.model_validate_json(to_json(arguments), strict=True)
            return None, model.model_validate(self.metadata.pre_parse_json(dict(arguments)))
        except ValidationError as exc:
            return describe_validation_error(exc), None
        except (TypeError, ValueError):  # not JSON-serialisable: cannot have come from a client
            return "arguments are not plain JSON values", None

    def _resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            resolved: Mapping[str, Any] = self._defs.get(ref.removeprefix("#/$defs/"), {})
            return resolved
        return node

    def _unknown_keys(self, value: Any, node: Mapping[str, Any], path: str, found: list[str]) -> int:
        """How many unknown names `value` holds; the first few are described into `found`.

        Only those few are spelled out (names clipped): a call with 300,000 unknown names,
        or one of 200 KB, gets a short answer, and costs no more than walking it.
        """
        node = self._resolve(node)
        options = node.get("anyOf") or node.get("oneOf")
        if options:  # Optional[Model], Optional[list[Model]]: the one option of the value's kind, if one
            kind = "properties" if isinstance(value, dict) else "items" if isinstance(value, list) else None
            same_kind = [o for o in map(self._resolve, options) if kind is not None and kind in o]
            return self._unknown_keys(value, same_kind[0], path, found) if len(same_kind) == 1 else 0
        if not isinstance(value, dict):
            if isinstance(value, list) and isinstance(node.get("items"), dict):
                return sum(
                    self._unknown_keys(item, node["items"], f"{path}[{index}]", found)
                    for index, item in enumerate(value)
                )
            return 0
        properties = node.get("properties")
        if not isinstance(properties, dict):
            return 0
        count = 0
        for key, item in value.items():
            if key in properties:
                count += self._unknown_keys(item, properties[key], f"{path}.{key}" if path else key, found)
                continue
            count += 1
            if len(found) < _MAX_UNKNOWN:
                where = clip(key, _SHOWN_CHARS)
                where = f"{clip(path, _SHOWN_CHARS)}.{where}" if path else where
                found.append(_unknown_argument(where, key, properties))
        return count


def _may_hold_objects(node: Any) -> bool:
    """Whether a parameter's schema can hold objects, whose keys need checking too."""
    text = json.dumps(node)
    return any(marker in text for marker in ('"$ref"', '"object"', '"properties"', '"additionalProperties"'))


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: the field's path, what was expected, and what came (shortened)."""
    errors = exc.errors(include_url=False)
    lines = [_describe(error) for error in errors[:_MAX_ERRORS]]
    if len(errors) > _MAX_ERRORS:
        lines.append(f"and {len(errors) - _MAX_ERRORS} more")
    return "; ".join(lines)


def _describe(error: ErrorDetails) -> str:
    path = ".".join(clip(str(part), _SHOWN_CHARS) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"{path!r} is required but missing"
    value = error["input"]
    # null is its own value: "got null", not "got null None".
    shown = "" if value is None else " " + clip(repr(value), _SHOWN_CHARS)
    text = f"{path!r}: {error['msg'].rstrip('.')}, got {_json_type(value)}{shown}"
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        text += " (send the value itself, not a string holding JSON)"
    return text


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), type(value).__name__)
