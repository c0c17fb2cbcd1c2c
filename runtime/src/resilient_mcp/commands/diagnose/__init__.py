"""Handshake diagnostics over raw JSON-RPC, standard library only (see `command` for its use).

The names below are the public part: the command (`main`), its exit codes, the protocol
eras, and the raw JSON-RPC client that tests and benchmarks use to send exact bytes. The
modules behind them may change in any template release.
"""

from resilient_mcp.commands.diagnose.command import main
from resilient_mcp.commands.diagnose.eras import (
    ERAS,
    LEGACY,
    MODERN,
    Era,
    JsonRpcSession,
    envelope,
    open_session,
    with_envelope,
)
from resilient_mcp.commands.diagnose.exit_codes import (
    EXIT_HEALTHY,
    EXIT_NO_HANDSHAKE,
    EXIT_SERVER_FATAL,
    EXIT_STDOUT_NOISE,
    EXIT_TIMEOUT,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
)
from resilient_mcp.commands.diagnose.report import Diagnosis, diagnose_http, diagnose_stdio
from resilient_mcp.commands.diagnose.session import (
    HttpFailure,
    HttpSession,
    NoAnswer,
    RawStdioSession,
    ServerClosed,
    unbuffered_free_env,
)

__all__ = [
    "ERAS",
    "EXIT_HEALTHY",
    "EXIT_NO_HANDSHAKE",
    "EXIT_SERVER_FATAL",
    "EXIT_STDOUT_NOISE",
    "EXIT_TIMEOUT",
    "EXIT_UNHEALTHY",
    "EXIT_USAGE",
    "LEGACY",
    "MODERN",
    "Diagnosis",
    "Era",
    "HttpFailure",
    "HttpSession",
    "JsonRpcSession",
    "NoAnswer",
    "RawStdioSession",
    "ServerClosed",
    "diagnose_http",
    "diagnose_stdio",
    "envelope",
    "main",
    "open_session",
    "unbuffered_free_env",
    "with_envelope",
]
