"""The tool contract: what clients rely on, recorded in contract.json and gated in CI.

`<command> contract` takes the surface the server declares, as its lists send it (tools/list,
resources/list, resources/templates/list, prompts/list: names, schemas, annotations,
descriptions) and the instructions its handshake sends, with each tool's `side_effect`,
`scopes` and `task_support` (when not "forbidden"), which the wire does not show, and writes it
to contract.json at the project root: sorted, the same bytes on every run, owned and committed
by the project. It does not write over a change that breaks clients unless given `--accept`.

`--check` (`nox -s contract`, CI) writes nothing over a recorded contract. It fails on a change
that breaks clients (a tool, resource or prompt removed or renamed, a new required argument, a
narrowed type, a tightened bound, a lost read-only or idempotent hint, a changed `side_effect`,
a new scope, a tool that runs only as a task now) until the change is accepted, and on the
description lint; compatible changes (a new tool, a new optional argument, a new description,
changed instructions) are reported and pass. Where no contract.json exists yet (a new project,
whose CI runs before its owner made one), it writes the first one, lints, and passes saying to
commit it (on GitHub Actions also as a warning on the run): a first push is not a broken build.

The lint is deterministic: a tool, parameter, resource or prompt without a description, a
description too long, hidden characters (in the instructions too), and a fixed list of phrases
that tell the model to ignore other tools or the user.

Exit 0 when nothing fails, 1 otherwise, 2 on a usage error or an unreadable
contract.json, 78 when the server cannot be built.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel

from resilient_mcp.authoring.errors import EXIT_FATAL_AT_STARTUP, FatalError
from resilient_mcp.commands.budget import (
    _texts,
    hidden_characters,
    listed_problems,
    tool_problems,
    visible,
    wire_json,
)
from resilient_mcp.project import this_project
from resilient_mcp.records import record
from resilient_mcp.server.startup import write_fatal

if TYPE_CHECKING:
    from resilient_mcp.server.app import OwnerCode
    from resilient_mcp.server.resilient_server import ResilientServer

CONTRACT_FILE: Final = "contract.json"
FORMAT: Final = 1  # of contract.json; a later layout gets a new number
EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_FATAL: Final = EXIT_FATAL_AT_STARTUP  # the server cannot be built: its own start-up code

# Each list of the surface, keyed by what identifies an entry to a client.
SERVER_INSTRUCTIONS: Final = "instructions"  # the handshake's, from the package's instructions.md
KINDS: Final = {"tools": "name", "resources": "uri", "resourceTemplates": "uriTemplate", "prompts": "name"}
LABELS: Final = {
    "tools": "tool",
    "resources": "resource",
    "resourceTemplates": "resource template",
    "prompts": "prompt",
}

# 1024: the cap some model APIs put on a function's description (OpenAI's), so a client that
# forwards the tool need not cut it; past it, the model reads a manual, not a summary. 300 for a
# parameter: a few sentences, read once per argument on every request.
MAX_DESCRIPTION: Final = 1024
MAX_PARAMETER_DESCRIPTION: Final = 300
# Text that steers the model away from other tools or from the user (lowercase, spaces collapsed).
INSTRUCTIONS: Final = (
    "ignore previous",
    "ignore all previous",
    "ignore all other",
    "ignore any other",
    "ignore other tools",
    "ignore the other tools",
    "ignore the user",
    "disregard previous",
    "disregard all",
    "forget your instructions",
    "forget all previous",
    "do not tell the user",
    "don't tell the user",
    "never tell the user",
    "do not inform the user",
    "without telling the user",
    "instead of any other tool",
    "do not use any other tool",
    "don't use any other tool",
    "never use any other tool",
)
# The spec's defaults for a tool without annotations.
HINT_DEFAULTS: Final = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
_LOWER_BOUNDS: Final = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS: Final = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_MAX_DEPTH: Final = 32  # recursive models: compare this deep, no deeper


# --- the surface --------------------------------------------------------------


async def declared_surface(server: ResilientServer) -> dict[str, Any]:
    """Every list as the server sends it, keyed by name (or URI), with what the wire does not show."""
    tools: dict[str, Any] = {}
    for tool in await server.list_tools():
        wire = wire_json(tool)
        served = server.served.get(tool.name)
        wire["side_effect"] = served is not None and served.spec.side_effect
        wire["scopes"] = sorted(served.spec.scopes) if served is not None else []
        if served is not None and served.spec.task_support != "forbidden":  # absent: as before tasks
            wire["task_support"] = served.spec.task_support
        tools[wire.pop("name")] = wire
    listed: dict[str, Sequence[BaseModel]] = {
        "resources": await server.list_resources(),
        "resourceTemplates": await server.list_resource_templates(),
        "prompts": await server.list_prompts(),
    }
    surface: dict[str, Any] = {"format": FORMAT, "tools": tools}
    for kind, items in listed.items():
        wires = [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items]
        surface[kind] = {wire.pop(KINDS[kind]): wire for wire in wires}
    if server.instructions:  # recorded so a review sees what the model is told; absent when none
        surface[SERVER_INSTRUCTIONS] = server.instructions
    return surface


def serialise(surface: Mapping[str, Any]) -> str:
    """Sorted, indented, ASCII (a hidden character shows as `\\u200b` in a review): stable bytes."""
    return json.dumps(surface, indent=2, sort_keys=True) + "\n"


def build_surface(owner: OwnerCode) -> dict[str, Any]:
    """Build this project's server from the environment's settings, as `budget` does, and read it."""
    import anyio

    from resilient_mcp.server.app import create_server
    from resilient_mcp.server.startup import load_settings

    server = create_server(load_settings(owner.settings_class), owner.tools)

    async def read_then_close() -> dict[str, Any]:
        try:
            return await declared_surface(server)
        finally:
            await server.store.close()

    return anyio.run(read_then_close)


# --- what changed ---------------------------------------------------------------


@dataclass
class Changes:
    """The differences between the recorded contract and the live surface."""

    breaking: list[str] = field(default_factory=list)
    compatible: list[str] = field(default_factory=list)


def compare(recorded: Mapping[str, Any], live: Mapping[str, Any]) -> Changes:
    """What breaks clients that were written against `recorded`, and what does not."""
    changes = Changes()
    for kind, label in LABELS.items():
        old, new = recorded.get(kind) or {}, live.get(kind) or {}
        for key in sorted(old.keys() - new.keys()):
            changes.breaking.append(
                f"{label} {visible(key)!r} was removed (or renamed): clients that use it fail; restore it"
            )
        for key in sorted(new.keys() - old.keys()):
            changes.compatible.append(f"{label} {visible(key)!r} was added")
        for key in sorted(old.keys() & new.keys()):
            if old[key] != new[key]:
                _compare_entry(kind, f"{label} {visible(key)!r}", old[key], new[key], changes)
    if recorded.get(SERVER_INSTRUCTIONS) != live.get(
        SERVER_INSTRUCTIONS
    ):  # guidance, not an interface: never a break
        changes.compatible.append(
            f"the {SERVER_INSTRUCTIONS} changed ({_size(live.get(SERVER_INSTRUCTIONS))} bytes now)"
        )
    return changes


def _size(text: object) -> int:
    return len(text.encode()) if isinstance(text, str) else 0


def _compare_entry(
    kind: str, subject: str, old: Mapping[str, Any], new: Mapping[str, Any], changes: Changes
) -> None:
    found: dict[str, list[tuple[bool, str]]] = {}  # by the key whose change they explain
    if kind == "tools":
        found["inputSchema"] = _schema_changes(old.get("inputSchema"), new.get("inputSchema"), True)
        if "outputSchema" in old and "outputSchema" not in new:
            found["outputSchema"] = [(True, "declares no outputSchema now: clients reading it fail")]
        elif "outputSchema" in old:
            found["outputSchema"] = _schema_changes(old["outputSchema"], new["outputSchema"], False)
        found["annotations"] = list(_hint_changes(old, new))
        if bool(old.get("side_effect")) != bool(new.get("side_effect")):
            was, now = bool(old.get("side_effect")), bool(new.get("side_effect"))
            why = "calls need an idempotency_key" if now else "a retried call may now happen twice"
            found["side_effect"] = [(True, f"side_effect changed from {was} to {now}: {why}")]
        was, now = old.get("task_support", "forbidden"), new.get("task_support", "forbidden")
        if was != now:
            # Only "required" turns a client away (one without the tasks extension gets -32021).
            why = "clients without the tasks extension get -32021" if now == "required" else "compatible"
            found["task_support"] = [(now == "required", f"task_support changed from {was} to {now}: {why}")]
        added = sorted(set(new.get("scopes") or ()) - set(old.get("scopes") or ()))
        if added:
            found["scopes"] = [(True, f"needs the scope(s) {', '.join(added)} now: tokens without them fail")]
    elif kind == "prompts":
        found["arguments"] = list(_argument_changes(old.get("arguments") or [], new.get("arguments") or []))
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) != new.get(key) and not found.get(key):
            found[key] = [(False, f"{key} changed")]
    for breaking, text in (finding for key in sorted(found) for finding in found[key]):
        (changes.breaking if breaking else changes.compatible).append(f"{subject}: {text}")


def _hint_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[tuple[bool, str]]:
    """The annotations a client acts on: it runs read-only tools unasked and retries idempotent ones."""
    was, now = _effective_hints(old), _effective_hints(new)
    if was["readOnlyHint"] and not now["readOnlyHint"]:
        yield (
            True,
            "is no longer read-only: clients that run read-only tools without asking would change things",
        )
    if now["destructiveHint"] and not was["destructiveHint"]:
        yield True, "is destructive now: clients that run it without asking would destroy things"
    if was["idempotentHint"] and not now["idempotentHint"]:
        yield True, "is no longer idempotent: clients that retry it would repeat its effect"
    if now["openWorldHint"] and not was["openWorldHint"]:
        yield True, "reaches the open world now: clients that allowed it as closed would not expect that"
    if old.get("annotations") != new.get("annotations") and was == now:
        yield False, "annotations changed"


def _effective_hints(wire: Mapping[str, Any]) -> dict[str, bool]:
    given = wire.get("annotations") or {}
    hints = {name: bool(given.get(name, default)) for name, default in HINT_DEFAULTS.items()}
    # Destructive and idempotent mean something only for a tool that changes things.
    if hints["readOnlyHint"]:
        hints["destructiveHint"], hints["idempotentHint"] = False, True
    return hints


def _argument_changes(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[bool, str]]:
    before = {str(argument.get("name")): argument for argument in old}
    after = {str(argument.get("name")): argument for argument in new}
    for name in sorted(before.keys() - after.keys()):
        yield True, f"argument {visible(name)!r} was removed: clients that pass it fail"
    for name in sorted(after.keys() - before.keys()):
        if after[name].get("required"):
            yield True, f"new required argument {visible(name)!r}: clients that do not pass it fail"
        else:
            yield False, f"new optional argument {visible(name)!r}"
    for name in sorted(before.keys() & after.keys()):
        if after[name].get("required") and not before[name].get("required"):
            yield True, f"argument {visible(name)!r} is required now: clients that leave it out fail"


# --- JSON Schema: narrowed inputs, widened outputs -------------------------------


@record
class _Side:
    """One schema being walked: its root (for `$ref`) and the node at hand."""

    root: Mapping[str, Any]
    node: Mapping[str, Any]


def _schema_changes(old: object, new: object, is_input: bool) -> list[tuple[bool, str]]:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [] if old == new else [(is_input, "schema replaced")]
    found: list[tuple[bool, str]] = []
    _walk(_Side(old, old), _Side(new, new), "", is_input, found, 0)
    return found


def _walk(
    old: _Side, new: _Side, path: str, is_input: bool, found: list[tuple[bool, str]], depth: int
) -> None:
    if depth > _MAX_DEPTH:
        return
    old_node, old_types = _flatten(old)
    new_node, new_types = _flatten(new)
    where = _where(path, is_input)
    if old_types is not None and new_types is not None and old_types != new_types:
        # Inputs may accept more; outputs may return less.
        lost = _uncovered(old_types, new_types) if is_input else _uncovered(new_types, old_types)
        if lost:
            verb = "accepts" if is_input else "may return"
            found.append((True, f"{where} {verb} {_types_text(new_types)} now, not {_types_text(old_types)}"))
        else:
            found.append((False, f"{where} type is {_types_text(new_types)} now"))
    if is_input:
        found.extend((True, f"{where} {text}") for text in _narrowed(old_node, new_node))
    else:
        found.extend((True, f"{where} {text}") for text in _widened_output(old_node, new_node))
    _walk_properties(old.root, old_node, new.root, new_node, path, is_input, found, depth)
    old_items, new_items = old_node.get("items"), new_node.get("items")
    if isinstance(old_items, dict) and isinstance(new_items, dict):
        _walk(_Side(old.root, old_items), _Side(new.root, new_items), f"{path}[]", is_input, found, depth + 1)


def _walk_properties(
    old_root: Mapping[str, Any],
    old_node: Mapping[str, Any],
    new_root: Mapping[str, Any],
    new_node: Mapping[str, Any],
    path: str,
    is_input: bool,
    found: list[tuple[bool, str]],
    depth: int,
) -> None:
    old_properties, new_properties = _properties(old_node), _properties(new_node)
    old_required, new_required = set(old_node.get("required") or ()), set(new_node.get("required") or ())
    for name in sorted(old_properties.keys() - new_properties.keys()):
        what = "clients that pass it fail" if is_input else "clients that read it fail"
        found.append((True, f"{_where(path + '.' + name, is_input)} was removed: {what}"))
    for name in sorted(new_properties.keys() - old_properties.keys()):
        where = _where(path + "." + name, is_input)
        if is_input and name in new_required:
            found.append((True, f"new required {where}: clients that do not pass it fail; give it a default"))
        else:
            found.append((False, f"new {'optional ' if is_input else ''}{where}"))
    for name in sorted(old_properties.keys() & new_properties.keys()):
        where = _where(path + "." + name, is_input)
        if is_input and name in new_required and name not in old_required:
            found.append(
                (True, f"{where} is required now: clients that leave it out fail; give it a default")
            )
        if not is_input and name in old_required and name not in new_required:
            found.append((True, f"{where} may be missing now: clients that read it fail"))
        old_child, new_child = old_properties[name], new_properties[name]
        if isinstance(old_child, dict) and isinstance(new_child, dict):
            _walk(
                _Side(old_root, old_child),
                _Side(new_root, new_child),
                path + "." + name,
                is_input,
                found,
                depth + 1,
            )


def _properties(node: Mapping[str, Any]) -> Mapping[str, Any]:
    properties = node.get("properties")
    return properties if isinstance(properties, dict) else {}


def _narrowed(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[str]:
    """What the new input schema refuses that the old one accepted."""
    allowed_before, allowed_now = _allowed(old), _allowed(new)
    if allowed_now is not None:
        if allowed_before is None:
            yield f"accepts only {allowed_now} now"
        elif lost := [value for value in allowed_before if _key(value) not in set(map(_key, allowed_now))]:
            yield f"no longer accepts {lost}"
    for key in _LOWER_BOUNDS:
        if key in new and (key not in old or new[key] > old[key]):
            yield _bound_text(key, old.get(key), new[key])
    for key in _UPPER_BOUNDS:
        if key in new and (key not in old or new[key] < old[key]):
            yield _bound_text(key, old.get(key), new[key])
    for key in ("pattern", "multipleOf"):
        if key in new and old.get(key) != new[key]:
            yield _bound_text(key, old.get(key), new[key])
    if new.get("additionalProperties") is False and old.get("additionalProperties") is not False:
        yield "accepts no other properties now"


def _widened_output(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[str]:
    """Values the new output schema may return that a client of the old one does not expect."""
    allowed_before, allowed_now = _allowed(old), _allowed(new)
    if allowed_before is None:
        return
    if allowed_now is None:
        yield f"may return any value now, not only {allowed_before}"
    elif gained := [value for value in allowed_now if _key(value) not in set(map(_key, allowed_before))]:
        yield f"may return {gained} now"


def _allowed(node: Mapping[str, Any]) -> list[Any] | None:
    """The values an `enum` (or a `const`, one value) allows; None when any value of the type is."""
    if isinstance(node.get("enum"), list):
        return list(node["enum"])
    return [node["const"]] if "const" in node else None


def _bound_text(key: str, old: object, new: object) -> str:
    return f"{key} is {new!r} now (was {'unset' if old is None else repr(old)})"


def _where(path: str, is_input: bool) -> str:
    if not path:
        return "the input" if is_input else "the output"
    return f"{'argument' if is_input else 'output field'} {visible(path.lstrip('.'))!r}"


def _flatten(side: _Side) -> tuple[Mapping[str, Any], frozenset[str] | None]:
    """The node with `$ref` resolved and `X | None` seen as X; and the JSON types it allows."""
    node = _resolve(side.root, side.node)
    union = node.get("anyOf") or node.get("oneOf")
    if not isinstance(union, list):
        return node, _types(node)
    members = [_resolve(side.root, member) for member in union if isinstance(member, dict)]
    member_types = [_types(member) for member in members]
    types = None if None in member_types else frozenset().union(*(t for t in member_types if t is not None))
    values = [member for member in members if member.get("type") != "null"]
    if len(values) == 1:
        rest = {key: value for key, value in node.items() if key not in ("anyOf", "oneOf")}
        return {**values[0], **rest}, types
    return node, types


def _resolve(root: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    for _ in range(_MAX_DEPTH):
        reference = node.get("$ref")
        if not isinstance(reference, str) or not reference.startswith("#/$defs/"):
            return node
        target = (root.get("$defs") or {}).get(reference.removeprefix("#/$defs/"))
        if not isinstance(target, dict):
            return node
        node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return node


def _types(node: Mapping[str, Any]) -> frozenset[str] | None:
    declared = node.get("type")
    if isinstance(declared, str):
        return frozenset([declared])
    if isinstance(declared, list):
        return frozenset(str(name) for name in declared)
    return None  # an enum or const alone, `{}`, or a union: the checks beside the type decide


def _uncovered(wanted: frozenset[str], offered: frozenset[str]) -> frozenset[str]:
    """The types in `wanted` that `offered` does not allow (a number allows an integer)."""
    return frozenset(t for t in wanted if t not in offered and not (t == "integer" and "number" in offered))


def _types_text(types: frozenset[str]) -> str:
    return " or ".join(sorted(types))


def _key(value: object) -> str:
    return json.dumps(value, sort_keys=True)


# --- the description lint ---------------------------------------------------------


def lint(surface: Mapping[str, Any]) -> list[str]:
    """What makes an entry hard or unsafe for a model to use, each with what to do about it."""
    problems = []
    for kind, label in LABELS.items():
        for key, entry in sorted((surface.get(kind) or {}).items()):
            wire = {KINDS[kind]: key, **entry}
            found = tool_problems(wire) if kind == "tools" else listed_problems(wire)
            found += _too_long(wire, kind == "tools")
            found += _instructions(wire, kind == "tools")
            problems += [f"{label} {visible(key)!r}: {problem}: {_fix(problem)}" for problem in found]
    found = hidden_characters(str(surface.get(SERVER_INSTRUCTIONS) or ""))
    problems += [f"{SERVER_INSTRUCTIONS} {problem}: {_fix(problem)}" for problem in found]
    return problems


def _too_long(wire: Mapping[str, Any], is_tool: bool) -> list[str]:
    found = []
    description = str(wire.get("description") or "")
    if len(description) > MAX_DESCRIPTION:
        found.append(f"description is {len(description)} characters, over {MAX_DESCRIPTION}")
    described = _parameter_descriptions(wire.get("inputSchema")) if is_tool else _argument_descriptions(wire)
    for name, text in described:
        if len(text) > MAX_PARAMETER_DESCRIPTION:
            found.append(
                f"parameter {visible(name)!r} description is {len(text)} characters, "
                f"over {MAX_PARAMETER_DESCRIPTION}"
            )
    return found


def _instructions(wire: Mapping[str, Any], is_tool: bool) -> list[str]:
    texts = list(_texts(wire)) if is_tool else [("description", str(wire.get("description") or ""))]
    if not is_tool:
        texts += [(f"argument {name}", text) for name, text in _argument_descriptions(wire)]
    found = []
    for where, text in texts:
        plain = re.sub(r"\s+", " ", text.replace("\u2019", "'")).lower()
        for phrase in INSTRUCTIONS:
            if phrase in plain:
                found.append(f"{where} says {phrase!r}, an instruction to the model")
    return found


def _parameter_descriptions(schema: object, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(name, description) of each parameter: top-level, nested, and the properties of `$defs` models."""
    if not isinstance(schema, dict):
        return
    for name, prop in (schema.get("properties") or {}).items():
        if isinstance(prop, dict):
            if isinstance(prop.get("description"), str):
                yield prefix + name, prop["description"]
            yield from _parameter_descriptions(prop, f"{prefix}{name}.")
    for model, definition in (schema.get("$defs") or {}).items():
        yield from _parameter_descriptions(definition, f"{model}.")


