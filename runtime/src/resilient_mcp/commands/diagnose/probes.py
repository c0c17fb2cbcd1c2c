"""One connection per era: handshake, tools/list, health_check, and how the server exited."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from resilient_mcp.commands.diagnose.eras import MODERN, Era, JsonRpcSession, open_session, with_envelope
from resilient_mcp.commands.diagnose.progress import QUIET, Progress
from resilient_mcp.commands.diagnose.session import (
    HttpFailure,
    HttpSession,
    NoAnswer,
    RawStdioSession,
    ServerClosed,
)

_MAX_EXIT_GRACE_S = 5.0
_MAX_TOOL_PAGES = 50
MAX_LINE_CHARS = 300

Failure = Literal["timeout", "closed", "rejected", "http", "not_started"]


@dataclass
class EraProbe:
    """What one connection in one era showed."""

    era: Era
    handshake: bool = False
    failure: Failure | None = None
    failed_at: str | None = None
    detail: str = ""
    http_status: int | None = None
    first_answer_ms: int | None = None
    protocol_version: str | None = None
    server_info: dict[str, Any] | None = None
    instructions_bytes: int | None = None
    tool_names: list[str] | None = None
    tools_list_bytes: int | None = None
    health: dict[str, Any] | None = None
    health_status: str | None = None
    exit_code: int | None = None
    killed: bool = False
    noise: list[str] = field(default_factory=list)
    noise_after: list[int] = field(default_factory=list)
    stderr: str = ""

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "ok": self.handshake and self.failure is None,
            "handshake": self.handshake,
            "first_answer_ms": self.first_answer_ms,
            "protocol_version": self.protocol_version,
            "tool_count": len(self.tool_names) if self.tool_names is not None else None,
            "tools_list_bytes": self.tools_list_bytes,
            "health_status": self.health_status,
        }
        if self.failure is not None:
            summary["failure"] = self.failure
            summary["failed_at"] = self.failed_at
            summary["detail"] = self.detail
        if self.http_status is not None:
            summary["http_status"] = self.http_status
        if not self.killed and self.exit_code is not None:
            summary["server_exit_code"] = self.exit_code
        if self.killed:
            summary["server_exit_code"] = None
            summary["killed"] = True
        return summary


def converse(
    session: JsonRpcSession,
    probe: EraProbe,
    *,
    timeout: float,
    started: float,
    progress: Progress = QUIET,
    first: str = "the server's answer to",
) -> None:
    """Handshake, tools/list, health_check; stops at the first failure, recording it."""
    step = "server/discover" if probe.era == MODERN else "initialize"
    bound = f"({probe.era} era; gives up after {timeout:g} s)"
    try:
        with progress.waiting(f"{first} {step} {bound}"):
            response = open_session(session, probe.era, timeout=timeout)
        probe.first_answer_ms = round((time.monotonic() - started) * 1000)
        if "error" in response:
            _fail(probe, "rejected", step, _error_text(response))
            return
        result = _result(response)
        probe.handshake = True
        probe.protocol_version = str(result.get("protocolVersion", probe.era))
        probe.server_info = _server_info(result)
        instructions = result.get("instructions")
        probe.instructions_bytes = len(instructions.encode()) if isinstance(instructions, str) else None

        step = "tools/list"
        with progress.waiting(f"the server's answer to {step} {bound}"):
            tools, size, error = list_tools(session, probe.era, timeout=timeout)
        probe.tool_names = [str(tool.get("name")) for tool in tools]
        probe.tools_list_bytes = size
        if error is not None:
            _fail(probe, "rejected", step, error)
            return

        if "health_check" in probe.tool_names:
            step = "tools/call health_check"
            params = with_envelope(probe.era, {"name": "health_check", "arguments": {}})
            with progress.waiting(f"the server's answer to {step} {bound}"):
                response = session.request("tools/call", params, timeout=timeout)
            if "error" in response:
                _fail(probe, "rejected", step, _error_text(response))
                return
            probe.health, probe.health_status = _health(_result(response))
    except NoAnswer as exc:
        _fail(probe, "timeout", step, str(exc))
    except ServerClosed as exc:
        _fail(probe, "closed", step, str(exc))
    except HttpFailure as exc:
        probe.http_status = exc.status
        _fail(probe, "http", step, str(exc))


def list_tools(
    session: JsonRpcSession, era: Era, *, timeout: float
) -> tuple[list[dict[str, Any]], int, str | None]:
    """All pages of tools/list: the tools, the bytes of the result JSON (compact), an error."""
    tools: list[dict[str, Any]] = []
    size = 0
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        params = with_envelope(era, {"cursor": cursor} if cursor else None)
        response = session.request("tools/list", params or None, timeout=timeout)
        if "error" in response:
            return tools, size, _error_text(response)
        result = _result(response)
        size += len(json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode())
        page = result.get("tools")
        if isinstance(page, list):
            tools.extend(tool for tool in page if isinstance(tool, dict))
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return tools, size, None


def _fail(probe: EraProbe, failure: Failure, step: str, detail: str) -> None:
    probe.failure, probe.failed_at, probe.detail = failure, step, detail


def _result(response: Mapping[str, Any]) -> dict[str, Any]:
    result = response.get("result")
    return result if isinstance(result, dict) else {}


def _error_text(response: Mapping[str, Any]) -> str:
    error = response.get("error")
    if not isinstance(error, dict):
        return str(error)
    return f"JSON-RPC error {error.get('code')}: {error.get('message')}"


def _server_info(result: Mapping[str, Any]) -> dict[str, Any] | None:
    info = result.get("serverInfo")
    meta = result.get("_meta")
    if info is None and isinstance(meta, dict):
        info = meta.get("io.modelcontextprotocol/serverInfo")
    if not isinstance(info, dict):
        return None
    icons = info.get("icons")
    if isinstance(icons, list):  # a data: URI is kilobytes of base64: its type and size say enough
        info = {**info, "icons": [_icon_summary(icon) for icon in icons]}
    return info


def _icon_summary(icon: object) -> object:
    if not isinstance(icon, dict) or not str(icon.get("src", "")).startswith("data:"):
        return icon
    head, _, data = str(icon["src"]).partition(",")
    return {**icon, "src": f"{head},... ({len(data)} characters)"}


def _health(result: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The health_check answer and its status: `ok`, `degraded`, `failing` or `error`."""
    structured = result.get("structuredContent")
    if result.get("isError"):
        texts = [c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)]
        return {"isError": True, "text": " ".join(texts)[:MAX_LINE_CHARS]}, "error"
    if isinstance(structured, dict):
        return structured, str(structured.get("status", "ok"))
    return {"isError": False}, "ok"


