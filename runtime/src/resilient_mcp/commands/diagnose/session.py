"""Raw JSON-RPC connections, every read bounded in time: a child process's stdio, or HTTP.

Standard library only. These are what `diagnose` speaks through, and what this project's
tests and benchmarks use to send exactly the bytes they mean to send.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from resilient_mcp.commands.diagnose.eras import LEGACY, MODERN, Era
from resilient_mcp.commands.diagnose.this_project import client_token

DEFAULT_TIMEOUT_S = 10.0
_STDERR_TAIL_BYTES = 8192


class ServerClosed(Exception):
    """The server closed stdout (or exited) before answering."""


class NoAnswer(Exception):
    """The server did not answer within the time limit."""


class HttpFailure(Exception):
    """An HTTP endpoint answered with an error status and no JSON-RPC message."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}" if body else f"HTTP {status}")
        self.status = status


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
        # Raw reads, as for stderr: a daemon thread blocked inside a buffered reader holds its
        # lock, and an interpreter that exits meanwhile aborts when it closes that reader.
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        pending = b""
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._lines.put(line + b"\n")
        if pending:
            self._lines.put(pending)
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
        token = client_token()
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
        import urllib.error  # here: http.client and ssl cost a stdio diagnosis a third of its start
        import urllib.request

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
        import urllib.request

        request = urllib.request.Request(self.url, method="DELETE", headers=self._headers("", None))
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=2).close()


def unbuffered_free_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without PYTHONUNBUFFERED, as MCP hosts start servers."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(extra or {})
    return env
