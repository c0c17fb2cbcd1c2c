"""No secret of the corpus reaches a client or the log, whichever way a tool, a resource, a
prompt or a completer fails with it; no path of the server's machine reaches a client.

Every form of secrets_corpus.py goes through every raise path of secret_tools/leaks.py (and,
as an argument value the schema refuses, through validation), in both eras, over stdio and
HTTP: the client's whole answer (a result, or the JSON-RPC error of a resource, a prompt, a
completion or an `MCPError` raised on purpose) and the server's log must hold none of it, and
the texts that hold no secret must reach the client as they were. One server per transport,
many calls.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, PromptReference

from secrets_corpus import DATA_PASSWORD, FORMS, NEGATIVES, PATHS, PROTOCOL_ERROR_CODE, Planted, leaks
from support import ANSWER_TIMEOUT_S, HERE, http_server, server_argv, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.network]

SECRET_TOOLS = HERE / "secret_tools"
Mode = Literal["legacy", "auto"]
ERAS: list[Mode] = ["legacy", "auto"]
# Raise paths whose message the client sees whole (the negatives must come through as they were).
SHOWN = (
    "value",
    "tool_input",
    "terminal",
    "transient",
    "sdk_tool_error",
    "partial",
    "mcp_error",
    "resource_error",
    "resource_transient",
    "resource_mcp_error",
    "prompt_mcp_error",
    "completion_mcp_error",
)
# Paths whose text the client sees cut or not at all; the log gets it.
OTHERS = ("validation_shown", "internal", "validation", "logged", "group", "resource_group")
# The text as the value of an integer argument, of a tool or a prompt: refused, the value quoted.
ARGUMENTS = ("argument", "prompt_argument")
PROTOCOL = "protocol"  # the MCPError raised on purpose, its code kept
CATEGORIES = {
    "value": "invalid_input",
    "tool_input": "invalid_input",
    "terminal": "terminal",
    "transient": "transient",
    "sdk_tool_error": "terminal",
    "partial": "partial",
    "mcp_error": PROTOCOL,
    "resource_error": "terminal",
    "resource_transient": "transient",
    "resource_mcp_error": PROTOCOL,
    "prompt_mcp_error": PROTOCOL,
    "completion_mcp_error": PROTOCOL,
    "validation_shown": "invalid_input",
    "internal": "internal",
    "validation": "internal",
    "logged": None,
    "group": "internal",
    "resource_group": "internal",
    "argument": "invalid_input",
    "prompt_argument": "invalid_input",
}
CONCURRENT_CALLS = 8
Answer = CallToolResult | MCPError | Any  # Any: a request that should have failed and did not


def strings(value: Any) -> list[str]:
    """Every text inside a JSON value (keys too): what a reader of it sees, escapes undone."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [key, *strings(item)]]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


def seen_by_client(answer: Answer) -> str:
    dumped = (answer.error if isinstance(answer, MCPError) else answer).model_dump_json(by_alias=True)
    return "\n".join([dumped, *strings(json.loads(dumped))])


def category_of(answer: Answer) -> str | None:
    """A failed call's `_meta.error.category`; a JSON-RPC error's `data.category`, or PROTOCOL for
    the MCPError the leak tools raise on purpose."""
    if isinstance(answer, CallToolResult):
        category: str | None = (answer.meta or {}).get("error", {}).get("category")
        return category
    if isinstance(answer, MCPError):
        data = answer.error.data
        if isinstance(data, dict) and "category" in data:
            return str(data["category"])
        return PROTOCOL if answer.error.code == PROTOCOL_ERROR_CODE else f"code {answer.error.code}"
    return None


def correlation_id_of(answer: Answer) -> str | None:
    if isinstance(answer, CallToolResult):
        correlation_id: str | None = (answer.meta or {}).get("error", {}).get("correlation_id")
        return correlation_id
    if isinstance(answer, MCPError) and isinstance(answer.error.data, dict):
        return answer.error.data.get("correlation_id")
    return None


class Case:
    def __init__(
        self, transport: str, era: Mode, how: str, form: Planted | None, negative: int | None = None
    ) -> None:
        self.transport, self.era, self.how, self.form = transport, era, how, form
        self.negative = None if negative is None else NEGATIVES[negative]
        self.text = form.text if form is not None else str(self.negative)
        # What a resource's URI names: the corpus's text by its name (the leak resource looks it up).
        self.planted = form.name if form is not None else f"negative-{negative}"
        self.tag = f"{transport}/{era}/{self.planted}/{how}"
        self.answer: Answer = None

    def __str__(self) -> str:
        name = self.form.name if self.form is not None else f"negative {self.negative!r}"
        return f"{name} through {self.how} ({self.era}, {self.transport})"


def cases_for(transport: str, era: Mode) -> list[Case]:
    forms = [Case(transport, era, how, form) for form in FORMS for how in (*SHOWN, *OTHERS, *ARGUMENTS)]
    paths = [Case(transport, era, how, form) for form in PATHS for how in (*SHOWN, *ARGUMENTS)]
    negatives = [Case(transport, era, how, None, index) for index in range(len(NEGATIVES)) for how in SHOWN]
    return forms + paths + negatives


async def answer_to(client: Client, case: Case) -> Answer:
    """The request the case's path takes; a JSON-RPC error is its answer too."""
    how, text = case.how, case.text
    try:
        if how == "argument":
            return await client.call_tool("count_to", {"count": text})
        if how == "prompt_argument":
            return await client.get_prompt("count_prompt", {"count": text})
        if how.startswith("resource_"):
            return await client.read_resource(f"leak://{how.removeprefix('resource_')}/{case.planted}")
        if how == "prompt_mcp_error":
            return await client.get_prompt("leak_prompt", {"text": text})
        if how == "completion_mcp_error":
            leak_prompt = PromptReference(type="ref/prompt", name="leak_prompt")
            return await client.complete(leak_prompt, {"name": "text", "value": text})
        return await client.call_tool("leak", {"how": how, "text": text, "tag": case.tag})
    except MCPError as error:
        return error


