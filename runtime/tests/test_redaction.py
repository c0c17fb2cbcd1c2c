"""The redaction rules over the secrets corpus, in every form a message can take; in linear time.

The end-to-end twin (test_secrets_end_to_end.py) sends the same corpus through every way of
failing, both eras and both transports; this one is the fast, exhaustive check of the rules.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from urllib.parse import quote, urlencode

import pytest
import structlog
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.types import ElicitRequestURLParams
from pydantic import BaseModel, ValidationError

from resilient_mcp.authoring.outcomes import shown, shown_protocol_error
from resilient_mcp.calls.validation import describe_validation_error
from resilient_mcp.telemetry.logs import REDACTED, configure_logging
from resilient_mcp.telemetry.redaction import MAX_SCANNED_CHARS, redact_text, strip_paths
from secrets_corpus import FORMS, NEGATIVES, PATHS, Planted, in_exception_group, leaks

# Far below what a backtracking rule costs on 32 KB (seconds), far above what a linear one
# takes on a loaded machine (about 10 ms).
LINEAR_BUDGET_S = 0.5


class Port(BaseModel):
    port: int


def pydantic_text(value: object) -> str:
    """What pydantic says of `value` given where an integer belongs: long values cut in the middle."""
    try:
        Port.model_validate({"port": value})
    except ValidationError as error:
        return str(error)
    raise AssertionError("validated")


def pydantic_described(value: object) -> str:
    try:
        Port.model_validate({"port": value})
    except ValidationError as error:
        return describe_validation_error(error)
    raise AssertionError("validated")


def group_traceback(text: str) -> str:
    return "".join(traceback.format_exception(in_exception_group(text)))


# The ways a planted text reaches a message: as is, as a repr, inside JSON, inside a dict repr,
# cut by pydantic, described by the core's validation, cut by a clip, in an exception group's
# traceback, and URL-encoded (a URL's parameter, a form body).
VIEWS: dict[str, Callable[[str], str]] = {
    "text": lambda text: text,
    "repr": repr,
    "json": lambda text: json.dumps({"detail": text}),
    "dict_repr": lambda text: repr({"detail": text, "n": 1}),
    "pydantic": pydantic_text,
    "pydantic_dict": lambda text: pydantic_text({"detail": text}),
    "validation": pydantic_described,
    "clipped": lambda text: text[:40] + "...",
    "exception_group": group_traceback,
    "url_encoded": lambda text: f"GET https://api.example.com/v1/find?q={quote(text, safe='')} failed",
    "form_encoded": lambda text: urlencode({"detail": text, "n": 1}),
}
# An absolute path is hidden from the client as written: one URL-encoded is not looked for.
PATH_VIEWS = {name: view for name, view in VIEWS.items() if not name.endswith("_encoded")}


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("form", FORMS, ids=[form.name for form in FORMS])
def test_no_secret_of_the_corpus_survives(form: Planted, view: str) -> None:
    message = VIEWS[view](form.text)
    assert not leaks(form, shown(message)), f"{form.name} leaked through {view}: {shown(message)!r}"
    assert not leaks(form, redact_text(message)), f"{form.name} leaked to the log through {view}"


@pytest.mark.parametrize("view", list(PATH_VIEWS))
@pytest.mark.parametrize("form", PATHS, ids=[form.name for form in PATHS])
def test_no_path_of_the_corpus_is_shown(form: Planted, view: str) -> None:
    message = PATH_VIEWS[view](form.text)
    assert not leaks(form, shown(message)), f"{form.name} shown through {view}: {shown(message)!r}"


def test_the_corpus_holds_every_form() -> None:
    assert len(FORMS) >= 55
    assert len({form.name for form in FORMS}) == len(FORMS)
    for form in (*FORMS, *PATHS):
        assert form.secrets, form.name
        assert all(secret in form.text for secret in form.secrets), form.name


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert shown(text) == text
    assert redact_text(repr({"detail": text})) == repr({"detail": text})


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_url_encoded_is_left_as_written(text: str) -> None:
    for encoded in (quote(text, safe=""), urlencode({"detail": text}), quote(quote(text, safe=""), safe="")):
        assert shown(encoded) == encoded


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{'password': 'correct horse, battery'}", "{'password': '[redacted]'}"),
        ("Authorization: Bearer abc.def", "Authorization: [redacted]"),
        ("?key=abc&page=2", "?key=[redacted]&page=2"),
        ("key=abc&page=2", "key=abc&page=2"),  # "key" alone is a secret only in a query string
        ("{'secret': ['a', {'b': 'c'}], 'n': 1}", "{'secret': [redacted], 'n': 1}"),
        ("redis://:pw@cache:6379/0", "redis://:[redacted]@cache:6379/0"),
        ("mysql://root:hunter2...", "mysql://root:[redacted]..."),  # cut before its "@"
        # A URL-encoded text that hides a secret is shown decoded, the secret redacted.
        ("password%3DPq9x%26user%3Dada", "password=[redacted]&user=ada"),
        ("next=%2Fcb%3Ftoken%3dTk9%26page%3D2", "next=/cb?token=[redacted]&page=2"),
        ("https%3A%2F%2Fsvc%3APw%40db%2Fapp", "https://svc:[redacted]@db/app"),
        ("q=coffee+beans&api_key%3DAk9", "q=coffee beans&api_key=[redacted]"),
        ("at 95% load, password%253DPw9", "at 95% load, password=[redacted]"),  # encoded twice
    ],
)
def test_the_value_goes_whole_and_its_surroundings_stay(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read /srv/app/config.py failed", "read [path] failed"),
        ("see https://docs.example.com/a/b and http://host:8080/x/y", None),
        (r"open C:\Users\ada\key.pem", "open [path]"),
        ("file:///etc/app/settings.toml", "file://[path]"),
        ("speed in km/h, 3/4 done", None),
    ],
)
def test_paths_go_and_urls_stay(text: str, expected: str | None) -> None:
    assert strip_paths(text) == (text if expected is None else expected)


def test_nested_log_fields_are_redacted_by_key(capsys: pytest.CaptureFixture[str]) -> None:
    class Settings:
        def __repr__(self) -> str:
            return "Settings(password='Obj3ctPw', region='eu')"

    configure_logging("info")
    structlog.get_logger("test").info(
        "connecting",
        target={
            "host": "db",
            "auth": {"password": "N3st3dPw", "user": "ada"},
            "hops": [{"token": "L1stTok"}],
        },
        attempts=[{"dsn": "postgresql://a:Dsn9Pw@db/app"}, "Authorization: Bearer Tr41lingTok"],
        settings=Settings(),
        count=3,
    )
    err = capsys.readouterr().err
    for secret in ("N3st3dPw", "L1stTok", "Dsn9Pw", "Tr41lingTok", "Obj3ctPw"):
        assert secret not in err
    (line,) = [json.loads(text) for text in err.splitlines() if text.startswith("{")]
    assert line["target"]["host"] == "db"
    assert line["target"]["auth"] == REDACTED  # "auth" names a secret: the whole branch goes
    assert line["target"]["hops"] == [{"token": REDACTED}]
    assert line["attempts"][0] == {"dsn": REDACTED}
    assert line["settings"] == "Settings(password='[redacted]', region='eu')"
    assert line["count"] == 3


@pytest.mark.parametrize("form", FORMS, ids=[form.name for form in FORMS])
def test_an_exception_group_is_logged_without_its_secrets(
    form: Planted, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("info")
    try:  # the group as the cause of what the call raised: as a tool's crash is logged
        raise RuntimeError("the call failed") from in_exception_group(form.text)
    except RuntimeError as caused:
        structlog.get_logger("test").error("call_failed", exc_info=caused)
    err = capsys.readouterr().err
    assert "ExceptionGroup: every lookup failed" in err
    assert not leaks(form, err), f"{form.name} leaked to the log: {leaks(form, err)[:3]}"


def test_a_protocol_errors_message_and_data_are_shown_redacted() -> None:
    data = {"detail": "retry with api_key=Ak-91QxyzPw", "password": "Pw9", "hops": [{"token": "Tk9"}], "n": 2}
    error = shown_protocol_error(MCPError(-32001, "upstream said 401 to Bearer Opaq9ueT0kenXy", data))
    assert error.error.message == "upstream said 401 to Bearer [redacted]"
    assert str(error) == error.error.message
    assert error.error.data == {
        "detail": "retry with api_key=[redacted]",
        "password": REDACTED,
        "hops": [{"token": REDACTED}],
        "n": 2,
    }
    assert "Opaq9ueT0kenXy" not in repr(error.args)


def test_a_url_elicitations_url_is_left_for_the_user_to_open() -> None:
    url = "https://auth.example.com/connect?session=S3ss10n&token=T0k3n"
    asked = ElicitRequestURLParams(message="Sign in", url=url, elicitation_id="e-1")
    error = shown_protocol_error(UrlElicitationRequiredError([asked], "sign in: password=Pw9"))
    assert error.error.data["elicitations"][0]["url"] == url
    assert error.error.message == "sign in: password=[redacted]"


def adversarial_texts() -> dict[str, str]:
    """32 KB texts built to make each rule work hardest: long runs of what it matches."""
    units = {
        "word": "k",
        "spaces": "a ",
        "pairs": "ab=cd,",
        "secret_pairs": "password=x ",
        "quoted_secrets": "'pw': '",
        "unclosed_quotes": "'password': 'x\\",
        "brackets": "{'secret': [",
        "escaped_quotes": '\\"token\\": \\"',
        "base64": "Ab3+",
        "base64_with_padding": "Ab3+=",
        "pem_headers": "-----BEGIN RSA PRIVATE KEY-----",
        "pem_footers": "MIIE\\n-----END RSA PRIVATE KEY-----",
        "pem_dashes": "-----",
        "urls": "://a:b@",
        "at_signs": "a@",
        "jwt_prefixes": "eyJabcdefgh.",
        "ellipses": "Abc12345...",
        "pydantic_cuts": "input_value=" + "x" * 25 + "...",
        "slashes": "/a",
        "schemes": "Authorization: Bearer ",
        "cookies": "Cookie: a=b; ",
        "slack": "hooks.slack.com/services/",
        "camel_names": "aB",
        "escapes": "%3D",
        "escapes_encoded_again": "%2525",
        "escaped_base64": "%2FAb3+",
        "escaped_pairs": "password%3Dx%26",
        "redacted_marks": "[redacted]",
        "pem_with_redacted_marks": "-----BEGIN RSA PRIVATE KEY-----[redacted]",
        "cut_url_passwords": "://a:b.",
    }
    return {
        name: (unit * (MAX_SCANNED_CHARS // len(unit) + 1))[:MAX_SCANNED_CHARS]
        for name, unit in units.items()
    }


@pytest.mark.parametrize(("name", "text"), list(adversarial_texts().items()))
def test_every_rule_is_linear_on_hostile_text(name: str, text: str) -> None:
    for shape in (text, text + "x" * (200_000 - len(text))):  # at the bound, and far past it (cut)
        began = time.perf_counter()
        shown(shape)
        took = time.perf_counter() - began
        assert took < LINEAR_BUDGET_S, f"{name}: {len(shape)} characters took {took:.3f} s"


def test_one_typical_message_costs_microseconds() -> None:
    message = (
        "lookup failed for city Lisbon after 3 attempts: upstream answered 503, api_key=sk-live-0123456789"
    )
    redact_text(message + " warm")
    began = time.perf_counter()
    for index in range(200):
        redact_text(f"{message} {index}")  # distinct texts: the cache of short ones does not help
    per_message = (time.perf_counter() - began) / 200
    assert per_message < 0.005, f"{per_message * 1e6:.0f} µs a message"