def _argument_descriptions(wire: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for argument in wire.get("arguments") or []:
        if isinstance(argument.get("description"), str):
            yield str(argument.get("name")), argument["description"]


def _fix(problem: str) -> str:
    if "an instruction to the model" in problem:
        return (
            "describe what it does; a description must not steer the model away from other tools or the user"
        )
    if "characters, over" in problem:
        return "shorten it; detail belongs in the result or in a resource"
    if "hidden character" in problem or "ANSI" in problem:
        return "remove it (it is invisible to a reviewer, not to the model)"
    if problem.startswith("no description"):
        return "write a docstring"
    return "describe it with Annotated[..., Field(description=...)]"


# --- the command ------------------------------------------------------------------


def project_root(start: Path | None = None) -> Path:
    """The nearest directory from `start` (the working directory) up that has a pyproject.toml."""
    here = (start or Path.cwd()).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / "pyproject.toml").is_file()), here)


def read_contract(path: Path) -> dict[str, Any] | None:
    """The recorded surface, or None when there is no file; ValueError when it cannot be read."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(recorded, dict) or recorded.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a contract of format {FORMAT}: run `{this_project().slug} contract --accept`"
        )
    return recorded


def gate(
    live: Mapping[str, Any], path: Path, *, accept: bool = False, check: bool = False
) -> tuple[int, list[str]]:
    """Compare, lint, and write unless checking; the exit code and the lines to print."""
    recorded = read_contract(path)
    problems = lint(live)
    lines = [f"LINT {problem}" for problem in problems]
    accept_hint = f"`{this_project().slug} contract --accept`, commit {path.name}, and tell your clients"
    first = recorded is None and check
    if first:
        lines.insert(0, record_first(live, path))
    changes = Changes() if recorded is None else compare(recorded, live)
    lines = [
        *(f"BREAKING {change}; or accept the break: {accept_hint}" for change in changes.breaking),
        *(f"CHANGED {change} (compatible)" for change in changes.compatible),
        *lines,
    ]
    refused = bool(changes.breaking) and not accept
    if not check and not refused:
        text = serialise(live)
        if recorded is None or serialise(recorded) != text:
            path.write_text(text, encoding="utf-8")
            lines.append(f"wrote {path}: commit it")
        else:
            lines.append(f"{path} is up to date")
    failures = [f"{len(problems)} lint problem(s)"] if problems else []
    if refused:
        failures.insert(0, f"{len(changes.breaking)} change(s) break clients")
    if failures:
        return EXIT_FAILED, [*lines, "FAILED: " + "; ".join(failures)]
    if first:
        new = f"OK: {path.name} is new (commit it): {_counts(live)} linted, no change checked"
        return EXIT_OK, [*lines, new]
    recorded_note = (
        f"; {len(changes.compatible)} compatible change(s) not recorded: run `{this_project().slug} contract`"
    )
    note = recorded_note if check and changes.compatible else ""
    return EXIT_OK, [*lines, f"OK: {path.name} holds for {_counts(live)}{note}"]


# The first line of a check that found no contract: it recorded one (or says why it could not).
FIRST_RECORD: Final = "NEW"


def record_first(live: Mapping[str, Any], path: Path) -> str:
    """A check with no contract yet (a new project): record this surface as the first one."""
    name, slug = path.name, this_project().slug
    try:
        path.write_text(serialise(live), encoding="utf-8")
    except OSError as exc:
        return (
            f"{FIRST_RECORD} no {name} to check against, and {path} could not be written "
            f"({exc.strerror or exc}): run `{slug} contract` and commit {name}"
        )
    return (
        f"{FIRST_RECORD} no {name} to check against yet: wrote {path} from the server as it is now; "
        f"commit it (`git add {name} && git commit`), so that a change that breaks clients fails here"
    )


def github_warning() -> str:
    """The line GitHub Actions shows as a warning on the run's page, not only in its log."""
    return (
        f"::warning title=No {CONTRACT_FILE} committed::run `{this_project().slug} contract` and commit "
        f"{CONTRACT_FILE}: until then this check compares nothing, and a change that breaks clients passes"
    )


