# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Handshake diagnostics over raw JSON-RPC: why a server will not connect.

Standard library only, so it still works when the server's own imports (or `mcp`)
are broken. Run it as `<command> diagnose` or `python -m <package>.diagnose`:

    diagnose [--timeout S]                  this project's server (`python -m <package> serve`)
    diagnose [--timeout S] -- CMD [ARG...]  any stdio server command
    diagnose [--timeout S] --http URL       a Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp

Over HTTP a token in `<PREFIX>DIAGNOSE_TOKEN` (else `<PREFIX>BEARER_TOKEN`) is sent as
`Authorization: Bearer`; a refusal (401, 403, 421, 413) gets a hint naming the server
setting that fixes it.

Each protocol era is tried on a fresh connection (a fresh process over stdio),
because the first request fixes a connection's era: the 2026-07-28 era
(`server/discover`, every request carrying the `_meta` envelope), then the
2025-11-25 `initialize` handshake. In each: `tools/list` (count and bytes of the
result JSON) and `tools/call health_check` when the server declares it. Every read
is bounded by --timeout, so a server that never answers costs at most about
2 x (timeout + a short grace to exit) in all.

This project's own server must answer both eras; another server passes with either
(a hint names the one missing). The server runs without PYTHONUNBUFFERED, as MCP
hosts start it, so buffered stdout leaks show up here as they would there.

One JSON report goes to stdout: verdict, exit_code, target, server_exit_code (after
its stdin was closed; null when it had to be killed), first_answer_ms, handshake,
eras (per era: ok, first_answer_ms, failure, ...), eras_ok, server_info, tool_count,
tools_list_bytes (the largest tools/list result seen, compact JSON), health_check
(its structured result), stdout_noise (stdout lines that are not JSON-RPC),
stderr_tail, hints (the likely cause and the fix).

