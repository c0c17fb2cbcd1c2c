# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Handshake diagnostics over raw JSON-RPC, standard library only (see `command` for its use).

The names below are the public part: the command (`main`), its exit codes, the protocol
eras, and the raw JSON-RPC client that tests and benchmarks use to send exact bytes. The
modules behind them may change in any template release.
"""

from .command import main
from .eras import ERAS, LEGACY, MODERN, Era, JsonRpcSession, envelope, open_session, with_envelope
from .exit_codes import (
    EXIT_HEALTHY,
    EXIT_NO_HANDSHAKE,
    EXIT_SERVER_FATAL,
    EXIT_STDOUT_NOISE,
    EXIT_TIMEOUT,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
)
from .report import Diagnosis, diagnose_http, diagnose_stdio
from .session import HttpFailure, HttpSession, NoAnswer, RawStdioSession, ServerClosed, unbuffered_free_env

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
