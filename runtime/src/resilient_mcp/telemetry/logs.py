"""structlog set up once, at the edge: JSON lines on stderr, secrets redacted.

Configured before `MCPServer` is built, so the SDK's own `logging.basicConfig`
finds a handler on the root logger and leaves it alone.

The one line per tool call is written by `log_call`, not through the processor chain:
its fields are known (only the tool name and the caller's subject can come from
outside, so only they are redacted) and it is the one line on every call's path.

structlog itself loads at its first use, not at start-up: the core's loggers (`get_logger`) are
proxies that import it at their first line, the standard library's handler builds its formatter
at its first record, and whatever imports structlog first (an owner's tools module, a line) finds
it configured: `configure_logging` leaves a finder on `sys.meta_path` that configures it as soon
as it has loaded. A server that starts cleanly writes no such line before its first call.

Python's own last resort for an exception nobody caught (`sys.excepthook`, a thread's
`threading.excepthook`, `sys.unraisablehook`) would print a raw traceback, secrets and
all: they log a redacted JSON line instead.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from importlib.machinery import ModuleSpec
from json.encoder import encode_basestring_ascii as _quote
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO, cast

from resilient_mcp.telemetry.call_context import current_call
from resilient_mcp.telemetry.redaction import REDACTED, is_secret_name, redact_fields, redact_text
from resilient_mcp.telemetry.stderr_writer import NonBlockingStderr

if TYPE_CHECKING:
    import structlog

__all__ = [
    "REDACTED",
    "call_line",
    "configure_logging",
    "correlate_traces",
    "get_logger",
    "log_call",
    "redact_secrets",
]

# Fields the core fills with values it made itself (never a secret): skipped on the hot path.
_OWN_FIELDS = frozenset({"timestamp", "level", "correlation_id", "outcome", "category", "logger"})
_JSON_SCALARS = (str, bool, int, float, type(None))


def redact_secrets(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Blank values whose key names a secret, and secret-shaped values inside any text.

    Runs after exceptions are formatted, so a secret in an exception's message is caught too.
    """
    for key, value in event_dict.items():
        if key in _OWN_FIELDS:
            continue
        if is_secret_name(key):
            event_dict[key] = REDACTED
        elif isinstance(value, str):
            event_dict[key] = redact_text(value)
        elif not isinstance(value, _JSON_SCALARS):
            # dicts and lists by key, at any depth; any other object as the redacted repr the
            # JSON renderer would have written unredacted
            event_dict[key] = redact_fields(value)
    return event_dict


def add_call_fields(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Give a line logged during a tool call (the owner's too) that call's id and tool."""
    call = current_call()
    if call is not None and call.correlation_id:
        event_dict.setdefault("correlation_id", call.correlation_id)
        event_dict.setdefault("tool", call.tool)
    return event_dict


TraceIds = Callable[[], tuple[str, str] | None]
# The current span's (trace_id, span_id), set by `server.otel` when traces are exported: None, no lookup.
_trace_ids: TraceIds | None = None


def correlate_traces(trace_ids: TraceIds | None) -> None:
    """From now on, every line written inside a recording span carries its trace and span id."""
    global _trace_ids
    _trace_ids = trace_ids


def add_trace_ids(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The ids that find this line's trace (W3C hex), when traces are exported and a span records."""
    if _trace_ids is not None:
        ids = _trace_ids()
        if ids is not None:
            event_dict.setdefault("trace_id", ids[0])
            event_dict.setdefault("span_id", ids[1])
    return event_dict


_call_lines = True  # whether the level lets info lines through; set by configure_logging
_second: tuple[int, bytes] = (0, b"")  # the last whole second seen, as ISO text: one strftime a second
# The line's constant pieces, encoded once: up to the correlation id by tool name, and from the
# outcome to the duration by (outcome, category). Client-sent (unknown) names are bounded by the cap.
_HEADS: dict[str, bytes] = {}
_MIDDLES: dict[tuple[str, str | None], bytes] = {}
_MAX_HEADS = 1024


def call_line(
    tool: str,
    correlation_id: str,
    outcome: str,
    category: str | None,
    duration_ms: float,
    attempts: int,
    subject: str | None,
    now_ns: int,
    trace_ids: tuple[str, str] | None = None,
) -> bytes:
    """The call's JSON line, encoded: the fields and values the processor chain gives them.

    Pure ASCII (`_quote` escapes the rest as JSON's `ensure_ascii` does), so no encoder runs.
    `trace_ids` are hex the core formatted itself: written as they are.
    """
    global _second
    head = _HEADS.get(tool)
    if head is None:
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        head = _HEADS[tool] = f'{{"event":"tool_call","tool":{_quote(tool)},"correlation_id":"'.encode()
    middle = _MIDDLES.get((outcome, category))
    if middle is None:
        category_json = "null" if category is None else _quote(category)
        middle = _MIDDLES[outcome, category] = (
            f'","outcome":{_quote(outcome)},"category":{category_json},"duration_ms":'.encode()
        )
    who = b"" if subject is None else f',"subject":{_quote(redact_text(subject))}'.encode()
    if trace_ids is not None:
        who += b',"trace_id":"%b","span_id":"%b"' % (trace_ids[0].encode(), trace_ids[1].encode())
    whole, micros = divmod(now_ns // 1000, 1_000_000)
    if whole != _second[0]:
        _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)).encode())
    # As `TimeStamper(fmt="iso", utc=True)`: datetime.isoformat() leaves out a zero fraction.
    fraction = b".%06dZ" % micros if micros else b"Z"
    return b'%b%b%b%.2f,"attempts":%d%b,"level":"info","timestamp":"%b%b"}\n' % (
        head,
        correlation_id.encode(),
        middle,
        duration_ms,
        attempts,
        who,
        _second[1],
        fraction,
    )