Exit codes:
    0   healthy
    1   unhealthy: answered, but health_check is not ok, tools/list or health_check
        failed, or the server did not exit cleanly when its stdin closed
    2   usage error
    3   no handshake: the server crashed, exited, refused, or could not be started
        (this project's own server: in either era)
    4   timeout: no answer within --timeout (this project's own server: in either era)
    5   stdout noise: lines on stdout that are not JSON-RPC (clients choke on them)
    78  the server stopped at its start-up checks (its own exit 78 and FATAL line)
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Era = Literal["2026-07-28", "2025-11-25"]
MODERN: Era = "2026-07-28"
LEGACY: Era = "2025-11-25"
ERAS: tuple[Era, ...] = (MODERN, LEGACY)
CLIENT_INFO = {"name": "diagnose", "version": "1"}
_STDERR_TAIL_BYTES = 8192

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2
EXIT_NO_HANDSHAKE = 3
EXIT_TIMEOUT = 4
EXIT_STDOUT_NOISE = 5
EXIT_SERVER_FATAL = 78  # the server's own start-up FatalError code, passed through

DEFAULT_TIMEOUT_S = 10.0
_MAX_EXIT_GRACE_S = 5.0
_MAX_NOISE_LINES = 20
_MAX_LINE_CHARS = 300
_MAX_TOOL_PAGES = 50
PACKAGE = __package__ or __name__.rpartition(".")[0]


def _env_prefix() -> str:
    """This project's settings prefix (project.py is stdlib only); none when this file runs alone."""
    try:
        from .project import ENV_PREFIX
    except ImportError:
        return ""
    return ENV_PREFIX


ENV_PREFIX = _env_prefix()


class ServerClosed(Exception):
    """The server closed stdout (or exited) before answering."""


class NoAnswer(Exception):
    """The server did not answer within the time limit."""


class HttpFailure(Exception):
    """An HTTP endpoint answered with an error status and no JSON-RPC message."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}" if body else f"HTTP {status}")
        self.status = status


class JsonRpcSession(Protocol):
    """What the probes need from a connection: requests with a time limit, and notifications."""

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = 10.0
    ) -> dict[str, Any]: ...

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None: ...


# --- stdio -----------------------------------------------------------------


class RawStdioSession:
    """A server process spoken to in plain JSON-RPC lines, every read bounded in time.

    Lines on stdout that are not JSON-RPC messages are kept in `noise` (and in
    `noise_after`, how many JSON-RPC messages preceded each); the tail of stderr
    in `stderr_tail()`.
    """

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
        self.noise: list[str] = []
        self.noise_after: list[int] = []
        self.messages: list[dict[str, Any]] = []
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._next_id = 0
        self._readers = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        for chunk in iter(lambda: os.read(fd, 4096), b""):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) > _STDERR_TAIL_BYTES:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_text(self) -> str:
        """The last few KB of stderr."""
        return b"".join(self._stderr).decode("utf-8", "replace")

    def stderr_tail(self, max_lines: int = 20) -> list[str]:
        return self.stderr_text().splitlines()[-max_lines:]

    def send_line(self, line: bytes) -> None:
        """Write one raw line (a newline is added); a closed pipe is ignored."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def send(self, message: Mapping[str, Any]) -> None:
        self.send_line(json.dumps(message).encode())

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Send a request; return its response (result or error), skipping other messages."""
        self._next_id += 1
        request_id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.send(message)
        return self.wait_for(request_id, timeout=timeout)

    def wait_for(self, request_id: object, *, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoAnswer(f"no answer within {timeout:g} s")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                raise NoAnswer(f"no answer within {timeout:g} s") from None
            if line is None:
                self._lines.put(None)  # stay closed for later reads
                raise ServerClosed("the server closed stdout")
            message = self._parse(line)
            if message is not None and message.get("id") == request_id and "method" not in message:
                return message

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
            self.messages.append(message)
            return message
        if text:
            self.noise.append(text)
            self.noise_after.append(len(self.messages))
        return None

    def close(self, timeout: float = 10.0) -> int | None:
        """Close stdin, wait for the exit, drain stdout; return the exit code (None: killed)."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            code: int | None = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = None
        for reader in self._readers:
            reader.join(timeout=5)
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self._parse(line)
        return code

    def __enter__(self) -> RawStdioSession:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.close(timeout=5)


# --- Streamable HTTP --------------------------------------------------------

# Mirrors mcp.shared.inbound: the 2026-07-28 era repeats the method (and, for these
# methods, the named param) in headers that must match the body.
_NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_HEADER_SAFE = re.compile(r"^[\x20-\x7e]*$")


def _header_value(value: str) -> str:
    """A header-safe value: printable ASCII verbatim, anything else in the base64 sentinel."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not value.startswith("=?base64?"):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


class HttpSession:
    """One MCP connection to a Streamable HTTP endpoint, in one era, over urllib.

    2025-11-25: `initialize` opens a session; its `Mcp-Session-Id` and the agreed
    `MCP-Protocol-Version` ride on every later request. 2026-07-28: no session;
    every request carries `MCP-Protocol-Version` and `Mcp-Method` (and `Mcp-Name`
    for tools/call) matching its body. Answers come as `application/json` or as a
    `text/event-stream` whose events carry JSON-RPC messages.
    """

    def __init__(self, url: str, era: Era, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.era = era
        self.timeout = timeout  # for notifications, which have no answer to wait for
        self.session_id: str | None = None
        self.protocol_version: str | None = MODERN if era == MODERN else None
        self.noise: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self._next_id = 0

    def _headers(self, method: str, params: Mapping[str, Any] | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.protocol_version is not None:
            headers["MCP-Protocol-Version"] = self.protocol_version
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        token = os.environ.get(f"{ENV_PREFIX}DIAGNOSE_TOKEN") or os.environ.get(f"{ENV_PREFIX}BEARER_TOKEN")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self.era == MODERN:
            headers["Mcp-Method"] = method
            name_key = _NAME_BEARING_METHODS.get(method)
            name = (params or {}).get(name_key) if name_key else None
            if isinstance(name, str):
                headers["Mcp-Name"] = _header_value(name)
        return headers

    def _post(self, message: Mapping[str, Any], *, timeout: float, wanted: object) -> dict[str, Any] | None:
        """POST one message; return the response to `wanted` (None: do not wait for one)."""
        request = urllib.request.Request(
            self.url,
            data=json.dumps(message).encode(),
            method="POST",
            headers=self._headers(str(message.get("method", "")), message.get("params")),
        )
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            answer = self._take(body, wanted, keep_noise=False)  # JSON-RPC errors come with 4xx too
            if answer is None:
                raise HttpFailure(exc.code, body.strip()) from None
            return answer
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise NoAnswer(f"no answer within {timeout:g} s") from None
            raise ServerClosed(f"cannot connect to {self.url}: {exc.reason}") from None
        except TimeoutError:
            raise NoAnswer(f"no answer within {timeout:g} s") from None
        except OSError as exc:
            raise ServerClosed(f"cannot connect to {self.url}: {exc}") from None
        with response:
            self.session_id = response.headers.get("Mcp-Session-Id") or self.session_id
            if wanted is None:
                return None
            try:
                if response.headers.get_content_type() == "text/event-stream":
                    answer = self._read_events(response, wanted, deadline=time.monotonic() + timeout)
                else:
                    answer = self._take(response.read().decode("utf-8", "replace"), wanted)
            except TimeoutError:
                raise NoAnswer(f"no answer within {timeout:g} s") from None
        if answer is None:
            raise ServerClosed("the server ended its HTTP answer without a response to the request")
        return answer

    def _read_events(self, response: Any, wanted: object, *, deadline: float) -> dict[str, Any] | None:
        """Read SSE events until one carries the response to `wanted`."""
        data: list[str] = []
        for raw in response:
            if time.monotonic() > deadline:
                raise TimeoutError
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:  # a blank line ends an event
                answer = self._take("\n".join(data), wanted)
                data = []
                if answer is not None:
                    return answer
        return self._take("\n".join(data), wanted) if data else None

    def _take(self, text: str, wanted: object, *, keep_noise: bool = True) -> dict[str, Any] | None:
        """Record the JSON-RPC messages in a body or event; return the response to `wanted`."""
        if not text.strip():
            return None
        try:
            value = json.loads(text)
        except ValueError:
            if keep_noise:
                self.noise.append(text)
            return None
        answer = None
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and item.get("jsonrpc") == "2.0":
                self.messages.append(item)
                if item.get("id") == wanted and "method" not in item:
                    answer = item
        return answer

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = 10.0
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        answer = self._post(message, timeout=timeout, wanted=self._next_id)
        assert answer is not None
        if method == "initialize" and isinstance(answer.get("result"), dict):
            self.protocol_version = str(answer["result"].get("protocolVersion", LEGACY))
        return answer

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
        # A failure here shows up in the request that follows.
        with contextlib.suppress(HttpFailure, NoAnswer, ServerClosed):
            self._post(message, timeout=self.timeout, wanted=None)

    def close(self) -> None:
        """End a 2025-era session politely; errors are irrelevant to the diagnosis."""
        if self.session_id is None:
            return
        request = urllib.request.Request(self.url, method="DELETE", headers=self._headers("", None))
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=2).close()


# --- protocol ----------------------------------------------------------------


def envelope(era: Era) -> dict[str, Any]:
    """The `_meta` a 2026-07-28 request carries; empty for the handshake era."""
    if era != MODERN:
        return {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


def with_envelope(era: Era, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Request params for this era: the 2026-07-28 envelope rides in `_meta`."""
    merged = dict(params or {})
    if era == MODERN:
        merged["_meta"] = {**envelope(era), **merged.get("_meta", {})}
    return merged


def open_session(session: JsonRpcSession, era: Era, *, timeout: float = 10.0) -> dict[str, Any]:
    """Start the protocol in one era: `server/discover`, or `initialize` then `initialized`."""
    if era == MODERN:
        return session.request("server/discover", with_envelope(era), timeout=timeout)
    response = session.request(
        "initialize",
        {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
        timeout=timeout,
    )
    if "result" in response:
        session.notify("notifications/initialized")
    return response


def unbuffered_free_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without PYTHONUNBUFFERED, as MCP hosts start servers."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(extra or {})
    return env


# --- one probe per era --------------------------------------------------------

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


def converse(session: JsonRpcSession, probe: EraProbe, *, timeout: float, started: float) -> None:
    """Handshake, tools/list, health_check; stops at the first failure, recording it."""
    step = "server/discover" if probe.era == MODERN else "initialize"
    try:
        response = open_session(session, probe.era, timeout=timeout)
        probe.first_answer_ms = round((time.monotonic() - started) * 1000)
        if "error" in response:
            _fail(probe, "rejected", step, _error_text(response))
            return
        result = _result(response)
        probe.handshake = True
        probe.protocol_version = str(result.get("protocolVersion", probe.era))
        probe.server_info = _server_info(result)

        step = "tools/list"
        tools, size, error = list_tools(session, probe.era, timeout=timeout)
        probe.tool_names = [str(tool.get("name")) for tool in tools]
        probe.tools_list_bytes = size
        if error is not None:
            _fail(probe, "rejected", step, error)
            return

        if "health_check" in probe.tool_names:
            step = "tools/call health_check"
            params = with_envelope(probe.era, {"name": "health_check", "arguments": {}})
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
    return info if isinstance(info, dict) else None


def _health(result: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The health_check answer and its status: `ok`, `degraded`, `failing` or `error`."""
    structured = result.get("structuredContent")
    if result.get("isError"):
        texts = [c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)]
        return {"isError": True, "text": " ".join(texts)[:_MAX_LINE_CHARS]}, "error"
    if isinstance(structured, dict):
        return structured, str(structured.get("status", "ok"))
    return {"isError": False}, "ok"


def probe_stdio(argv: Sequence[str], era: Era, *, timeout: float, env: Mapping[str, str]) -> EraProbe:
    """Start the command, talk one era, close its stdin, collect exit code, noise and stderr."""
    probe = EraProbe(era)
    started = time.monotonic()
    try:
        session = RawStdioSession(argv, env=env)
    except OSError as exc:
        _fail(probe, "not_started", "start", f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        return probe
    try:
        converse(session, probe, timeout=timeout, started=started)
    finally:
        # A server that never answered gets a short grace: it is stuck, not shutting down.
        grace = 1.0 if probe.failure == "timeout" else _MAX_EXIT_GRACE_S
        code = session.close(timeout=min(timeout, grace))
    probe.exit_code, probe.killed = code, code is None
    if probe.failure == "closed":
        ended = "was killed" if code is None else f"exited with {code}"
        when = "before answering" if not probe.handshake else f"during {probe.failed_at}"
        probe.detail = f"the server {ended} {when}"
    probe.noise, probe.noise_after = list(session.noise), list(session.noise_after)
    probe.stderr = session.stderr_text()
    return probe


def probe_http(url: str, era: Era, *, timeout: float) -> EraProbe:
    probe = EraProbe(era)
    session = HttpSession(url, era, timeout)
    converse(session, probe, timeout=timeout, started=time.monotonic())
    session.close()
    probe.noise = list(session.noise)
    return probe


# --- hints ------------------------------------------------------------------

_MIGRATION_GUIDE = "https://py.sdk.modelcontextprotocol.io/v2/migration/"
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_CANNOT_IMPORT = re.compile(r"ImportError: cannot import name '(\w+)' from '([\w.]+)'")
_CAMEL_ATTRIBUTE = re.compile(r"AttributeError: '(\w+)' object has no attribute '([a-z]+[A-Z]\w*)'")
_UNEXPECTED_KEYWORD = re.compile(r"TypeError: (\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'")
_FATAL_LINE = re.compile(r"^FATAL: .*$", re.MULTILINE)
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
    fatal = _FATAL_LINE.findall(stderr)
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
    if top == PACKAGE:
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
    shown = _clip(line, 80)
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
        last = _last_line(probe.stderr)
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
        last = _exception_line(probe.stderr) or _last_line(probe.stderr)
        return [probe.detail + (f": {last}" if last else ": it wrote nothing to stderr")]
    if probe.failure == "http":
        return [_http_hint(probe.http_status, probe.detail)]
    if probe.failure == "not_started":
        return [f"{probe.detail}: check the command and PATH, or give the full path"]
    return []


def _http_hint(status: int | None, detail: str) -> str:
    return f"{_clip(detail, 120)} - {_http_advice(status, detail)}"


def _http_advice(status: int | None, detail: str) -> str:
    """What a refusal means, and which of the server's settings fixes it."""
    p = ENV_PREFIX
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


def _clip(text: str, limit: int = _MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return _clip(lines[-1].strip(), 200) if lines else ""


def _exception_line(text: str) -> str:
    found = _EXCEPTION_LINE.findall(text)
    return _clip(found[-1], 200) if found else ""


# --- the report ------------------------------------------------------------


@dataclass
class Diagnosis:
    """All probes of one target and what they add up to."""

    target: dict[str, Any]
    probes: list[EraProbe]
    timeout: float
    http: bool
    require_all_eras: bool

    @property
    def answered(self) -> list[EraProbe]:
        return [probe for probe in self.probes if probe.handshake]

    def verdict(self) -> tuple[int, str]:
        """The exit code and a one-line verdict; the most fundamental problem wins."""
        fatal = [p for p in self.probes if p.exit_code == EXIT_SERVER_FATAL and _FATAL_LINE.search(p.stderr)]
        if fatal and not self.answered:
            return EXIT_SERVER_FATAL, "start-up checks failed: " + _FATAL_LINE.findall(fatal[0].stderr)[-1]
        missing = [p for p in self.probes if not p.handshake]
        if not self.answered or (self.require_all_eras and missing):
            first = missing[0]
            era = "" if not self.answered else f" {first.era}"
            what = f"no{era} handshake: {first.detail or first.failure}"
            return (EXIT_TIMEOUT if first.failure == "timeout" else EXIT_NO_HANDSHAKE), what
        noise = self.noise()
        if noise:
            return EXIT_STDOUT_NOISE, f"stdout noise: {len(noise)} line(s) that are not JSON-RPC"
        problems = self.problems()
        if problems:
            return EXIT_UNHEALTHY, "unhealthy: " + "; ".join(problems)
        eras = " and ".join(p.era for p in self.answered)
        tools = self.answered[0].tool_names or []
        health = f", health_check {self.answered[0].health_status}" if "health_check" in tools else ""
        return EXIT_HEALTHY, f"healthy: handshake in {eras}, {len(tools)} tools{health}"

    def problems(self) -> list[str]:
        """What is wrong after a working handshake."""
        problems: list[str] = []
        for probe in self.answered:
            if probe.failure is not None:
                problems.append(f"{probe.era}: {probe.failed_at} failed ({probe.detail})")
            elif probe.health_status not in (None, "ok"):
                problems.append(f"{probe.era}: health_check reports {probe.health_status}")
        if not self.http:
            for probe in self.answered:
                if probe.failure is not None:
                    continue  # its exit is part of that failure
                if probe.killed:
                    problems.append(f"{probe.era}: the server did not exit after its stdin closed")
                elif probe.exit_code not in (0, None):
                    problems.append(f"{probe.era}: the server exited {probe.exit_code} when its stdin closed")
        return list(dict.fromkeys(problems))

    def noise(self) -> list[str]:
        lines = [line for probe in self.probes for line in probe.noise]
        return list(dict.fromkeys(lines))

    def hints(self) -> list[str]:
        hints: list[str] = []
        for probe in self.probes:
            hints += stderr_hints(probe.stderr, probe.exit_code)
        if not any(h.startswith("the server stopped at its start-up checks") for h in hints):
            for probe in self.probes:
                if self.answered and not probe.handshake and not self.require_all_eras:
                    continue  # reported below as a missing era
                hints += probe_hints(probe, self.timeout, http=self.http)
        for probe in self.probes:
            if self.http and probe.noise:
                hints.append(
                    f"the endpoint answered with a body that is not JSON-RPC: {_clip(probe.noise[0], 80)!r}"
                )
            elif probe.noise:
                hints += noise_hints(probe.noise, probe.noise_after)
        hints += self._era_hints()
        hints += self._health_hints()
        for probe in self.answered:
            if probe.failure == "closed" and not self.http:
                last = _exception_line(probe.stderr) or _last_line(probe.stderr)
                hints.append(f"{probe.detail}" + (f": {last}" if last else ""))
            elif probe.failure is not None:
                continue
            elif probe.killed:
                hints.append(
                    "the server kept running after its stdin closed and was killed: MCP hosts stop stdio "
                    "servers by closing stdin; a non-daemon thread or a blocking shutdown keeps it alive"
                )
            elif probe.exit_code not in (0, None) and not self.http:
                last = _exception_line(probe.stderr) or _last_line(probe.stderr)
                hints.append(
                    f"the server exited {probe.exit_code} when its stdin closed; it should exit 0"
                    + (f" ({last})" if last else "")
                )
        return list(dict.fromkeys(hints))

    def _era_hints(self) -> list[str]:
        if not self.answered:
            return []
        hints = []
        for probe in self.probes:
            if probe.handshake:
                continue
            if probe.era == MODERN:
                hints.append(
                    f"the 2026-07-28 era failed ({probe.detail or probe.failure}): the server predates it "
                    "(SDK v1 or another older server); clients fall back to initialize; mcp>=2.3 serves both"
                )
            else:
                hints.append(
                    f"the 2025-11-25 initialize handshake failed ({probe.detail or probe.failure}): most MCP "
                    "hosts still connect that way"
                )
        return hints

    def _health_hints(self) -> list[str]:
        for probe in self.answered:
            if probe.health_status in (None, "ok") or probe.health is None:
                continue
            checks = probe.health.get("checks")
            failing = (
                [
                    f"{name} ({check.get('detail', '')})"
                    for name, check in checks.items()
                    if isinstance(check, dict) and check.get("status") != "ok"
                ]
                if isinstance(checks, dict)
                else []
            )
            detail = ": " + ", ".join(failing) if failing else f": {probe.health.get('text', '')}"
            return [f"health_check reports {probe.health_status}{detail.rstrip(': ')}"]
        return []

    def report(self) -> dict[str, Any]:
        code, verdict = self.verdict()
        first = self.answered[0] if self.answered else (self.probes[0] if self.probes else EraProbe(MODERN))
        sizes = [p.tools_list_bytes for p in self.answered if p.tools_list_bytes is not None]
        stderr_source = next((p for p in self.probes if p.failure is not None), first)
        exit_codes = [p.exit_code for p in self.probes if p.failure != "not_started"]
        answer_times = [p.first_answer_ms for p in self.probes if p.first_answer_ms is not None]
        return {
            "verdict": verdict,
            "exit_code": code,
            "target": self.target,
            "server_exit_code": None if self.http else _worst_exit(exit_codes),
            "first_answer_ms": next(iter(answer_times), None),
            "handshake": bool(self.answered),
            "eras": {p.era: p.summary() for p in self.probes},
            "eras_ok": [p.era for p in self.answered],
            "server_info": first.server_info,
            "tool_count": len(first.tool_names) if first.tool_names is not None else None,
            "tools": first.tool_names,
            "tools_list_bytes": max(sizes) if sizes else None,
            "health_check": first.health,
            "stdout_noise": [_clip(line) for line in self.noise()[:_MAX_NOISE_LINES]],
            "stderr_tail": [_clip(line) for line in stderr_source.stderr.splitlines()[-20:]],
            "hints": self.hints(),
        }


def _worst_exit(codes: Sequence[int | None]) -> int | None:
    """The first exit code that is not 0 (None when killed), else 0."""
    for code in codes:
        if code != 0:
            return code
    return 0 if codes else None


def diagnose_stdio(
    argv: Sequence[str], *, timeout: float, require_all_eras: bool, env: Mapping[str, str] | None = None
) -> Diagnosis:
    environment = dict(env) if env is not None else unbuffered_free_env()
    probes = [probe_stdio(argv, era, timeout=timeout, env=environment) for era in ERAS]
    return Diagnosis({"command": list(argv)}, probes, timeout, False, require_all_eras)


def diagnose_http(url: str, *, timeout: float) -> Diagnosis:
    probes = [probe_http(url, era, timeout=timeout) for era in ERAS]
    return Diagnosis({"url": url}, probes, timeout, True, False)


# --- command line ---------------------------------------------------------------


def default_command() -> list[str]:
    """This project's own server, as an MCP host would start it."""
    return [sys.executable, "-m", PACKAGE, "serve"]


def _prog() -> str:
    invoked = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not invoked or invoked.endswith(".py") or invoked.startswith("-"):
        return f"python -m {PACKAGE}.diagnose"
    return f"{invoked} diagnose"


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog=_prog(),
        usage="%(prog)s [--timeout S] [--http URL | -- CMD [ARG ...]]",
        description="Start an MCP server (default: this project's), try both protocol eras over raw\n"
        "JSON-RPC, and print one JSON report: handshake, tools, health_check, stdout noise,\n"
        "stderr tail, and hints that name the likely cause and the fix.",
        epilog="exit codes:\n" + doc.split("Exit codes:\n", 1)[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for each answer (default: {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument("--http", metavar="URL", help="diagnose a Streamable HTTP endpoint instead")
    return parser


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    separated = "--" in arguments
    if separated:
        split = arguments.index("--")
        arguments, command = arguments[:split], arguments[split + 1 :]
    parser = build_parser()
    try:
        options = parser.parse_args(arguments)
        if separated and not command:
            parser.error("give the server command after --")
        if options.http and command:
            parser.error("give either --http URL or a command after --, not both")
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    if options.http:
        diagnosis = diagnose_http(options.http, timeout=options.timeout)
    else:
        diagnosis = diagnose_stdio(
            command or default_command(), timeout=options.timeout, require_all_eras=not command
        )
    report = diagnosis.report()
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    exit_code: int = report["exit_code"]
    return exit_code


if __name__ == "__main__":
    raise SystemExit(main())