def probe_stdio(
    argv: Sequence[str], era: Era, *, timeout: float, env: Mapping[str, str], progress: Progress = QUIET
) -> EraProbe:
    """Start the command, talk one era, close its stdin, collect exit code, noise and stderr."""
    probe = EraProbe(era)
    started = time.monotonic()
    try:
        session = RawStdioSession(argv, env=env)
    except OSError as exc:
        _fail(probe, "not_started", "start", f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        return probe
    try:
        first = "the server to start and answer"
        converse(session, probe, timeout=timeout, started=started, progress=progress, first=first)
    finally:
        # A server that never answered gets a short grace: it is stuck, not shutting down.
        grace = min(timeout, 1.0 if probe.failure == "timeout" else _MAX_EXIT_GRACE_S)
        with progress.waiting(f"the server to exit now that its stdin is closed (killed after {grace:g} s)"):
            code = session.close(timeout=grace)
    probe.exit_code, probe.killed = code, code is None
    if probe.failure == "closed":
        ended = "was killed" if code is None else f"exited with {code}"
        when = "before answering" if not probe.handshake else f"during {probe.failed_at}"
        probe.detail = f"the server {ended} {when}"
    probe.noise, probe.noise_after = list(session.noise), list(session.noise_after)
    probe.stderr = session.stderr_text()
    return probe


def probe_http(url: str, era: Era, *, timeout: float, progress: Progress = QUIET) -> EraProbe:
    probe = EraProbe(era)
    session = HttpSession(url, era, timeout)
    converse(session, probe, timeout=timeout, started=time.monotonic(), progress=progress)
    session.close()
    probe.noise = list(session.noise)
    return probe
