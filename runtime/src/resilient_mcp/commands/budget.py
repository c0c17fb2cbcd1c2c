"""The tools/list budget: every tool costs context-window space on every request.

Resources and prompts cost it too, where a client lists them for the model: their
resources/list, resources/templates/list and prompts/list bytes count in the same byte
budget (not in `max_tools`), and each is checked for a description and hidden characters.
So do the server's instructions (the package's instructions.md), which clients give the
model in every conversation: one more row, checked for hidden characters.

Measures the server's tools/list in memory, as the SDK serialises it, and checks it
against the budget chosen at `copier copy` (the `tool_budget` answer), or against a
`[tool.<package>.budget]` table (`max_tools`, `max_list_bytes`) the owner adds to the
project's pyproject.toml to override it. Each tool is also checked for what makes a model misuse it: no
description, parameters without descriptions, and hidden or control characters in
names and descriptions (zero-width and bidi characters, ANSI escapes), which can
smuggle instructions past a human reviewer.

`<command> budget` prints the table; exit 0 within budget and without problems,
1 otherwise, 2 on a usage or configuration error, 78 when the server cannot be built.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tomllib
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mcp.server.mcpserver import MCPServer
from mcp.types import Tool
from pydantic import BaseModel

from resilient_mcp.authoring.errors import EXIT_FATAL_AT_STARTUP, FatalError
from resilient_mcp.project import this_project
from resilient_mcp.records import record
from resilient_mcp.server.startup import write_fatal

if TYPE_CHECKING:
    from resilient_mcp.server.app import OwnerCode

INSTRUCTIONS_ROW: Final = "instructions"  # the budget table's row for the server's instructions
BYTES_PER_TOKEN: Final = 4  # a rough rule for English text and JSON; tokenizers differ
EXIT_WITHIN_BUDGET: Final = 0
EXIT_OVER_BUDGET: Final = 1
EXIT_USAGE: Final = 2
EXIT_FATAL: Final = EXIT_FATAL_AT_STARTUP  # the server cannot be built: its own start-up code

# Invisible in most UIs yet read by the model: zero-width, word joiner, BOM, bidi controls.
_HIDDEN: Final = frozenset(
    [*range(0x200B, 0x200E), 0x2060, 0xFEFF, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


@record
class Budget:
    """How many tools, and how many bytes of tools/list, the server may declare."""

    max_tools: int
    max_list_bytes: int
    source: str = "defaults chosen at copier copy"

    @classmethod
    def chosen_at_copy(cls) -> Budget:
        """The tool_budget answer's limits, before any pyproject.toml table."""
        project = this_project()
        return cls(project.tool_budget, project.tool_list_bytes_budget)


@record
class ToolCost:
    """One tool's share of tools/list and what is wrong with it."""

    name: str
    bytes: int
    problems: tuple[str, ...] = ()
    output_schema_bytes: int = 0  # part of `bytes`: what the declared return type costs

    @property
    def tokens(self) -> int:
        return round(self.bytes / BYTES_PER_TOKEN)