def log_call(
    tool: str,
    correlation_id: str,
    outcome: str,
    category: str | None,
    duration_ms: float,
    attempts: int,
    subject: str | None,
) -> None:
    """The line every tool call gets: the fields the processor chain would give it, in a microsecond.

    `tool` must already be safe to log (a declared name, or a client's text redacted);
    `correlation_id`, `outcome` and `category` are the core's own words.
    """
    if not _call_lines:
        return
    ids = None if _trace_ids is None else _trace_ids()
    line = call_line(
        tool, correlation_id, outcome, category, duration_ms, attempts, subject, time.time_ns(), ids
    )
    stream = sys.stderr
    if type(stream) is NonBlockingStderr:  # serving: the encoded line, in one os.write
        stream.write_bytes(line)
        return
    stream.write(line.decode())  # a stream someone put there (a test's capture, a file)
    if not getattr(stream, "line_buffering", False):  # a real stderr wrote the line at its newline
        stream.flush()


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is now: loggers are cached, the stream may be swapped."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_level = logging.INFO  # what configure_logging was given: structlog is configured with it when it loads


def configure_logging(level: str = "info") -> None:
    """Route structlog and the standard library (the SDK, uvicorn) to one JSON stream on stderr."""
    global _call_lines, _level
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    _call_lines = numeric_level <= logging.INFO
    _level = numeric_level
    if "structlog" in sys.modules:
        _configure_structlog()
    elif _CONFIGURE_ON_IMPORT not in sys.meta_path:
        sys.meta_path.insert(0, _CONFIGURE_ON_IMPORT)
    root = logging.getLogger()
    root.handlers[:] = [_JsonLinesHandler(sys.stderr)]
    root.setLevel(numeric_level)
    # The SDK logs every request at INFO; keep that for debug sessions only.
    quiet = logging.DEBUG if numeric_level <= logging.DEBUG else logging.WARNING
    for name in ("mcp", "httpx", "uvicorn.access"):
        logging.getLogger(name).setLevel(quiet)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    sys.unraisablehook = _log_unraisable


def _shared_processors() -> list[structlog.types.Processor]:
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        add_call_fields,
        add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _configure_structlog() -> None:
    """structlog's chain, at the level configure_logging was given: JSON, redacted, on stderr."""
    import structlog

    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.processors.format_exc_info,
            redact_secrets,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_level),
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )


class _JsonLinesHandler(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in typeshed
    """The standard library's records as structlog's JSON lines; its formatter made at the first record."""

    def format(self, record: logging.LogRecord) -> str:
        if self.formatter is None:
            import structlog

            self.setFormatter(
                structlog.stdlib.ProcessorFormatter(
                    foreign_pre_chain=[*_shared_processors(), structlog.stdlib.add_logger_name],
                    processors=[
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        structlog.processors.format_exc_info,
                        redact_secrets,
                        structlog.processors.JSONRenderer(),
                    ],
                )
            )
        return super().format(record)


class _ConfiguringLoader(importlib.abc.Loader):
    """structlog's own loader, then `_configure_structlog`: whoever imports it gets it configured."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _configure_structlog()

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ...: the real loader's
        return getattr(self._loader, name)


class _ConfigureOnImport(importlib.abc.MetaPathFinder):
    """Finds structlog once, as the other finders do, and hands it a loader that configures it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "structlog":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # its work is done after this import, whatever the outcome
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ConfiguringLoader(spec.loader)
        return spec


_CONFIGURE_ON_IMPORT = _ConfigureOnImport()


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    get_logger("uncaught").error("uncaught_exception", exc_info=(kind, value, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # what the default hook ignores too
    thread = args.thread.name if args.thread is not None else None
    get_logger("uncaught").error(
        "uncaught_exception",
        thread=thread,
        exc_info=(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback),
    )


def _log_unraisable(unraisable: Any) -> None:
    value = unraisable.exc_value or unraisable.exc_type()
    get_logger("uncaught").error(
        "unraisable_exception",
        detail=unraisable.err_msg or "",
        exc_info=(unraisable.exc_type, value, unraisable.exc_traceback),
    )


# A bound logger's line methods and their levels: below the configured one, a line is dropped.
_LEVEL_OF_METHOD = {
    name: logging.getLevelNamesMapping()[name.upper()]
    for name in ("debug", "info", "warning", "error", "critical")
}


def _dropped(*_: Any, **__: Any) -> None:
    """A line below the configured level, as structlog's filtering logger drops it."""


class _FirstUseLogger:
    """structlog's logger for `name`, looked up at its first line: structlog loads then.

    A line below the configured level is dropped here without loading it (a `debug` line at
    start-up must not load it for a server that logs at `info`): what structlog's filtering
    logger would do with it anyway.
    """

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._logger is None:
            if _LEVEL_OF_METHOD.get(attribute, _level) < _level:
                return _dropped
            import structlog

            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attribute)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """The core's logger for a module; structlog's own `get_logger` works alike (and loads it)."""
    return cast("structlog.typing.FilteringBoundLogger", _FirstUseLogger(name))
