# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Handshake diagnostics over raw JSON-RPC.

Standard library only, so it still works when the server's own imports (or `mcp`)
are broken: `python -m <package>.diagnose`.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

Era = Literal["2026-07-28", "2025-11-25"]
MODERN: Era = "2026-07-28"
LEGACY: Era = "2025-11-25"
CLIENT_INFO = {"name": "diagnose", "version": "1"}
_STDERR_TAIL_BYTES = 8192


class ServerClosed(Exception):
    """The server closed stdout (or exited) before answering."""


class NoAnswer(Exception):
    """The server did not answer within the time limit."""


class RawStdioSession:
    """A server process spoken to in plain JSON-RPC lines, every read bounded in time.

    Lines on stdout that are not JSON-RPC messages are kept in `noise`; the tail
    of stderr in `stderr_tail()`.
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
        for chunk in iter(lambda: self.process.stderr.read1(4096), b""):  # type: ignore[union-attr]
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) > _STDERR_TAIL_BYTES:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_tail(self, max_lines: int = 20) -> list[str]:
        text = b"".join(self._stderr).decode("utf-8", "replace")
        return text.splitlines()[-max_lines:]

    def send_line(self, line: bytes) -> None:
        """Write one raw line (a newline is added); a closed pipe is ignored."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
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
        return None

    def close(self, timeout: float = 10.0) -> int | None:
        """Close stdin, wait for the exit, drain stdout; return the exit code (None: killed)."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
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


def open_session(session: RawStdioSession, era: Era, *, timeout: float = 10.0) -> dict[str, Any]:
    """Start the protocol in one era: `server/discover`, or `initialize` then `initialized`."""
    if era == MODERN:
        return session.request("server/discover", with_envelope(era), timeout=timeout)
    response = session.request(
        "initialize",
        {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
        timeout=timeout,
    )
    session.notify("notifications/initialized")
    return response


def unbuffered_free_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without PYTHONUNBUFFERED, as MCP hosts start servers."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(extra or {})
    return env