@record
class BudgetReport:
    """The measured tools against a budget."""

    tools: tuple[ToolCost, ...]
    total_bytes: int
    budget: Budget
    others: tuple[ToolCost, ...] = ()  # resources, resource templates and prompts

    @property
    def over_budget(self) -> list[str]:
        over = []
        if len(self.tools) > self.budget.max_tools:
            over.append(f"{len(self.tools)} tools > max_tools {self.budget.max_tools}")
        if self.total_bytes > self.budget.max_list_bytes:
            over.append(f"{self.total_bytes} bytes > max_list_bytes {self.budget.max_list_bytes}")
        return over

    @property
    def problem_count(self) -> int:
        return sum(len(entry.problems) for entry in (*self.tools, *self.others))

    @property
    def ok(self) -> bool:
        return not self.over_budget and not self.problem_count

    def table(self) -> str:
        """The figures per tool, the totals against the budget, and the verdict."""
        rows = [("tool", "bytes", "~tokens", "outputSchema", "problems")]
        for tool in (*self.tools, *self.others):
            problems = tool.problems or ("-",)
            rows.append(
                (tool.name, str(tool.bytes), str(tool.tokens), str(tool.output_schema_bytes), problems[0])
            )
            rows.extend(("", "", "", "", problem) for problem in problems[1:])
        output_bytes = sum(tool.output_schema_bytes for tool in self.tools)
        rows.append(
            (
                f"total ({len(self.tools)} tools)",
                str(self.total_bytes),
                str(self.total_tokens),
                str(output_bytes),
                "",
            )
        )
        rows.append((f"budget ({self.budget.max_tools} tools)", str(self.budget.max_list_bytes), "", "", ""))
        name_width = max(len(row[0]) for row in rows)
        bytes_width = max(len(row[1]) for row in rows)
        verdict = self.over_budget
        if self.problem_count:
            verdict.append(f"{self.problem_count} problem(s) in the entries above")
        return "\n".join(
            [
                f"tools/list budget of {this_project().slug} ({self.budget.source})",
                *(
                    f"{a:<{name_width}}  {b:>{bytes_width}}  {c:>7}  {d:>12}  {e}".rstrip()
                    for a, b, c, d, e in rows
                ),
                f"~tokens = bytes / {BYTES_PER_TOKEN}, a rough estimate; the client's tokenizer decides.",
                "outputSchema: the bytes of the declared return type's schema, included in bytes.",
                "FAILED: " + "; ".join(verdict) if verdict else "OK: within budget, no problems",
            ]
        )

    @property
    def total_tokens(self) -> int:
        return round(self.total_bytes / BYTES_PER_TOKEN)


def wire_json(tool: Tool) -> dict[str, Any]:
    """The tool as tools/list puts it on the wire (camelCase, no nulls)."""
    wire: dict[str, Any] = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
    return wire


def _size(value: object) -> int:
    # Compact separators and raw UTF-8, as the SDK writes its JSON-RPC messages.
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def measure_tools(tools: Sequence[Tool], budget: Budget) -> BudgetReport:
    """Bytes and problems per tool; the total is the bytes of the `{"tools": [...]}` result."""
    wires = [wire_json(tool) for tool in tools]
    costs = tuple(
        ToolCost(
            visible(str(w.get("name"))),
            _size(w),
            tuple(tool_problems(w)),
            _size(w["outputSchema"]) if "outputSchema" in w else 0,
        )
        for w in wires
    )
    return BudgetReport(costs, _size({"tools": wires}), budget)


async def measure(server: MCPServer[Any], budget: Budget | None = None) -> BudgetReport:
    """The tools, then the resources, resource templates and prompts, as their lists send them."""
    report = measure_tools(await server.list_tools(), budget or load_budget())
    lists = {
        "resources": [_wire(item) for item in await server.list_resources()],
        "resourceTemplates": [_wire(item) for item in await server.list_resource_templates()],
        "prompts": [_wire(item) for item in await server.list_prompts()],
    }
    kinds = {"resources": "resource", "resourceTemplates": "template", "prompts": "prompt"}
    others = tuple(
        ToolCost(f"{kinds[key]} {visible(_label(wire))}", _size(wire), tuple(listed_problems(wire)))
        for key, wires in lists.items()
        for wire in wires
    )
    extra = sum(_size({key: wires}) for key, wires in lists.items() if wires)
    if server.instructions:
        instructions = ToolCost(
            INSTRUCTIONS_ROW, _size(server.instructions), tuple(hidden_characters(server.instructions))
        )
        others, extra = (*others, instructions), extra + instructions.bytes
    return replace(report, others=others, total_bytes=report.total_bytes + extra)


def _wire(item: BaseModel) -> dict[str, Any]:
    wire: dict[str, Any] = item.model_dump(by_alias=True, exclude_none=True, mode="json")
    return wire


