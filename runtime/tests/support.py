"""Helpers for the core's tests: paths, the server command, and the environment a host gives it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from mcp.types import CallToolResult, TextContent

from resilient_mcp.commands.diagnose import unbuffered_free_env
from resilient_mcp.testing.stdio import ANSWER_TIMEOUT_S as ANSWER_TIMEOUT_S  # the tests take it from here
from resilient_mcp.testing.stdio import HostSession
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND, PACKAGE

# The server over stdio in raw JSON-RPC, with generous time limits: what every project's tests get.
StdioSession = HostSession

HERE = Path(__file__).parent
SAMPLE_TOOLS = HERE / "sample_tools"
NOISY_TOOLS = HERE / "noisy_tools"
HTTP_TOOLS = HERE / "http_tools"
LAUNCHER = HERE / "launch_with_tools.py"
SAMPLE_PACKAGE = HERE / "sample_project" / "src" / PACKAGE  # its instructions.md and icon.png

# Tests of what only one of the project's backends does (SAMPLE_PROJECT_BACKEND picks it); the
# store's own tests run on both backends in either variant.
postgres_project = pytest.mark.skipif(
    IDEMPOTENCY_BACKEND != "postgres",
    reason="needs a project whose idempotency backend is postgres (SAMPLE_PROJECT_BACKEND=postgres)",
)
sqlite_project = pytest.mark.skipif(
    IDEMPOTENCY_BACKEND != "sqlite",
    reason="needs a project whose idempotency backend is sqlite (SAMPLE_PROJECT_BACKEND=sqlite)",
)


def server_argv(*args: str, extra_tools: Path | None = None) -> list[str]:
    """The command an MCP client would run; with extra_tools, their modules join tools/."""
    if extra_tools is None:
        return [sys.executable, "-m", PACKAGE, *args]
    return [sys.executable, str(LAUNCHER), str(extra_tools), *args]


def server_env(**settings: str) -> dict[str, str]:
    """The current environment as an MCP host passes it: no PYTHONUNBUFFERED; settings by name."""
    return unbuffered_free_env({f"{ENV_PREFIX}{name.upper()}": value for name, value in settings.items()})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def http_server(
    env: dict[str, str],
    *,
    extra_tools: Path | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    stdout: int = subprocess.DEVNULL,
    stderr: int | IO[bytes] = subprocess.PIPE,
    preexec_fn: Callable[[], object] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`serve --transport http` on a free port, up and accepting: its /mcp URL and its process.

    The URL names the bound address (loopback for an all-interfaces bind), an IPv6 one in brackets.
    """
    port = port or free_port()
    bare = host.removeprefix("[").removesuffix("]")
    reach = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bare, bare)  # where a client connects
    in_url = f"[{reach}]" if ":" in reach else reach
    argv = server_argv(
        "serve", "--transport", "http", "--host", host, "--port", str(port), extra_tools=extra_tools
    )
    process = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, preexec_fn=preexec_fn)
    try:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while True:
            try:
                socket.create_connection((reach, port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                assert time.monotonic() < deadline, f"no HTTP server after {ANSWER_TIMEOUT_S:g} s"
                time.sleep(0.1)
        yield f"http://{in_url}:{port}/mcp", process
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=ANSWER_TIMEOUT_S)


def error_of(result: CallToolResult) -> tuple[str, dict[str, Any]]:
    """The first text block and `_meta.error` of a failed call, checked for shape."""
    assert result.is_error
    first = result.content[0]
    assert isinstance(first, TextContent)
    assert result.meta is not None
    error: dict[str, Any] = result.meta["error"]
    assert set(error) >= {"category", "retryable", "correlation_id"}
    assert first.text.startswith(f"{error['category']}: ")
    return first.text, error
