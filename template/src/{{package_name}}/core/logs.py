# Template-owned: `copier update` replaces this file; put your code in tools/.
"""structlog set up once, at the edge: JSON lines on stderr, secrets redacted.

Configured before `MCPServer` is built, so the SDK's own `logging.basicConfig`
finds a handler on the root logger and leaves it alone.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

import structlog

_SECRET_KEY = re.compile(r"pass(word)?|secret|token|api_?key|authorization|cookie|dsn|database_url", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^:/@\s]+:)[^@\s]+@", re.I)
REDACTED = "[redacted]"


@functools.lru_cache(maxsize=1024)
def _is_secret_key(key: str) -> bool:
    """Cached: the same few keys come by on every log line."""
    return _SECRET_KEY.search(key) is not None


def redact_secrets(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Blank values whose key names a secret, and passwords inside URLs anywhere."""
    for key, value in event_dict.items():
        if _is_secret_key(key):
            event_dict[key] = REDACTED
        elif isinstance(value, str) and "://" in value:
            event_dict[key] = _URL_PASSWORD.sub(rf"\g<scheme>{REDACTED}@", value)
    return event_dict


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is now: loggers are cached, the stream may be swapped."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "info") -> None:
    """Route structlog and the standard library (the SDK, uvicorn) to one JSON stream on stderr."""
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric_level)
    # The SDK logs every request at INFO; keep that for debug sessions only.
    quiet = logging.DEBUG if numeric_level <= logging.DEBUG else logging.WARNING
    for name in ("mcp", "httpx", "uvicorn.access"):
        logging.getLogger(name).setLevel(quiet)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