def _label(wire: Mapping[str, Any]) -> str:
    return str(wire.get("uri") or wire.get("uriTemplate") or wire.get("name"))


def listed_problems(wire: Mapping[str, Any]) -> list[str]:
    """What makes a resource or prompt hard or unsafe for a model to use."""
    problems = []
    if not str(wire.get("description") or "").strip():
        problems.append("no description: the docstring is what the model reads")
    for argument in wire.get("arguments") or []:
        if not str(argument.get("description") or "").strip():
            problems.append(f"argument {visible(str(argument.get('name')))!r} has no description")
    for key in ("name", "title", "description", "uri", "uriTemplate"):
        if isinstance(wire.get(key), str):
            problems += [f"{key} {finding}" for finding in hidden_characters(wire[key], key != "description")]
    for argument in wire.get("arguments") or []:
        for key in ("name", "description"):
            if isinstance(argument.get(key), str):
                found = hidden_characters(argument[key], key == "name")
                problems += [f"argument {key} {finding}" for finding in found]
    return problems


def tool_problems(wire: Mapping[str, Any]) -> list[str]:
    """What makes this tool hard or unsafe for a model to use."""
    problems = []
    if not str(wire.get("description") or "").strip():
        problems.append("no description: the docstring is what the model reads")
    problems += [
        f"parameter {visible(name)!r} has no description" for name in _undescribed(wire.get("inputSchema"))
    ]
    for where, text in _texts(wire):
        problems += [f"{where} {finding}" for finding in hidden_characters(text, where.endswith("name"))]
    return problems


def _undescribed(schema: object) -> Iterator[str]:
    """Parameters without a description: top-level properties, nested objects, and `$defs` models."""
    if not isinstance(schema, dict):
        return
    yield from _walk_properties(schema, "")
    for model, definition in (schema.get("$defs") or {}).items():
        if isinstance(definition, dict):
            yield from _walk_properties(definition, f"{model}.")


def _walk_properties(schema: Mapping[str, Any], prefix: str) -> Iterator[str]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        if not str(prop.get("description") or "").strip():
            yield prefix + name
        yield from _walk_properties(prop, f"{prefix}{name}.")


