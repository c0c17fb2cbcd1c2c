"""What never leaves the server: secret-shaped values (in the log and in answers) and local paths.

One set of rules serves both the log processor and every message shown to the model, so
a secret the log would hide is hidden from the client too. Two kinds of rule:

- structural: the value of a field whose name says "secret" (`password=`, `'pw': '...'`,
  `"client_secret": "..."`, `?key=`, `Authorization: Bearer ...`, `Cookie: ...`), whatever the
  value looks like: a quoted value up to its closing quote, a bracketed one up to its closing
  bracket, a bare one up to the next delimiter, one character or a thousand;
- shapes: what a secret looks like without a name (PEM private keys, passwords in URLs, the
  formats of well-known providers, JWTs whole or cut, the pieces of a token that pydantic or a
  clip cut with "...", long base64 runs such as an AWS secret key).

A URL-encoded text (`password%3D...`, `https%3A%2F%2Fuser%3Apw%40host`, a query string inside a
query string) hides both from the rules: it is decoded (up to three times) and redacted again.

The known formats are written here rather than taken from detect-secrets: its plugins scan a
line in about 1.4 ms (this module: microseconds), flag every word of prose as "high entropy",
say which value matched but not where, use backtracking regexes, and pull in requests and PyYAML.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
PATH_HIDDEN = "[path]"
# Text scanned for secrets: a longer text keeps its start and its end (a traceback's last
# line), and what lies between is cut, never passed on unscanned.
MAX_SCANNED_CHARS = 32 * 1024

# Words that make a field name secret wherever they sit in it (dbPassword, x-api-key, AccountKey).
SECRET_NAME = (
    r"(?:pass(?:word|wd|phrase|code)|secret|token|api[_-]?key|access[_-]?key|account[_-]?key"
    r"|private[_-]?key|signature|authorization|cookie|credentials?|dsn|database[_-]?url"
    r"|connection[_-]?string)"
)
# Short words that make a name secret only as a whole part of it (`pw`, `db_pass`, `sessionId`),
# so that "bypass", "author" or "compass" stay.
SECRET_PARTS = frozenset({"pw", "pwd", "pass", "passwd", "sig", "session", "auth", "otp"})
# Names that are secret only as a query parameter (`?key=...`, `&code=...`): elsewhere a "key"
# or a "code" is usually an ordinary word (an idempotency key, an error code).
QUERY_SECRETS = frozenset({"key", "code"})


# Every pattern below is linear in the text: a match starts only where a run of its characters
# starts (a lookbehind) or at a fixed marker, every repetition is possessive, and the
# alternatives of a repetition start with different characters, so nothing is given back and a
# 32 KB text of any shape costs one pass. They are compiled when first used (`_patterns()`), which
# for a server that starts cleanly is its first call, not its start-up.

# What a rule already wrote, which a later rule must take as part of the secret it follows.
_ALREADY_HIDDEN = re.escape(REDACTED)
# The body of a PEM key (see `_Patterns.pem`).
_PEM_BODY = rf"(?:[A-Za-z0-9+/=\s\\:,|]++|-(?!----)|{_ALREADY_HIDDEN})*+"


# `name=`, `name: `, `"name": `, `'name': `, `\"name\": `; the value is measured after it.
_NAMED_TAIL = r"(?:\\*+[\"'])?+[ \t]*+(?P<sep>[=:])[ \t]*+"


def _nested(depth: int) -> str:
    """A bracketed value (list, dict, call) holding quoted strings and brackets `depth` deep."""
    atom = r"""[^\[\]{}()'"]++|'(?:[^'\\]++|\\.)*+'|"(?:[^"\\]++|\\.)*+\""""
    inner = atom
    for _ in range(depth):
        inner = rf"{atom}|\[(?:{inner})*+\]|\{{(?:{inner})*+\}}|\((?:{inner})*+\)"
    return rf"\[(?:{inner})*+\]|\{{(?:{inner})*+\}}|\((?:{inner})*+\)"


class _Patterns:
    """The built-in rules, compiled (about 25 patterns: milliseconds of CPU)."""

    def __init__(self) -> None:
        # Name parts: snake_case, kebab-case, dotted and camelCase words (`XApiKey`: X, Api, Key).
        self.part = re.compile(r"[A-Z]?[a-z0-9]++|[A-Z]+(?![a-z])")

        # A PEM private key (its header, body and footer; the body may hold repr's `\n`, the `|` margin
        # a traceback draws beside the members of an exception group, and the lines of a URL-encoded key
        # already hidden before it was decoded), and a footer whose header was cut off (pydantic shortens
        # a long value in the middle).
        self.pem = re.compile(
            rf"-----BEGIN(?P<label>[A-Z0-9 ]*+)-----{_PEM_BODY}(?:-----END[A-Z0-9 ]*+-----)?+"
        )

        self.pem_tail = re.compile(
            rf"(?<![A-Za-z0-9+/=\s\\|\]])(?:[A-Za-z0-9+/=\s\\|]++|{_ALREADY_HIDDEN})*+"
            r"-----END(?P<label>[A-Z0-9 ]*+)-----"
        )

        # user:password@ in a URL: the password runs to the last "@" before the host (it may hold "@"),
        # and the user may be empty (redis://:password@host).
        self.url_password = re.compile(
            r"(?P<keep>://(?<=[a-z0-9+.-]://)[^:/@\s'\"]*+:)(?:[^/@\s'\"]*+@)++", re.I
        )

        # The same password cut by a clip before its "@" (`postgresql://svc:Pa55...`): up to the cut.
        self.url_password_cut = re.compile(
            r"(?P<keep>://(?<=[a-z0-9+.-]://)[^:/@\s'\"]*+:)(?:[^/@\s'\".]++|\.(?!\.\.))++(?=\.\.\.)", re.I
        )

        # A bare value: up to whitespace, a quote or a separator of pairs.
        self.bare = re.compile(r"[^\s\"',;&<>]++")

        # An HTTP credential: an optional scheme, then the credentials.
        self.credentials = re.compile(
            r"(?:(?:bearer|basic|digest|token|negotiate|ntlm|apikey|sso-key)[ \t]++)?+[^\s\"',;&<>]++", re.I
        )

        # A Cookie header's value: every pair, to the end of the line.
        self.cookie = re.compile(r"[^\r\n\"']++")

        # The opening quote of a value: plain, or escaped once or more (JSON inside JSON or a repr).
        self.opening = re.compile(r"\\*+[\"']")

        # The inside of a quoted value, up to its closing quote: by quote, plain or escaped.
        self.quoted = {
            "'": re.compile(r"(?:[^'\\]++|\\.)*+", re.S),
            '"': re.compile(r'(?:[^"\\]++|\\.)*+', re.S),
        }

        self.escaped_quoted = {
            "'": re.compile(r"(?:[^\\]++|\\++(?!'))*+"),
            '"': re.compile(r'(?:[^\\]++|\\++(?!"))*+'),
        }

        self.bracketed = re.compile(_nested(3), re.S)

        self.shapes = (
            # Authorization: Bearer/Basic <credentials>, also without the header's name
            (
                re.compile(r"(?P<keep>\b(?:bearer|basic)\s++)[A-Za-z0-9._~+/=-]{8,}+", re.I),
                rf"\g<keep>{REDACTED}",
            ),
            # Well-known key formats: OpenAI/Stripe-style sk-/pk-/rk-, GitHub, Slack, AWS, Google, SendGrid.
            (
                re.compile(
                    r"\b(?:(?:sk|pk|rk)[-_][A-Za-z0-9_-]{8,}+"
                    r"|gh[pousr]_[A-Za-z0-9]{16,}+|github_pat_[A-Za-z0-9_]{20,}+"
                    r"|xox[abeprs]-[A-Za-z0-9-]{10,}+"
                    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids: long-term, temporary (STS)
                    r"|AIza[0-9A-Za-z_-]{30,}+"
                    rf"|SG\.[A-Za-z0-9_-]{{16,}}+\.(?:[A-Za-z0-9_-]{{16,}}+|{_ALREADY_HIDDEN}))"
                ),
                REDACTED,
            ),
            # Slack incoming webhooks: the path after /services/ is the credential.
            (
                re.compile(
                    r"(?P<keep>hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]++", re.I
                ),
                rf"\g<keep>{REDACTED}",
            ),
            # JWTs, whole or cut by pydantic or a clip ("eyJhbGciOiJIUzI1NiIsInR5...dQssw5c"): a base64url
            # run that opens with `{"` and goes on to a dot, with all that follows it.
            (re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+(?=\.)[A-Za-z0-9_.-]*+"), REDACTED),
        )

        # pydantic shows a long value as its first 25 and last 24 characters (quotes included): the end
        # has lost its context (the name before a password, the start of a key), so it goes.
        self.pydantic_cut = re.compile(r"(?P<keep>input_value=.{25}\.\.\.).{23}(?=., input_type=)")

        # A token cut by "..." (a clip, a shortened value): the piece before or after it, unless it is a
        # lowercase word. Two patterns, each starting where its run starts.
        self.cut_token = (
            re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_=-]{8,}+(?=\.\.\.)"),
            re.compile(r"(?<=\.\.\.)[A-Za-z0-9+/_=-]{8,}+"),
        )

        # Long base64 runs (an AWS secret access key is 40): kept when they read like text (see _blob).
        # A run starts after a `%XX` escape, not inside it (nor inside `%25XX`, an escape encoded again):
        # a URL-encoded text can still be decoded whole.
        self.base64_run = re.compile(
            r"(?:(?<![A-Za-z0-9+/_%-])|(?<=%[0-9A-Fa-f]{2})(?<!%25))[A-Za-z0-9+/_-]{40,}+={0,2}+"
        )

        # A `%XX` escape: a text without one is not decoded.
        self.escape = re.compile(r"%[0-9A-Fa-f]{2}")

        # Absolute paths: /a/b (two segments or more, so "km/h" or "/s" stay), ~/x, C:\x, C:\\x (in a
        # repr), file:///x. A URL's own path (https://host/a/b) follows a host, not a boundary: it stays.
        self.path = re.compile(
            r"(?:(?<=file://)|(?<![\w.:/\\~]))(?:~|[A-Za-z]:)?+[/\\]++(?:[\w.@%+-]++[/\\]++)++[\w.@%+-]*+"
        )


@functools.cache
def _patterns() -> _Patterns:
    return _Patterns()


# A URL-encoded text is decoded this many times at most: a query string inside a query string
# inside a query string.
_DECODINGS = 3
# Levels of dicts and lists `redact_fields` redacts by key; deeper ones go as redacted text.
NESTING = 8
_JSON_SCALARS = (str, bool, int, float, type(None))

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
    """The secret-name regex, the `name=` regex and the owner's shapes, compiled when first used:
    compiling them takes a millisecond, and a server that starts cleanly redacts nothing before
    its first call."""
    names = SECRET_NAME
    if _owner_keys:
        names = f"(?:{SECRET_NAME}|{'|'.join(re.escape(key) for key in _owner_keys)})"
    # A field name: a run of word characters, "-" (api-key) and whatever else an owner's key holds.
    extra = "".join(sorted({re.escape(c) for key in _owner_keys for c in key if not re.match(r"[\w-]", c)}))
    field = rf"[\w\-{extra}]"
    named = re.compile(rf"(?<!{field})(?P<name>{field}++){_NAMED_TAIL}")
    owner_shapes = tuple((re.compile(pattern), REDACTED) for pattern in _owner_patterns)
    return re.compile(names, re.I), named, owner_shapes


@functools.lru_cache(maxsize=1024)
def is_secret_name(name: str) -> bool:
    """Whether a field called `name` holds a secret. Cached: the same keys come by on every line."""
    return _names_a_secret(name, _rules()[0])


def _names_a_secret(name: str, names: re.Pattern[str]) -> bool:
    if names.search(name) is not None:
        return True
    return any(part.lower() in SECRET_PARTS for part in _patterns().part.findall(name))


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
    redacted = _redact_plain(text)
    if "%" in redacted:
        return _redact_encoded(redacted)
    return redacted


def _redact_encoded(text: str) -> str:
    """The text decoded (`%3D` is `=`, `+` a space) and redacted again, when that hides something
    more: a secret the encoding kept from the rules. Otherwise the text stays as it was written."""
    shown, level = text, text
    for _ in range(_DECODINGS):
        if _patterns().escape.search(level) is None:
            break
        decoded = unquote_plus(level)
        level = _redact_plain(decoded)
        if level != decoded:
            shown = level
    return shown


def _redact_plain(text: str) -> str:
    names, named, owner_shapes = _rules()
    p = _patterns()
    if "-----" in text:
        text = p.pem_tail.sub(_private_key, p.pem.sub(_private_key, text))
    if "://" in text:
        text = p.url_password.sub(rf"\g<keep>{REDACTED}@", text)
        if "..." in text:
            text = p.url_password_cut.sub(rf"\g<keep>{REDACTED}", text)
    text = _redact_named(text, names, named)
    for pattern, replacement in p.shapes:
        text = pattern.sub(replacement, text)
    if "..." in text:
        text = p.pydantic_cut.sub(rf"\g<keep>{REDACTED}", text)
        for cut in p.cut_token:
            text = cut.sub(_cut_token, text)
    text = p.base64_run.sub(_blob, text)
    for pattern, replacement in owner_shapes:
        text = pattern.sub(replacement, text)
    return text


def _private_key(match: re.Match[str]) -> str:
    return REDACTED if "PRIVATE KEY" in match["label"] else match[0]


def _cut_token(match: re.Match[str]) -> str:
    piece = match[0]
    return piece if piece.isalpha() and piece.islower() else REDACTED


def _blob(match: re.Match[str]) -> str:
    """A long base64 run is a secret when it mixes digits and both cases like random bytes do;
    a hex digest (one case), an identifier or a path (many separators) is left alone."""
    run = match[0]
    mixed = any(c.isdigit() for c in run) and any(c.islower() for c in run) and any(c.isupper() for c in run)
    separators = sum(run.count(c) for c in "/+_-")
    return REDACTED if mixed and separators <= len(run) // 6 else run


def _redact_named(text: str, names: re.Pattern[str], named: re.Pattern[str]) -> str:
    """`password=...`, `api_key: ...`, `"token": "..."`, `?key=...`: the value after a secret name.

    Each `name=` is found once; the value is measured only after a secret name, and a
    `name=` inside a value already hidden is part of that value.
    """
    pieces: list[str] = []
    done = 0
    for match in named.finditer(text):
        if match.start() < done:
            continue
        name = match["name"]
        if not (is_secret_name(name) if len(name) <= _CACHED_CHARS else _names_a_secret(name, names)):
            query = match.start() > 0 and text[match.start() - 1] in "?&" and match["sep"] == "="
            if not (query and name.lower() in QUERY_SECRETS):
                continue
        span = _value_span(text, match.end(), name, match["sep"])
        if span is None:
            continue
        start, end = span
        pieces += [text[done:start], REDACTED]
        done = end
    return "".join(pieces) + text[done:] if pieces else text


def _value_span(text: str, at: int, name: str, sep: str) -> tuple[int, int] | None:
    """Where the value that starts at `at` lies (its quotes and brackets stay outside), or None."""
    p = _patterns()
    if text.startswith(("b'", 'b"'), at):  # a bytes repr
        at += 1
    opening = p.opening.match(text, at)
    if opening is not None:
        quotes = p.quoted if opening.end() - at == 1 else p.escaped_quoted
        inside = quotes[opening[0][-1]].match(text, opening.end())
        assert inside is not None  # the pattern matches the empty string
        return (inside.start(), inside.end()) if inside.end() > inside.start() else None
    if text.startswith(("[", "{", "("), at):
        # A list or dict of secrets goes whole; past the nesting this rule follows, all that follows.
        bracketed = p.bracketed.match(text, at)
        return (at, bracketed.end() if bracketed is not None else len(text))
    lowered = name.lower()
    if sep == ":" and lowered.endswith("cookie"):
        value = p.cookie.match(text, at)
    elif lowered.endswith("authorization"):
        value = p.credentials.match(text, at)
    else:
        value = p.bare.match(text, at)
    return None if value is None else (at, value.end())


def redact_fields(value: Any, redact: Callable[[str], str] = redact_text, depth: int = NESTING) -> Any:
    """A value's dicts and lists with secret-named keys blanked and texts passed through `redact`,
    `depth` levels deep; any other object (and what lies deeper) as its redacted repr."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, _JSON_SCALARS):
        return value
    if depth > 0 and isinstance(value, dict):
        return {
            key: REDACTED
            if isinstance(key, str) and is_secret_name(key)
            else redact_fields(item, redact, depth - 1)
            for key, item in value.items()
        }
    if depth > 0 and isinstance(value, list | tuple | set | frozenset):
        return [redact_fields(item, redact, depth - 1) for item in value]
    return redact(repr(value))


def strip_paths(text: str) -> str:
    """The text with absolute file paths replaced by `[path]` (they describe the server's machine)."""
    return _patterns().path.sub(PATH_HIDDEN, text)
