# Template-owned: `copier update` replaces this file; put your code in tools/.
"""What never leaves the server: secret-shaped values (in the log and in answers) and local paths.

One set of rules serves both the log processor and every message shown to the model, so
a secret the log would hide is hidden from the client too.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

REDACTED = "[redacted]"
PATH_HIDDEN = "[path]"
# Text scanned for secrets: a longer text keeps its start and its end (a traceback's last
# line), and what lies between is cut, never passed on unscanned.
MAX_SCANNED_CHARS = 32 * 1024

# Field names whose values are secrets, wherever they appear (log keys, `name=value` in text).
SECRET_NAME = (
    r"(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|authorization|cookie|credentials?|dsn|database[_-]?url)"
)


# Each shape is linear in the text: a match starts only where a run of its characters starts
# (or at a fixed marker), and no run is given back (possessive), so a 200 KB word costs one
# pass instead of one per letter.
_SHAPES = (
    # user:password@ in any URL (RFC 3986 userinfo holds no "/")
    (re.compile(r"(?P<keep>://(?<=[a-z0-9+.-]://)[^:/@\s]++:)[^@/\s]++@", re.I), rf"\g<keep>{REDACTED}@"),
    # Authorization: Bearer/Basic <credentials>
    (re.compile(r"(?P<keep>\b(?:bearer|basic)\s++)[A-Za-z0-9._~+/=-]{8,}+", re.I), rf"\g<keep>{REDACTED}"),
    # Well-known key formats: OpenAI/Stripe-style sk-/pk-/rk-, GitHub, Slack, AWS, Google.
    (
        re.compile(
            r"\b(?:(?:sk|pk|rk)[-_][A-Za-z0-9_-]{8,}+"
            r"|gh[pousr]_[A-Za-z0-9]{16,}+|github_pat_[A-Za-z0-9_]{20,}+"
            r"|xox[abprs]-[A-Za-z0-9-]{10,}+"
            r"|AKIA[0-9A-Z]{16}"
            r"|AIza[0-9A-Za-z_-]{30,}+)"
        ),
        REDACTED,
    ),
    # JWTs: three base64url segments, the first from the start of its run.
    (re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"), REDACTED),
)
# The value after `name=` / `name: ` / `"name": "`: four characters or more.
_VALUE = re.compile(r"[^\s\"',;&]{4,}+")


_owner_keys: tuple[str, ...] = ()
_owner_patterns: tuple[str, ...] = ()


def configure_redaction(keys: Sequence[str] = (), patterns: Sequence[str] = ()) -> None:
    """Add the owner's secret field names (`REDACT_KEYS`) and value regexes (`REDACT_PATTERNS`)."""
    global _owner_keys, _owner_patterns
    _owner_keys, _owner_patterns = tuple(keys), tuple(patterns)
    _rules.cache_clear()
    is_secret_name.cache_clear()
    _redact_short.cache_clear()


@functools.cache
def _rules() -> tuple[re.Pattern[str], re.Pattern[str], tuple[tuple[re.Pattern[str], str], ...]]:
    """The secret-name regex, the `name=` regex and the secret shapes, compiled when first used:
    compiling them takes a millisecond, and a server that starts cleanly redacts nothing before
    its first call."""
    names = SECRET_NAME
    if _owner_keys:
        names = f"(?:{SECRET_NAME}|{'|'.join(re.escape(key) for key in _owner_keys)})"
    # A field name: a run of word characters, "-" (api-key) and whatever else an owner's key holds.
    extra = "".join(sorted({re.escape(c) for key in _owner_keys for c in key if not re.match(r"[\w-]", c)}))
    field = rf"[\w\-{extra}]"
    named = re.compile(rf"(?<!{field})(?P<name>{field}++)[\"']?\s*+[=:]\s*+[\"']?(?=[^\s\"',;&]{{4}})")
    owner_shapes = tuple((re.compile(pattern), REDACTED) for pattern in _owner_patterns)
    return re.compile(names, re.I), named, _SHAPES + owner_shapes


# Absolute paths: /a/b (two segments or more, so "km/h" or "/s" stay), ~/x, C:\x.
_PATH = re.compile(r"(?<![\w.:/\\~])(?:~|[A-Za-z]:)?[/\\](?:[\w.@%+-]+[/\\])+[\w.@%+-]*")


@functools.lru_cache(maxsize=1024)
def is_secret_name(name: str) -> bool:
    """Whether a field called `name` holds a secret. Cached: the same keys come by on every line."""
    return _rules()[0].search(name) is not None


def redact_text(text: str) -> str:
    """The text with every secret-shaped value replaced by `[redacted]`.

    A text past `MAX_SCANNED_CHARS` (a client's 200 KB argument name, say) is cut before the
    scan: however it is shaped, one message holds the event loop for milliseconds at most.
    """
    if len(text) > MAX_SCANNED_CHARS:
        half = MAX_SCANNED_CHARS // 2
        text = f"{text[:half]} ... ({len(text) - 2 * half} characters cut) ... {text[-half:]}"
    if len(text) <= _CACHED_CHARS:
        return _redact_short(text)
    return _redact(text)


_CACHED_CHARS = 64  # tool names, events, short messages: the same few strings on every line


@functools.lru_cache(maxsize=4096)
def _redact_short(text: str) -> str:
    return _redact(text)


def _redact(text: str) -> str:
    names, named, shapes = _rules()
    url, *others = shapes
    text = _redact_named(url[0].sub(url[1], text), names, named)
    for pattern, replacement in others:
        text = pattern.sub(replacement, text)
    return text


def _redact_named(text: str, names: re.Pattern[str], named: re.Pattern[str]) -> str:
    """`password=...`, `api_key: ...`, `"token": "..."`: the value after a name that holds a secret name.

    Each `name=` is found once; the value is measured only after a secret name, and a
    `name=` inside a value already hidden is part of that value.
    """
    pieces: list[str] = []
    done = 0
    for match in named.finditer(text):
        if match.start() < done or names.search(match["name"]) is None:
            continue
        value = _VALUE.match(text, match.end())
        assert value is not None  # the lookahead saw four value characters
        pieces += [text[done : match.end()], REDACTED]
        done = value.end()
    return "".join(pieces) + text[done:] if pieces else text


def strip_paths(text: str) -> str:
    """The text with absolute file paths replaced by `[path]` (they describe the server's machine)."""
    return _PATH.sub(PATH_HIDDEN, text)
