"""The likely cause of a failure, and the fix, read from stderr, stdout noise and the probes."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from resilient_mcp.commands.diagnose.exit_codes import EXIT_SERVER_FATAL
from resilient_mcp.commands.diagnose.probes import MAX_LINE_CHARS, EraProbe
from resilient_mcp.commands.diagnose.this_project import env_prefix, package

_MIGRATION_GUIDE = "https://py.sdk.modelcontextprotocol.io/v2/migration/"
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_CANNOT_IMPORT = re.compile(r"ImportError: cannot import name '(\w+)' from '([\w.]+)'")
_CAMEL_ATTRIBUTE = re.compile(r"AttributeError: '(\w+)' object has no attribute '([a-z]+[A-Z]\w*)'")
_UNEXPECTED_KEYWORD = re.compile(r"TypeError: (\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'")
FATAL_LINE = re.compile(r"^FATAL: .*$", re.MULTILINE)
_EXCEPTION_LINE = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception|Interrupt|Exit)\b.*$", re.MULTILINE)
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?\d{2}/\d{2}/\d{2}\b|\[?\d{2}:\d{2}:\d{2}\b"
    r"|\[?(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL)\b[\]:\s])"
)
_LOG_KEYS = {"level", "levelname", "severity", "event", "msg", "logger"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def stderr_hints(stderr: str, exit_code: int | None) -> list[str]:
    """Causes read from stderr: v1 code on SDK v2, missing modules, start-up FatalErrors."""
    hints: list[str] = []
    fatal = FATAL_LINE.findall(stderr)
    if fatal and exit_code == EXIT_SERVER_FATAL:
        hints.append(
            f"the server stopped at its start-up checks (exit 78): {fatal[-1]} "
            "(fix what that line names and start it again)"
        )
    elif fatal:
        hints.append(f"the server reported a fatal error: {fatal[-1]}")
    missing = _MISSING_MODULE.findall(stderr)
    if missing:
        hints.append(_missing_module_hint(missing[-1]))
    for name, module in _CANNOT_IMPORT.findall(stderr)[-1:]:
        if name == "McpError":
            hints.append(
                "v1 code on SDK v2: `McpError` is `MCPError` in mcp 2.x (`from mcp import MCPError`); "
                f"update the import (migration guide: {_MIGRATION_GUIDE}) or pin 'mcp<2'"
            )
        elif name == "FastMCP":
            hints.append(_fastmcp_hint())
        elif module == "mcp" or module.startswith("mcp."):
            hints.append(
                f"v1 code on SDK v2? `{name}` is not in `{module}` in mcp 2.x: "
                f"see the migration guide {_MIGRATION_GUIDE} or pin 'mcp<2'"
            )
        else:
            hints.append(f"`{name}` cannot be imported from `{module}`: a version mismatch of that package?")
    for cls, attribute in _CAMEL_ATTRIBUTE.findall(stderr)[-1:]:
        hints.append(
            f"v1 code on SDK v2: `{cls}.{attribute}` is `{_snake(attribute)}` in mcp 2.x - attributes are "
            f"snake_case (isError -> is_error, inputSchema -> input_schema); the wire stays camelCase. "
            f"Migration guide: {_MIGRATION_GUIDE}"
        )
    for cls, keyword in _UNEXPECTED_KEYWORD.findall(stderr)[-1:]:
        if cls == "MCPServer" and keyword in {"host", "port", "streamable_http_path", "json_response"}:
            hints.append(
                f"v1 code on SDK v2: `{keyword}` is no longer an MCPServer argument; pass it to "
                f'`run("streamable-http", {keyword}=...)` instead (migration guide: {_MIGRATION_GUIDE})'
            )
    if "The @tool decorator was used incorrectly" in stderr:
        hints.append("a bare `@mcp.tool` raises TypeError in mcp 2.x: write `@mcp.tool()`")
    return hints


def _fastmcp_hint() -> str:
    return (
        "v1 code on SDK v2: `mcp.server.fastmcp` does not exist in mcp 2.x - FastMCP is now MCPServer "
        "(`from mcp.server.mcpserver import MCPServer`, `@mcp.tool()` as before); migrate "
        f"({_MIGRATION_GUIDE}) or pin 'mcp<2' to keep running v1 code"
    )


def _missing_module_hint(module: str) -> str:
    if module.startswith("mcp.server.fastmcp"):
        return _fastmcp_hint()
    if module == "mcp" or module.startswith("mcp_types"):
        return "the MCP SDK is not installed where the server runs: `pip install 'mcp>=2.3,<3'` there"
    if module.startswith("mcp."):
        return (
            f"module `{module}` is not in the installed mcp: v1 code on SDK v2 (see {_MIGRATION_GUIDE}) "
            "or a broken install (`pip install --force-reinstall 'mcp>=2.3,<3'`)"
        )
    top = module.split(".")[0]
    if top == package():
        return "this project is not installed in the interpreter that runs it: `pip install -e .` in it"
    return (
        f"the server imports `{module}`, which is not installed: `pip install {top}` into the environment "
        "that runs the server (the distribution name can differ from the module name)"
    )


def noise_hints(noise: Sequence[str], noise_after: Sequence[int]) -> list[str]:
    """Where stdout lines that are not JSON-RPC probably come from."""
    hints: list[str] = []
    seen: set[str] = set()
    for index, line in enumerate(noise):
        position = noise_after[index] if index < len(noise_after) else None
        kind, hint = _noise_kind(line, position)
        if kind not in seen:
            seen.add(kind)
            hints.append(hint)
    return hints


def _noise_kind(line: str, position: int | None) -> tuple[str, str]:
    shown = clip(line, 80)
    if _LOG_LINE.match(line) or _json_log(line):
        return "log", (
            f"stdout noise {shown!r} looks like log output: a logging handler writes to stdout, which is "
            "the protocol; log to stderr (logging.basicConfig(stream=sys.stderr), set up before the server)"
        )
    if position == 0:
        return "start", (
            f"stdout noise {shown!r} before the first answer: a print at import time or a start-up banner; "
            "in stdio mode stdout is JSON-RPC only - print to stderr (print(..., file=sys.stderr)) or drop it"
        )
    return "later", (
        f"stdout noise {shown!r} after answers began: a print in a tool, or an unflushed print that reaches "
        "stdout when the SDK restores it at exit; print to stderr or log instead"
    )


def _json_log(line: str) -> bool:
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and bool(_LOG_KEYS & value.keys())


def probe_hints(probe: EraProbe, timeout: float, *, http: bool) -> list[str]:
    """Causes read from how a connection failed."""
    if probe.failure == "timeout":
        last = last_line(probe.stderr)
        seen = f" (last stderr line: {last!r})" if last else ""
        if probe.handshake:
            return [f"{probe.failed_at} got no answer within {timeout:g} s after the handshake worked{seen}"]
        if http:
            return [f"the endpoint never answered within {timeout:g} s: is the server stuck on a dependency?"]
        return [
            f"the server never answered within {timeout:g} s{seen}: it may be waiting on something before "
            "serving (a network call, a database, input at import), reading stdin itself (input() or "
            "sys.stdin steal the protocol), or writing answers elsewhere; run it by hand and watch "
            "stderr, or raise --timeout if start-up is only slow"
        ]
    if probe.failure == "closed" and http:
        return [
            f"{probe.detail}: start the server (`<command> serve --transport http --port N`) and check "
            "host, port and path (the SDK serves /mcp)"
        ]
    if probe.failure == "closed" and not probe.handshake:
        if probe.exit_code == 0:
            return [
                "the server exited with 0 before answering: does the script start serving "
                "(`mcp.run()`, under `if __name__ == '__main__':` when run as a script)?"
            ]
        if stderr_hints(probe.stderr, probe.exit_code):
            return []  # the cause is already named
        last = exception_line(probe.stderr) or last_line(probe.stderr)
        return [probe.detail + (f": {last}" if last else ": it wrote nothing to stderr")]
    if probe.failure == "http":
        return [_http_hint(probe.http_status, probe.detail)]
    if probe.failure == "not_started":
        return [f"{probe.detail}: check the command and PATH, or give the full path"]
    return []


def _http_hint(status: int | None, detail: str) -> str:
    return f"{clip(detail, 120)} - {_http_advice(status, detail)}"


def _http_advice(status: int | None, detail: str) -> str:
    """What a refusal means, and which of the server's settings fixes it."""
    p = env_prefix()
    if status == 401:
        return (
            f"the server wants a token (its {p}AUTH is bearer or oauth): set {p}DIAGNOSE_TOKEN (or "
            f"{p}BEARER_TOKEN) in this environment to a valid token; a token that was sent was refused "
            "(wrong, expired, or for another audience or issuer)"
        )
    if status == 403 and "insufficient_scope" in detail:
        return f"the token lacks a scope the server's {p}OAUTH_REQUIRED_SCOPES asks for: get one with it"
    if status == 403:
        return f"the server refused the Origin header: add that origin to the server's {p}ALLOWED_ORIGINS"
    if status == 421:
        return (
            "the server refused the Host header (DNS-rebinding protection): add the name clients use "
            f"(the URL's host, with or without its port) to the server's {p}ALLOWED_HOSTS"
        )
    if status == 413:
        return f"the request body is over the server's {p}MAX_REQUEST_BYTES: raise it on the server"
    return {
        404: "nothing is served at this path: the SDK serves Streamable HTTP on /mcp unless told otherwise",
        405: "the path does not take POST: is this the MCP endpoint?",
        406: "the server did not accept `Accept: application/json, text/event-stream`",
        503: "the server is at its connection or session limit, or draining: retry, or raise the limit",
    }.get(status or 0, "see the server's log")


def clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return clip(lines[-1].strip(), 200) if lines else ""


def exception_line(text: str) -> str:
    found = _EXCEPTION_LINE.findall(text)
    return clip(found[-1], 200) if found else ""