async def run_cases(client: Client, cases: list[Case]) -> None:
    limit = anyio.Semaphore(CONCURRENT_CALLS)

    async def run(case: Case) -> None:
        async with limit:
            case.answer = await answer_to(client, case)

    with anyio.fail_after(ANSWER_TIMEOUT_S * 2):
        async with anyio.create_task_group() as group:
            for case in cases:
                group.start_soon(run, case)


def log_by_call(log: str) -> tuple[dict[str, list[str]], dict[str, str], list[str]]:
    """The log's lines by correlation id (raw line and its texts), each tag's id, and lines of no call."""
    by_id: dict[str, list[str]] = defaultdict(list)
    tags: dict[str, str] = {}
    loose: list[str] = []
    for line in log.splitlines():
        try:
            fields = json.loads(line)
        except ValueError:
            loose.append(line)
            continue
        seen = "\n".join([line, *strings(fields)])
        if not isinstance(fields, dict) or "correlation_id" not in fields:
            loose.append(seen)
            continue
        by_id[fields["correlation_id"]].append(seen)
        if fields.get("event") == "planted":
            tags[fields["tag"]] = fields["correlation_id"]
    return by_id, tags, loose


def problems_of(cases: list[Case], log: str) -> list[str]:
    by_id, tags, loose = log_by_call(log)
    problems: list[str] = []
    checked: set[str] = set()
    for case in cases:
        answer = case.answer
        category = category_of(answer)
        if category != CATEGORIES[case.how]:
            problems.append(f"{case}: category {category}, expected {CATEGORIES[case.how]}: {answer!r:.300}")
        seen = seen_by_client(answer)
        if category == PROTOCOL and DATA_PASSWORD in seen:
            problems.append(f"{case}: the secret-named field of the error's data reached the client")
        correlation_id = tags.get(case.tag) or correlation_id_of(answer)
        if case.form is None:
            if str(case.negative) not in seen:
                problems.append(f"{case}: the text did not come through whole: {seen[:300]}")
            continue
        if pieces := leaks(case.form, seen):
            problems.append(f"{case} leaked to the client: {pieces[:3]}")
        if case.form in PATHS:
            continue  # the log keeps the machine's paths
        lines = by_id.get(correlation_id or "", [])
        if correlation_id is not None and case.how != "argument" and not lines:
            problems.append(f"{case}: no log line under its correlation id {correlation_id}")
        if pieces := leaks(case.form, "\n".join(lines)):
            problems.append(f"{case} leaked to the log: {pieces[:3]}")
        checked.add(correlation_id or "")
    # Lines no case was checked against: of no call, or of a request whose error carries no
    # correlation id (an MCPError a resource, prompt or completer raised, sent as raised).
    unchecked = "\n".join(
        loose + [line for key, lines in by_id.items() if key not in checked for line in lines]
    )
    for form in FORMS:
        if pieces := leaks(form, unchecked):
            problems.append(f"{form.name} leaked to a log line no case was checked against: {pieces[:3]}")
    if DATA_PASSWORD in log:
        problems.append("the secret-named field of an MCPError's data reached the log")
    return problems


async def stdio_era(era: Mode, data_dir: Path, errlog: TextIO) -> list[Case]:
    command, *args = server_argv("serve", extra_tools=SECRET_TOOLS)
    env = server_env(data_dir=str(data_dir / f"stdio-{era}"))
    params = StdioServerParameters(command=command, args=args, env=env)
    cases = cases_for("stdio", era)
    async with Client(stdio_client(params, errlog=errlog), mode=era) as client:
        await run_cases(client, cases)
    return cases


async def http_era(era: Mode, url: str) -> list[Case]:
    cases = cases_for("http", era)
    async with Client(url, mode=era) as client:
        await run_cases(client, cases)
    return cases


async def test_no_secret_reaches_a_client_or_the_log(data_dir: Path) -> None:
    done: dict[str, list[Case]] = {}
    with (
        tempfile.TemporaryFile("w+") as legacy_log,
        tempfile.TemporaryFile("w+") as modern_log,
        tempfile.TemporaryFile("w+b") as http_log,
    ):
        logs: dict[Mode, TextIO] = {"legacy": legacy_log, "auto": modern_log}
        env = server_env(data_dir=str(data_dir / "http"))
        with http_server(env, extra_tools=SECRET_TOOLS, stderr=http_log) as (url, _):

            async def one(transport: str, era: Mode) -> None:
                if transport == "stdio":
                    done[f"stdio/{era}"] = await stdio_era(era, data_dir, logs[era])
                else:
                    done[f"http/{era}"] = await http_era(era, url)

            async with anyio.create_task_group() as group:
                for transport in ("stdio", "http"):
                    for era in ERAS:
                        group.start_soon(one, transport, era)
        problems: list[str] = []
        for era in ERAS:
            logs[era].seek(0)
            problems += problems_of(done[f"stdio/{era}"], logs[era].read())
        http_log.seek(0)
        problems += problems_of(done["http/legacy"] + done["http/auto"], http_log.read().decode())
    calls = sum(len(cases) for cases in done.values())
    assert not problems, f"{len(problems)} problems in {calls} calls:\n" + "\n".join(problems[:40])
