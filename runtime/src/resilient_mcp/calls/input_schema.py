"""A tool's input schema beyond what pydantic makes of its signature: one the owner declared
(`@tool(input_schema=...)`), and parameters mirrored into HTTP headers (`@tool(headers=...)`).

A declared schema is checked at start-up, served as written, and validated strictly before the
tool runs.
The schema is JSON Schema (2020-12 unless its `$schema` names another draft), validated with
the `jsonschema` library; its messages are reworded the way `calls.validation` words pydantic's:
the field's path, what was expected, what came (shortened). The function receives the
arguments by name, as JSON values: the schema's top-level properties are its parameters, so
they must match, and one the schema does not require needs a default.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from mcp.server.mcpserver.resolve import find_resolved_parameters
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.shared.inbound import X_MCP_HEADER_KEY, find_invalid_x_mcp_header
from pydantic import BaseModel, TypeAdapter

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.entrypoints import IdempotencyKey
from resilient_mcp.calls.validation import unknown_arguments_message
from resilient_mcp.store import KEY_ARGUMENT
from resilient_mcp.telemetry.text import clip

if TYPE_CHECKING:
    from jsonschema import exceptions as schema_errors
    from jsonschema.protocols import Validator

# jsonschema (and referencing, rpds) load only for a tool that declares a schema: importing them
# costs more start-up CPU than the rest of this room, and most servers declare none.

_SHOWN_CHARS = 40  # of a value quoted in a message
_MAX_ERRORS = 5
_MAX_FOUND = 50  # errors looked at, of which the most relevant _MAX_ERRORS are described
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


def declared_schema_problems(spec: ToolSpec) -> list[str]:
    """What keeps a tool's declared input schema from being served (empty when it can be)."""
    schema = spec.input_schema
    if schema is None:
        return []
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):
        return ["has an input_schema that is not plain JSON (dicts, lists, strings, numbers, booleans, null)"]
    from jsonschema import exceptions as schema_errors
    from jsonschema.validators import Draft202012Validator, validator_for

    try:
        validator_for(schema, default=Draft202012Validator).check_schema(dict(schema))
    except schema_errors.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "the root"
        return [f"has an invalid input_schema at {where}: {clip(exc.message, 120)}"]
    if schema.get("type") != "object":
        return ['has an input_schema whose "type" is not "object" (a tool\'s arguments are one object)']
    problems: list[str] = []
    properties = schema.get("properties")
    names = set(properties) if isinstance(properties, dict) else set()
    required = set(schema.get("required") or ())
    parameters = _parameters(spec)
    if missing := sorted(set(parameters) - names):
        shown = ", ".join(map(repr, missing))
        problems.append(f"takes {shown} that its input_schema's properties do not list")
    if extra := sorted(names - set(parameters) - {KEY_ARGUMENT}):
        problems.append(f"has input_schema properties {', '.join(map(repr, extra))} that it does not take")
    if optional := sorted(n for n, p in parameters.items() if n not in required and p.default is p.empty):
        shown = ", ".join(map(repr, optional))
        problems.append(f"needs a default for {shown}: its input_schema does not require them")
    return problems


def mirror_headers(schema: dict[str, Any], spec: ToolSpec) -> dict[str, Any]:
    """The schema with `x-mcp-header` on each parameter `headers=` mirrors (SEP-2243); a declared
    schema's own `x-mcp-header`s are checked alike.

    Raises:
        FatalError: a mirrored name is not a parameter, or the annotation is one the spec
            refuses (not a string, integer or boolean property, not a header token, a duplicate).
    """
    if not spec.headers and spec.input_schema is None:  # made from the signature: nothing to mirror
        return schema
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    where = f"tool {spec.fn.__module__}:{spec.fn.__qualname__}"
    if unknown := sorted(set(spec.headers) - set(properties)):
        raise FatalError(
            f"{where} mirrors {', '.join(map(repr, unknown))} into headers, but takes no such parameter",
            "name parameters of the tool in @tool(headers={parameter: header name})",
        )
    for name, header in spec.headers.items():
        properties[name] = {**properties[name], X_MCP_HEADER_KEY: header}
    if (reason := find_invalid_x_mcp_header(schema)) is not None:
        raise FatalError(
            f"{where} cannot mirror its arguments into headers: {reason}",
            "mirror only str, int or bool parameters (not Optional), each under its own header name "
            "of letters, digits and -",
        )
    return schema


def _parameters(spec: ToolSpec) -> dict[str, inspect.Parameter]:
    """The function's parameters that arguments fill: not its Context, its `Resolve(...)` ones or
    the idempotency key (the SDK's own tests of the first two)."""
    skipped = {KEY_ARGUMENT, find_context_parameter(spec.fn), *find_resolved_parameters(spec.fn)}
    parameters = inspect.signature(spec.fn, eval_str=True).parameters
    return {name: parameter for name, parameter in parameters.items() if name not in skipped}


