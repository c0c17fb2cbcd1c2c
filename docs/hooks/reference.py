"""The reference pages, written from the runtime library at build time so that they cannot drift.

A page under `reference/` holds a marker line, `<!-- reference: NAME -->`; this MkDocs hook
replaces it with the table or text NAME stands for, read from the installed `resilient_mcp`:
the settings from `CoreSettings`, the error categories from the library's category list, the
commands from their own argparse parsers (found by running each command's entry point, so a
new command appears without an edit here) and the exit codes from the `EXIT_*` constants.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import os
import pkgutil
import re
import sys
import tokenize
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

SLUG, PREFIX = "<slug>", "<PREFIX>"
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)
STAND_IN_PACKAGE = "docs_stand_in_project"  # the owner's package the commands import, empty
HELP_COLUMNS = "80"  # argparse wraps help to the terminal's width: one that fits the code boxes

# What each category means, in the words of the generated README's table. The library's list
# of categories (and whether each is retryable) is the truth: a category missing here, or one
# here that the library no longer has, fails the build.
CATEGORY_MEANINGS = {
    "unknown_tool": "the tool name is not declared (the message lists them, with a did-you-mean)",
    "invalid_input": "arguments break the schema, or the tool raised `ToolInputError` / `ValueError`",
    "transient": "`TransientError`; for tools without side effects also `ConnectionError`, "
    "`TimeoutError`; after bounded retries",
    "timeout": "a tool without side effects ran past its time limit (`@tool(timeout_s=...)` or "
    "`TOOL_TIMEOUT_S`)",
    "conflict": "an idempotency key reused with other arguments, or still in progress (then a retry "
    "later can help)",
    "in_doubt": "a side-effecting call may or may not have taken effect: it failed after it started, "
    "ran past its time limit, was cancelled, or an earlier attempt with this key crashed; it is never "
    "re-run on its own",
    "terminal": "the tool raised `TerminalError`: a business rule said no",
    "internal": "any other exception: the client sees only the correlation id",
    "fatal": "the tool raised `FatalError` (or `SystemExit`, `KeyboardInterrupt`): the call is "
    "answered, then the server exits 70",
    "partial": "the tool raised `PartialResult`: what worked is in the content, per-part status in "
    "`structuredContent` (retryable when a failed part is)",
    "forbidden": "OAuth: the caller's token lacks a scope the tool needs (`@tool(scopes=...)`), for a "
    "2025-11-25 client; the message names the scope",
    "too_large": "a result with structured content is over `MAX_RESULT_BYTES` (or "
    "`@tool(max_result_bytes=...)`); text-only results are cut instead",
    "rate_limited": "over `RATE_LIMIT`, `MAX_CONCURRENT_CALLS` or the tool's `rate_limit` / "
    "`max_concurrency`; nothing ran; `_meta.error.retry_after_s` says when to try again",
}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs hook: each marker replaced by what it names."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in WRITERS:
            raise PluginError(
                f"{page.file.src_uri}: no reference named {name!r}; known: {', '.join(WRITERS)}"
            )
        return WRITERS[name]()

    return MARKER.sub(replace, markdown)


# --- Settings -------------------------------------------------------------------------------


def settings_table() -> str:
    from resilient_mcp.authoring.settings import CoreSettings

    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, field in CoreSettings.model_fields.items():
        variable = f"`{PREFIX}{name.upper()}`"
        kind = type_words(field.annotation) + bounds(field.metadata)
        rows.append(f"| {variable} | {kind} | {default_words(field)} | {cell(field.description or '')} |")
    return "\n".join(rows)


def type_words(annotation: Any) -> str:
    """A field's type as an owner writes its value in the environment."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_words(args[0])
    if origin in (types.UnionType, typing.Union):
        present = [arg for arg in args if arg is not type(None)]
        return " or ".join(type_words(arg) for arg in present) + ", or unset"
    if origin is typing.Literal:
        return " / ".join(f"`{arg}`" for arg in args)
    if origin is list:
        return "comma-separated list"
    names = {bool: "`true` / `false`", int: "integer", float: "number", str: "text", Path: "path"}
    return names.get(
        annotation, getattr(annotation, "__name__", str(annotation)).replace("SecretStr", "secret")
    )


def bounds(metadata: list[Any]) -> str:
    words = {"gt": "> {}", "ge": "≥ {}", "lt": "< {}", "le": "≤ {}"}
    found = [
        words[key].format(getattr(item, key)) for item in metadata for key in words if hasattr(item, key)
    ]
    return f" ({', '.join(found)})" if found else ""


