"""Tools and tool results as text for a person: what a model is shown, laid out to be read.

Works on the wire form (`model_dump(by_alias=True)`: `inputSchema`, `isError`, `_meta`), so what
is printed is named as the protocol names it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from resilient_mcp.commands.columns import aligned

INDENT = "    "


def tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """Each tool: name and title, annotations, description, parameters, structured result."""
    count = f"{len(tools)} tool{'s' if len(tools) != 1 else ''}"
    return f"{count}\n" + "".join(f"\n{tool_text(tool)}" for tool in tools)


def tool_text(tool: Mapping[str, Any]) -> str:
    annotations = dict(tool.get("annotations") or {})
    title = tool.get("title") or annotations.pop("title", None)
    lines = [f"{tool['name']}" + (f"  ({title})" if title else "")]
    if annotations:
        hints = ", ".join(f"{name}={json.dumps(value)}" for name, value in annotations.items())
        lines.append(f"{INDENT}annotations: {hints}")
    task_support = (tool.get("execution") or {}).get("taskSupport")
    if task_support:
        lines.append(f"{INDENT}tasks: {task_support}")
    description = (tool.get("description") or "").strip()
    lines += [f"{INDENT}{line}".rstrip() for line in description.splitlines()] or [
        f"{INDENT}(no description)"
    ]
    lines.append(parameters_text(tool.get("inputSchema") or {}))
    output = tool.get("outputSchema")
    if output:
        lines.append(f"{INDENT}structured result: {type_of(output, output)}")
    return "\n".join(lines) + "\n"


def parameters_text(schema: Mapping[str, Any]) -> str:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    closed = " (no others accepted)" if schema.get("additionalProperties") is False else ""
    if not properties:
        return f"{INDENT}no parameters{closed}"
    required = set(schema.get("required") or [])
    rows = [
        [
            f"{INDENT * 2}{name}",
            type_of(spec, schema) + bounds(spec),
            "required" if name in required else _optional(spec),
            (spec.get("description") or "").strip().replace("\n", " "),
        ]
        for name, spec in properties.items()
    ]
    return f"{INDENT}parameters{closed}:\n" + aligned(rows).rstrip("\n")


# JSON Schema's bounds, as a model reads them beside the type.
BOUNDS = {
    "minimum": ">= {}",
    "exclusiveMinimum": "> {}",
    "maximum": "<= {}",
    "exclusiveMaximum": "< {}",
    "minLength": "at least {} chars",
    "maxLength": "at most {} chars",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "pattern": "matching {}",
}


def bounds(spec: Mapping[str, Any]) -> str:
    said = [form.format(spec[name]) for name, form in BOUNDS.items() if name in spec]
    return f" ({', '.join(said)})" if said else ""


def _optional(spec: Mapping[str, Any]) -> str:
    return f"default {json.dumps(spec['default'])}" if "default" in spec else "optional"


def type_of(spec: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    """A JSON Schema's type in a few words: `integer`, `string | null`, `array of string`, `one of ...`."""
    if "$ref" in spec:
        target = _resolve(spec["$ref"], root)
        return type_of(target, root) if target is not None else str(spec["$ref"]).rsplit("/", 1)[-1]
    if "enum" in spec:
        return "one of " + ", ".join(json.dumps(value) for value in spec["enum"])
    if "const" in spec:
        return json.dumps(spec["const"])
    for union in ("anyOf", "oneOf"):
        if union in spec:
            return " | ".join(type_of(option, root) for option in spec[union])
    kind = spec.get("type")
    if isinstance(kind, list):
        return " | ".join(str(name) for name in kind)
    if kind == "array" and isinstance(spec.get("items"), Mapping):
        return f"array of {type_of(spec['items'], root)}"
    if kind == "object" and spec.get("properties"):
        fields = ", ".join(f"{name}: {type_of(sub, root)}" for name, sub in spec["properties"].items())
        return f"object {{{fields}}}"
    return str(kind) if kind else "any"


def _resolve(reference: str, root: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A local `#/$defs/Name` reference, or None."""
    if not reference.startswith("#/"):
        return None
    node: Any = root
    for part in reference[2:].split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Mapping) else None


def result_text(result: Mapping[str, Any]) -> str:
    """A tools/call result: the verdict, the content the model reads, structured content, `_meta`."""
    meta: Mapping[str, Any] = result.get("_meta") or {}
    lines = [verdict(result)]
    content: Sequence[Mapping[str, Any]] = result.get("content") or []
    lines.append("content:" if content else "content: (none)")
    for block in content:
        lines += [f"{INDENT}{line}".rstrip() for line in block_text(block).splitlines() or [""]]
    if "structuredContent" in result:
        lines.append("structuredContent:")
        lines += _indented_json(result["structuredContent"])
    if meta:
        lines.append("_meta:")
        for name, value in meta.items():
            lines.append(f"{INDENT}{name}: {meta_note(name, value)}")
    return "\n".join(lines) + "\n"


def verdict(result: Mapping[str, Any]) -> str:
    if not result.get("isError"):
        return "isError: false"
    error: Mapping[str, Any] = (result.get("_meta") or {}).get("error") or {}
    if not error:
        return "isError: true"
    retryable = "retryable" if error.get("retryable") else "not retryable"
    return f"isError: true  (category {error.get('category')}, {retryable})"


def block_text(block: Mapping[str, Any]) -> str:
    """One content block: text as it is; anything else named with its size or address."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        size = len(str(block.get("data", ""))) * 3 // 4  # base64: 4 characters hold 3 bytes
        return f"[{kind} {block.get('mimeType', '')}, about {size} bytes]"
    if kind == "resource_link":
        return (
            f"[resource link {block.get('uri')}" + (f" ({block['name']})" if block.get("name") else "") + "]"
        )
    if kind == "resource":
        resource: Mapping[str, Any] = block.get("resource") or {}
        body = resource.get("text")
        return f"[resource {resource.get('uri')}]" + (f"\n{body}" if isinstance(body, str) else "")
    return json.dumps(block)


def meta_note(name: str, value: Any) -> str:
    """A `_meta` entry in one line; the core's own ones (idempotency, error, truncated) explained."""
    if name == "idempotency" and isinstance(value, Mapping):
        replayed = value.get("replayed")
        said = "replayed: the stored result, the tool did not run again" if replayed else "new key"
        return f"key {json.dumps(value.get('key'))}, {said}"
    if name == "error" and isinstance(value, Mapping):
        fields = ", ".join(f"{key} {json.dumps(item)}" for key, item in value.items())
        return fields
    if name == "truncated" and isinstance(value, Mapping):
        return f"text cut to {value.get('limit')} bytes of {value.get('bytes')}"
    return json.dumps(value)


def _indented_json(value: Any) -> list[str]:
    return [f"{INDENT}{line}" for line in json.dumps(value, indent=2, ensure_ascii=False).splitlines()]