def served_declared_schema(spec: ToolSpec) -> dict[str, Any]:
    """The declared schema as tools/list serves it: as written, but for the core's own argument.

    A side-effecting tool's schema gains the required `idempotency_key` the core takes from
    every such call (the function receives it only if it takes it, as for any such tool).
    """
    assert spec.input_schema is not None
    served: dict[str, Any] = json.loads(json.dumps(spec.input_schema))  # a copy the owner cannot change
    if spec.side_effect:
        key_schema = TypeAdapter(IdempotencyKey).json_schema()  # as a signature's key is described
        served.setdefault("properties", {}).setdefault(KEY_ARGUMENT, key_schema)
        required = served.setdefault("required", [])
        if KEY_ARGUMENT not in required:
            required.append(KEY_ARGUMENT)
    return served


class DeclaredSchemaValidator:
    """Checks one tool's arguments against the JSON Schema it declared; built once at start-up."""

    def __init__(self, schema: dict[str, Any], metadata: FuncMetadata) -> None:
        self.schema = schema
        self.metadata = metadata
        from jsonschema.exceptions import relevance
        from jsonschema.validators import Draft202012Validator, validator_for
        from referencing.exceptions import Unresolvable

        self._validator: Validator = validator_for(schema, default=Draft202012Validator)(schema)
        # Kept here, loaded once: `check` runs on every call of the tool.
        self._relevance = relevance
        self._unresolvable = Unresolvable
        fields = metadata.arg_model.model_fields
        self._field_names = {field.alias or name: name for name, field in fields.items()}

    def check(self, arguments: Mapping[str, Any]) -> tuple[str | None, BaseModel | None]:
        """(a message naming what is wrong, None) or (None, the arguments for the function).

        The function receives the JSON values as they came: the schema is the one check.
        """
        try:
            # At most _MAX_FOUND: a huge wrong argument costs no more than the first few of its errors.
            found = list(itertools.islice(self._validator.iter_errors(arguments), _MAX_FOUND + 1))
        except self._unresolvable as exc:  # a `$ref` the schema cannot resolve offline: the owner's to fix
            return f"the tool's input schema cannot be applied ({clip(str(exc), 80)}); nothing was run", None
        if found:
            errors = sorted(found[:_MAX_FOUND], key=self._relevance)
            lines = [_describe(error) for error in errors[:_MAX_ERRORS]]
            if len(found) > _MAX_ERRORS:
                more = len(found) - _MAX_ERRORS
                lines.append(f"and {more} more" if len(found) <= _MAX_FOUND else "and more")
            return "; ".join(lines), None
        names = self._field_names
        values = {names[key]: value for key, value in arguments.items() if key in names}
        return None, self.metadata.arg_model.model_construct(**values)


def _describe(error: schema_errors.ValidationError) -> str:
    """One problem in the words `calls.validation` uses: path, what was expected, what came."""
    path = _path(error.absolute_path)
    where = path or "arguments"
    instance, expected = error.instance, cast(Any, error.validator_value)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "required" and isinstance(instance, dict):
        missing = [_path([*error.absolute_path, name]) for name in expected if name not in instance]
        return "; ".join(f"{name!r} is required but missing" for name in missing)
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(instance, dict):
        properties = schema.get("properties") or {}
        listed = unknown_arguments_message(list(instance), list(properties))
        if listed is not None and "patternProperties" not in schema:
            return f"in {path!r}: {listed}" if path else listed
    if error.validator in ("anyOf", "oneOf") and error.context:
        options = dict.fromkeys(_describe(sub) for sub in error.context)
        shown = " or ".join(list(options)[:3])
        return f"{where!r}: must match one of the allowed forms ({shown})"
    if error.validator == "type":
        return f"{where!r}: expected {_expected(expected)}, got {_shown(instance)}"
    if error.validator == "enum":
        allowed = ", ".join(clip(json.dumps(value), _SHOWN_CHARS) for value in expected[:10])
        return f"{where!r}: expected one of {allowed}, got {_shown(instance)}"
    if error.validator == "const":
        return f"{where!r}: expected {clip(json.dumps(expected), _SHOWN_CHARS)}, got {_shown(instance)}"
    # Other keywords (minimum, pattern, ...): jsonschema's own sentence, which quotes the value.
    return f"{where!r}: {clip(error.message, 120)}"


def _path(parts: Iterable[Any]) -> str:
    return ".".join(clip(str(part), _SHOWN_CHARS) for part in parts)


def _expected(types: Any) -> str:
    return " or ".join(types) if isinstance(types, list) else str(types)


def _shown(value: Any) -> str:
    kind = "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
    return kind if value is None else f"{kind} {clip(repr(value), _SHOWN_CHARS)}"