def default_words(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        if field.default_factory is list:
            return "empty"
        # A computed default says what it is in its docstring's first clause.
        doc = (field.default_factory.__doc__ or field.default_factory.__name__).split(";")[0]
        return cell(doc.strip().rstrip(".").lower())
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None:
        return "unset"
    value = field.default
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def cell(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


# --- Error categories -----------------------------------------------------------------------


def categories_table() -> str:
    from resilient_mcp.authoring.outcomes import RETRYABLE, Category

    categories = list(typing.get_args(Category))
    missing = [name for name in categories if name not in CATEGORY_MEANINGS]
    stale = [name for name in CATEGORY_MEANINGS if name not in categories]
    if missing or stale:
        raise PluginError(
            f"docs/hooks/reference.py: CATEGORY_MEANINGS is out of step with the library's categories "
            f"(describe: {missing or 'none'}; remove: {stale or 'none'})"
        )
    rows = ["| category | when | retryable |", "|---|---|---|"]
    for name in categories:
        rows.append(f"| `{name}` | {CATEGORY_MEANINGS[name]} | {'yes' if RETRYABLE[name] else 'no'} |")
    return "\n".join(rows)


# --- Commands -------------------------------------------------------------------------------


class CapturedParser(BaseException):
    """Raised instead of parsing: carries the parser a command built (BaseException, so that a
    command's own `except SystemExit` or `except Exception` lets it through)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@contextlib.contextmanager
def served_stand_in() -> Iterator[None]:
    """A project for the commands to name (`<slug>`, `<PREFIX>`), with an empty owner package,
    invoked as `<slug>` in a terminal of HELP_COLUMNS; everything put back after."""
    from resilient_mcp.authoring.settings import CoreSettings
    from resilient_mcp.project import Project, project_if_set, use_project

    package = types.ModuleType(STAND_IN_PACKAGE)
    package.__path__ = []
    tools = types.ModuleType(f"{STAND_IN_PACKAGE}.tools")
    tools.__path__ = []
    settings = types.ModuleType(f"{STAND_IN_PACKAGE}.settings")
    settings.Settings = CoreSettings  # type: ignore[attr-defined]
    modules = {module.__name__: module for module in (package, tools, settings)}
    before, argv, columns = project_if_set(), sys.argv, os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    sys.modules.update(modules)
    use_project(Project(slug=SLUG, package=STAND_IN_PACKAGE, env_prefix=PREFIX, description="Your server."))
    sys.argv = [SLUG]  # as the command is invoked: some help names the command from it
    try:
        yield
    finally:
        sys.argv = argv
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
        for name in modules:
            sys.modules.pop(name, None)
        if before is not None:
            use_project(before)


def parser_of(entry: Callable[[], object]) -> argparse.ArgumentParser:
    """The first parser `entry` parses its arguments with, caught before it parses."""

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise CapturedParser(self)

    patched = {name: getattr(argparse.ArgumentParser, name) for name in ("parse_args", "parse_known_args")}
    try:
        for name in patched:
            setattr(argparse.ArgumentParser, name, capture)
        entry()
    except CapturedParser as captured:
        return captured.parser
    finally:
        for name, original in patched.items():
            setattr(argparse.ArgumentParser, name, original)
    raise PluginError(f"{entry!r} returned without parsing its arguments")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def help_of(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip()


def commands_page() -> str:
    from resilient_mcp.commands import cli

    sections: list[str] = []
    with served_stand_in():
        top = parser_of(lambda: cli.main([]))
        sections.append(command_section(SLUG, top, level=2, nested=False))
        for name, stub in subcommands(top).items():
            # A command whose module parses its own arguments builds its own parser; the others
            # are the top parser's subparsers.
            parser = parser_of(lambda name=name: cli.main([name, "--help"]))  # type: ignore[misc]
            own = parser.prog != top.prog
            sections.append(command_section(f"{SLUG} {name}", parser if own else stub, level=2))
    return "\n\n".join(sections)


def command_section(title: str, parser: argparse.ArgumentParser, *, level: int, nested: bool = True) -> str:
    lines = [f"{'#' * level} `{title}`", "", "```text", help_of(parser), "```"]
    if nested:
        for name, sub in subcommands(parser).items():
            lines += ["", command_section(f"{title} {name}", sub, level=level + 1)]
    return "\n".join(lines)


# --- Exit codes -----------------------------------------------------------------------------


def exit_codes_page() -> str:
    import resilient_mcp.commands as commands
    from resilient_mcp.authoring import errors

    by_command: dict[str, dict[str, tuple[int, str]]] = {}
    for info in pkgutil.walk_packages(commands.__path__, f"{commands.__name__}."):
        if info.ispkg or info.name.endswith("__main__"):  # a package re-exports; __main__ runs
            continue
        command = info.name.removeprefix(f"{commands.__name__}.").split(".")[0].replace("_", "-")
        by_command.setdefault(command, {}).update(exit_constants(importlib.import_module(info.name)))
    sections = [
        exit_table("The server: `serve`, `check`, and any command that builds it", exit_constants(errors))
    ]
    sections += [exit_table(f"`{SLUG} {name}`", codes) for name, codes in sorted(by_command.items()) if codes]
    return "\n\n".join(sections)


def exit_constants(module: types.ModuleType) -> dict[str, tuple[int, str]]:
    """The `EXIT_*` integers a module defines (not those it imports), with their line's comment."""
    path = Path(module.__file__ or "")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {
        target.id
        for statement in tree.body
        if isinstance(statement, ast.Assign | ast.AnnAssign)
        for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
        if isinstance(target, ast.Name) and target.id.startswith("EXIT_")
    }
    comments = trailing_comments(path)
    return {
        name: (value, comments.get(name, name.removeprefix("EXIT_").replace("_", " ").lower()))
        for name in defined
        if type(value := getattr(module, name)) is int
    }


def exit_table(title: str, codes: dict[str, tuple[int, str]]) -> str:
    rows = [f"## {title}", "", "| code | name | meaning |", "|---|---|---|"]
    for name, (value, meaning) in sorted(codes.items(), key=lambda item: (item[1][0], item[0])):
        rows.append(f"| {value} | `{name}` | {cell(meaning)} |")
    return "\n".join(rows)


def trailing_comments(path: Path) -> dict[str, str]:
    """`EXIT_NAME = value  # comment` lines of a module: the comment, by name."""
    found: dict[str, str] = {}
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            name = token.line.split("=")[0].split(":")[0].strip()
            if (
                token.type == tokenize.COMMENT
                and name.startswith("EXIT_")
                and not token.line.lstrip().startswith("#")
            ):
                found[name] = token.string.lstrip("# ").strip()
    return found


WRITERS: dict[str, Callable[[], str]] = {
    "settings": settings_table,
    "error-categories": categories_table,
    "commands": commands_page,
    "exit-codes": exit_codes_page,
}