def _texts(wire: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every name and description the model reads, labelled for the table."""
    for key in ("name", "title", "description"):
        if isinstance(wire.get(key), str):
            yield key, wire[key]
    annotations = wire.get("annotations")
    if isinstance(annotations, dict) and isinstance(annotations.get("title"), str):
        yield "annotations title", annotations["title"]
    for schema_key in ("inputSchema", "outputSchema"):
        yield from _schema_texts(wire.get(schema_key), schema_key)


def _schema_texts(node: object, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield f"{where} description", value
            elif key == "properties" and isinstance(value, dict):
                for name, prop in value.items():
                    yield f"{where}.{visible(name)} name", name
                    yield from _schema_texts(prop, f"{where}.{visible(name)}")
            else:
                yield from _schema_texts(value, where)
    elif isinstance(node, list):
        for item in node:
            yield from _schema_texts(item, where)


def _is_hidden(char: str) -> bool:
    # Co: private-use characters have no agreed glyph; a reviewer sees a box or nothing.
    return ord(char) in _HIDDEN or unicodedata.category(char) in ("Cc", "Cf", "Co")


def visible(text: str) -> str:
    """A name with hidden and control characters spelled out (`\\u200b`), for the table."""
    return "".join(f"\\u{ord(c):04x}" if _is_hidden(c) else c for c in text)


def hidden_characters(text: str, is_name: bool = False) -> list[str]:
    """Hidden or control characters in text: zero-width, bidi, ANSI escapes, other Cc/Cf/Co.

    Newlines and tabs are fine in descriptions, not in names.
    """
    findings = []
    if "\x1b[" in text:
        findings.append("has an ANSI escape sequence (ESC [)")
    allowed = set() if is_name else {"\n", "\t"}
    seen: list[str] = []
    for char in text:
        if char in allowed or char in seen:
            continue
        if _is_hidden(char):
            seen.append(char)
    for char in seen[:3]:
        unnamed = "private-use character" if unicodedata.category(char) == "Co" else "control character"
        label = unicodedata.name(char, unnamed)
        findings.append(f"has hidden character U+{ord(char):04X} {label}")
    if len(seen) > 3:
        findings.append(f"has {len(seen) - 3} more kinds of hidden character")
    return findings


# --- configuration ---------------------------------------------------------


def load_budget(cwd: Path | None = None) -> Budget:
    """`[tool.<package>.budget]` from pyproject.toml in cwd or above this package; else the defaults."""
    for path in _candidate_files(cwd or Path.cwd()):
        table = _budget_table(path)
        if table is not None:
            return Budget(
                max_tools=_positive_int(table, "max_tools", this_project().tool_budget, path),
                max_list_bytes=_positive_int(
                    table, "max_list_bytes", this_project().tool_list_bytes_budget, path
                ),
                source=f"{path} [tool.{this_project().package}.budget]",
            )
    return Budget.chosen_at_copy()


def _candidate_files(cwd: Path) -> Iterator[Path]:
    yield cwd / "pyproject.toml"
    # An editable install or a checkout: the project root is above src/<package>/.
    spec = importlib.util.find_spec(this_project().package)
    if spec is not None and spec.origin is not None:
        for parent in Path(spec.origin).resolve().parents:
            yield parent / "pyproject.toml"


def _budget_table(path: Path) -> Mapping[str, Any] | None:
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        return None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    table = data.get("tool", {}).get(this_project().package, {}).get("budget")
    return table if isinstance(table, dict) else None


def _positive_int(table: Mapping[str, Any], key: str, default: int, path: Path) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{path} [tool.{this_project().package}.budget] {key} = {value!r}: use a positive integer"
        )
    return value


# --- the test's assertion and the command -------------------------------------


def assert_within_budget(report: BudgetReport) -> None:
    """Fail with the table as the message when over budget or when a tool has a problem."""
    __tracebackhide__ = True  # pytest: show the test's line and the table, not this frame
    if not report.ok:
        raise AssertionError("\n" + report.table())


def build_report(owner: OwnerCode, budget: Budget | None = None) -> BudgetReport:
    """Build this project's server from the environment's settings and measure it."""
    import anyio

    from resilient_mcp.server.app import create_server
    from resilient_mcp.server.startup import load_settings

    server = create_server(load_settings(owner.settings_class), owner.tools)
    return anyio.run(measure, server, budget)


def main(argv: Sequence[str] | None, owner: OwnerCode) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} budget",
        description="Print the tools/list budget table: bytes, ~tokens and problems per tool. "
        "Exit 0 within budget and without problems, 1 otherwise, 2 on a usage or "
        "configuration error, 78 when the server cannot be built.",
    )
    parser.add_argument("--max-tools", type=_positive, metavar="N", help="override max_tools")
    parser.add_argument("--max-list-bytes", type=_positive, metavar="N", help="override max_list_bytes")
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_WITHIN_BUDGET
    try:
        budget = load_budget()
    except ValueError as exc:
        sys.stderr.write(f"budget: {exc}\n")
        return EXIT_USAGE
    if options.max_tools is not None or options.max_list_bytes is not None:
        budget = Budget(
            options.max_tools or budget.max_tools,
            options.max_list_bytes or budget.max_list_bytes,
            "command line",
        )
    try:
        report = build_report(owner, budget)
    except FatalError as exc:
        write_fatal(exc)
        return EXIT_FATAL
    sys.stdout.write(report.table() + "\n")
    return EXIT_WITHIN_BUDGET if report.ok else EXIT_OVER_BUDGET


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)