def _counts(surface: Mapping[str, Any]) -> str:
    return ", ".join(f"{len(surface.get(kind) or {})} {kind}" for kind in KINDS)


def main(argv: Sequence[str] | None, owner: OwnerCode) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} contract",
        description=f"Record the declared surface (tools, resources, prompts) in {CONTRACT_FILE}, "
        "or check it: a change that breaks clients fails until accepted; descriptions are linted. "
        "Exit 0 when nothing fails, 1 otherwise, 2 on a usage error or an unreadable contract, "
        "78 when the server cannot be built.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="fail on a breaking change or lint, writing nothing (CI); with no contract yet, write the first",
    )
    mode.add_argument(
        "--accept", action="store_true", help="write the contract even over changes that break clients"
    )
    parser.add_argument(
        "--file",
        type=Path,
        metavar="PATH",
        help=f"the contract (default: {CONTRACT_FILE} at the project root)",
    )
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    path = options.file or project_root() / CONTRACT_FILE
    try:
        live = build_surface(owner)
    except FatalError as exc:
        write_fatal(exc)
        return EXIT_FATAL
    try:
        code, lines = gate(live, path, accept=options.accept, check=options.check)
    except ValueError as exc:
        sys.stderr.write(f"contract: {exc}\n")
        return EXIT_USAGE
    if lines[0].startswith(f"{FIRST_RECORD} ") and os.environ.get("GITHUB_ACTIONS") == "true":
        lines.append(github_warning())
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return code
