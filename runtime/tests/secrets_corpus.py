"""Secrets of every common shape, planted in text, and what must never come out of the server.

Each form is a text a tool (or a library under it) might put in an error message, with the
substrings that are secret in it. Add a form here for each leak found. The negatives are texts
that hold no secret and must come out as they went in.

Key-shaped values are put together when this module is imported, so no provider's secret
scanner mistakes this file for a leak.
"""

from __future__ import annotations

import base64
import random
import re
from typing import NamedTuple

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


class Planted(NamedTuple):
    name: str
    text: str
    secrets: tuple[str, ...]


_random = random.Random(23)  # the same "secrets" on every run


def _chars(alphabet: str, count: int) -> str:
    return "".join(_random.choice(alphabet) for _ in range(count))


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_URL_SAFE = _B64[:62] + "_-"
_ALNUM = _B64[:62]


def _pem(label: str, lines: int = 12) -> tuple[str, tuple[str, ...]]:
    body = [base64.b64encode(_random.randbytes(48)).decode() for _ in range(lines)]
    marker = f"{label} PRIVATE KEY-----"
    return "\n".join([f"-----BEGIN {marker}", *body, f"-----END {marker}"]), tuple(body)


RSA_KEY, RSA_BODY = _pem("RSA")
PKCS8_KEY, PKCS8_BODY = _pem("", 8)
OPENSSH_KEY, OPENSSH_BODY = _pem("OPENSSH", 6)
EC_KEY, EC_BODY = _pem("EC", 3)
# A real P-256 key: its last line is short (36 characters), below the rule for long base64 runs.
EC_REAL_KEY = (
    ec.derive_private_key(int.from_bytes(_random.randbytes(31)), ec.SECP256R1())
    .private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    .decode()
)
EC_REAL_BODY = tuple(EC_REAL_KEY.strip().splitlines()[1:-1])
AZURE_KEY = base64.b64encode(_random.randbytes(64)).decode()
AWS_SECRET = "wJa1rXUtnFEMI/K7MDENG/" + _chars(_ALNUM, 18)
_SLACK_ID = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
SLACK_PATH = f"T{_chars(_SLACK_ID, 10)}/B{_chars(_SLACK_ID, 10)}/{_chars(_ALNUM, 24)}"
SENDGRID_KEY = "SG" + "." + _chars(_URL_SAFE, 22) + "." + _chars(_URL_SAFE, 43)
JWT_PAYLOAD = (
    base64.urlsafe_b64encode(b'{"sub":"user-8472","scope":"admin","exp":4102444800}').decode().rstrip("=")
)
JWT_SIGNATURE = _chars(_URL_SAFE, 43)
JWT = f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{JWT_PAYLOAD}.{JWT_SIGNATURE}"
BLOB = base64.b64encode(b"a private blob: 48 bytes that should never leak!").decode()
GITHUB_TOKEN = "ghp" + "_" + _chars(_ALNUM, 36)
# An AWS secret access key with more separators than the usual example's two (real ones hold up to ~6).
AWS_SECRET_SLASHED = "/".join(_chars(_ALNUM, 7) for _ in range(5)) + "+" + _chars(_ALNUM, 4)
AWS_TEMPORARY_KEY_ID = "ASIA" + _chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)

FORMS: tuple[Planted, ...] = (
    Planted("pem_rsa", f"could not load key:\n{RSA_KEY}\n", RSA_BODY),
    Planted("pem_pkcs8", f"key file holds {PKCS8_KEY}", PKCS8_BODY),
    Planted("pem_openssh", OPENSSH_KEY, OPENSSH_BODY),
    Planted("pem_in_repr", f"bad config {{'tls_key': {EC_KEY!r}}}", EC_BODY),
    Planted("pem_ec", f"the signing key was refused:\n{EC_REAL_KEY}", EC_REAL_BODY),
    Planted(
        "azure_connection_string",
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
        (AZURE_KEY,),
    ),
    Planted(
        "azure_sas",
        "GET https://acme.blob.core.windows.net/c/report.csv?sv=2022-11-02&sp=r&se=2030-01-01T00:00:00Z"
        "&sig=Qw3rTy%2BuIoP9aSdF%2FgHjKl0%3D failed with 403",
        ("Qw3rTy%2BuIoP9aSdF%2FgHjKl0%3D",),
    ),
    Planted(
        "query_key",
        "https://maps.example.com/api/geocode?key=AbCdEfGh0123Xyz&address=Lisbon answered 403",
        ("AbCdEfGh0123Xyz",),
    ),
    Planted(
        "query_code",
        "POST https://acme-fn.azurewebsites.net/api/hook?code=Zt7Yq2Wm9Lp4Kx8R&clientId=default timed out",
        ("Zt7Yq2Wm9Lp4Kx8R",),
    ),
    Planted(
        "url_password_with_at",
        "cannot connect to postgresql://app:Pq@ss@W0rd@db.internal:5432/app",
        ("Pq@ss@W0rd",),
    ),
    Planted(
        "url_empty_user", "redis://:R3disPassW0rd@cache:6379/0 refused the connection", ("R3disPassW0rd",)
    ),
    Planted("repr_pw", "login failed for {'user': 'ada', 'pw': 'Xq7Vw'}", ("Xq7Vw",)),
    Planted("repr_short_password", "rejected {'user': 'ada', 'password': 'Zq9'}", ("Zq9",)),
    Planted(
        "repr_password_with_spaces",
        "rejected {'user': 'ada', 'password': 'correct horse, battery staple'}",
        ("correct horse, battery staple",),
    ),
    Planted("repr_bytes", "rejected {'passwd': b'Byt3sPassW'}", ("Byt3sPassW",)),
    Planted(
        "repr_list",
        "{'api_keys': ['Kk1-FirstKey', 'Kk2-SecondKey'], 'region': 'eu'}",
        ("Kk1-FirstKey", "Kk2-SecondKey"),
    ),
    Planted("kwargs_repr", "connect(host='db', password='pa ss;wo&rd=Q') failed", ("pa ss;wo&rd=Q",)),
    Planted("json_client_secret", '{"client_id": "app", "client_secret": "Cs-9F8eX7dQ"}', ("Cs-9F8eX7dQ",)),
    Planted("json_refresh_token", '{"refresh_token":"Rt.9aXbY7cZ","expires_in":3600}', ("Rt.9aXbY7cZ",)),
    Planted("escaped_json", 'body was "{\\"password\\": \\"Esc Aped Pw\\"}"', ("Esc Aped Pw",)),
    Planted("url_encoded_password", "form password=Pq%40ss%20W0rd&user=ada was refused", ("Pq%40ss%20W0rd",)),
    Planted("env_pwd", "DB_PWD=Hx8!kQ and DB_USER=ada", ("Hx8!kQ",)),
    Planted("yaml_secret", "secret: S3-valUe-77", ("S3-valUe-77",)),
    Planted("query_session", "GET /callback?session=SeSs_77aXq9&next=%2F", ("SeSs_77aXq9",)),
    Planted("auth_field", "auth=YWRhOm9wZW4tU2VzYW1l rejected", ("YWRhOm9wZW4tU2VzYW1l",)),
    Planted("database_url", "DATABASE_URL=postgresql://svc:Pg-Pa55W@db/app is unreachable", ("Pg-Pa55W",)),
    Planted("base64_blob", f"upstream answered with payload {BLOB} and closed", (BLOB,)),
    Planted(
        "aws_secret_key",
        f"the credentials AKIAIOSFODNN7EXAMPLE {AWS_SECRET} were refused",
        (AWS_SECRET, "AKIAIOSFODNN7EXAMPLE"),
    ),
    Planted(
        "aws_secret_key_slashed",
        f"aws configure got {AWS_SECRET_SLASHED} and refused it",
        (AWS_SECRET_SLASHED,),
    ),
    Planted("aws_temporary_key_id", f"session {AWS_TEMPORARY_KEY_ID} expired", (AWS_TEMPORARY_KEY_ID,)),
    Planted(
        "slack_webhook", f"POST https://hooks.slack.com/services/{SLACK_PATH} answered 404", (SLACK_PATH,)
    ),
    Planted("sendgrid_key", f"mail relay refused key {SENDGRID_KEY}", (SENDGRID_KEY,)),
    Planted("github_token", f"clone with {GITHUB_TOKEN} failed", (GITHUB_TOKEN,)),
    Planted(
        "authorization_bearer",
        "upstream said 401 to Authorization: Bearer Opaq9ueT0kenXy",
        ("Opaq9ueT0kenXy",),
    ),
    Planted("authorization_bearer_short", "Authorization: Bearer Q7x", ("Q7x",)),
    Planted("authorization_basic", "Authorization: Basic YWRhOkx1djNsYWNl", ("YWRhOkx1djNsYWNl",)),
    # The credentials without a header's name before them: only their scheme says what they are.
    Planted(
        "bearer_without_header", "retried with bearer Zq7RtY4vKp9fQx2L after a 401", ("Zq7RtY4vKp9fQx2L",)
    ),
    Planted("basic_without_header", "the proxy wants Basic cm9vdDpodW50ZXIy here", ("cm9vdDpodW50ZXIy",)),
    Planted(
        "cookie_header",
        "sent Cookie: sid=Ck1eVal9; csrftoken=Zyx9W87q to the upstream",
        ("Ck1eVal9", "Zyx9W87q"),
    ),
    Planted("x_api_key_header", "X-Api-Key: K3y-Val-09Zq was refused", ("K3y-Val-09Zq",)),
    Planted(
        "headers_dict",
        "{'Authorization': 'Bearer Tok_4F9cX2e7', 'Accept': 'application/json'}",
        ("Tok_4F9cX2e7",),
    ),
    Planted("jwt", f"token {JWT} is expired", (JWT_PAYLOAD, JWT_SIGNATURE)),
    # What pydantic shows of a long value: its start and its end, "..." between.
    Planted("jwt_cut_by_pydantic", f"input_value='{JWT[:24]}...{JWT[-24:]}'", (JWT[-24:],)),
    # URL-encoded: a form body, a query string inside a query string, a URL passed as a parameter.
    Planted(
        "url_encoded_pair", "the form body password%3DPq9xW7zKv%26user%3Dada was refused", ("Pq9xW7zKv",)
    ),
    Planted(
        "url_encoded_lowercase_hex",
        "redirect to /cb?next=%2fhome%3fpassword%3dLw7Hex9qZ failed",
        ("Lw7Hex9qZ",),
    ),
    Planted(
        "url_encoded_token",
        "GET /cb?state=1&redirect=https%3A%2F%2Fapp.example.com%2Fdone%3Ftoken%3DTk9Qz81xW%26page%3D2",
        ("Tk9Qz81xW",),
    ),
    Planted("url_encoded_api_key", "signed api_key%3DAk_91QxyzP%26v%3D2 expired", ("Ak_91QxyzP",)),
    Planted("url_encoded_plus_spaces", "q=a+password+%3D+Zz81abQw+and+more", ("Zz81abQw",)),
    Planted("url_encoded_spaces", "the body was secret%20%3D%20Sp4cedPw%21 and no more", ("Sp4cedPw",)),
    Planted(
        "url_encoded_credentials",
        "GET https%3A%2F%2Fsvc%3AEnc0ded-Pw%40db.internal%2Fapp failed",
        ("Enc0ded-Pw",),
    ),
    Planted(
        "url_encoded_credentials_lowercase",
        "dsn postgresql%3a%2f%2fsvc%3alowHexPw9%40db%2fapp was refused",
        ("lowHexPw9",),
    ),
    Planted("url_encoded_empty_user", "redis%3A%2F%2F%3AR3disEncPw%40cache%3A6379 refused", ("R3disEncPw",)),
    Planted(
        "url_encoded_json",
        "payload=%7B%22client_secret%22%3A%22Cs-Enc0dedQ7%22%2C%22n%22%3A1%7D was rejected",
        ("Cs-Enc0dedQ7",),
    ),
    Planted(
        "url_encoded_query_key",
        "next=%2Fgeocode%3Fkey%3DAbCdEnc0123%26address%3DLisbon answered 403",
        ("AbCdEnc0123",),
    ),
    Planted(
        "url_encoded_twice",
        "next%3Dhttps%253A%252F%252Fx.example.com%252Fcb%253Fpassword%253DDbl3ncPwQ was refused",
        ("Dbl3ncPwQ",),
    ),
    Planted(
        "url_encoded_bearer", "sent Authorization%3A%20Bearer%20EncOpaqTok93x and got 401", ("EncOpaqTok93x",)
    ),
    Planted("url_encoded_key_shape", f"payload%3D{GITHUB_TOKEN}%26n%3D1 refused", (GITHUB_TOKEN,)),
    Planted(
        "url_password_percent_escapes",
        "cannot reach https://app:P%40ss%3Aw0rdQ@db.internal/x",
        ("P%40ss%3Aw0rdQ",),
    ),
)

# The server machine's paths: never shown to the client (the log keeps them, for the operator).
PATHS: tuple[Planted, ...] = (
    Planted(
        "posix_path", "config not found at /srv/app/conf/settings.toml", ("/srv/app/conf/settings.toml",)
    ),
    Planted(
        "windows_path", r"cannot open C:\Users\ada\AppData\key.json", (r"C:\Users\ada\AppData\key.json",)
    ),
    Planted("home_path", "reading ~/.config/acme/token.txt failed", ("~/.config/acme/token.txt",)),
)

NEGATIVES: tuple[str, ...] = (
    "the keyboard layout is us-intl",
    "monkey=42 author=Ada bypass=on compass=north passenger=3",
    "error_code=E42 and key count 7",
    "see https://docs.example.com/guide/install#step-2",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "order 123e4567-e89b-12d3-a456-426614174000 is late",
    "the token expired at 10:30, ask for a new one",
    # URL-encoded text with no secret in it
    "searched https://example.com/find?q=coffee%20beans&page=2 at 95% load",
    "progress%3D50%25 author%3DAda%26compass%3Dnorth key%3D7",
    "see https%3A%2F%2Fdocs.example.com%2Fguide%2Finstall or mailto%3Aada%40example.com",
    "opened https%3A%2F%2Fada%40example.com%2Fprofile as a+plain+form+value",
)

# What the leak tools (secret_tools/leaks.py) put beside the text in an MCPError they raise on
# purpose: its code, and a secret-named field of its data that must not come out either.
PROTOCOL_ERROR_CODE = -32001
DATA_PASSWORD = "Pw-In-Data-9"


def in_exception_group(text: str) -> ExceptionGroup[Exception]:
    """The text in an exception group, everywhere its traceback shows it: a member's message and
    its note, a nested group's member, a `__cause__` and a `__context__`."""
    noted = ValueError("the first lookup failed")
    noted.add_note(text)
    try:
        try:
            raise LookupError(text)
        except LookupError:  # the __context__ of what follows
            raise RuntimeError("the retry failed too") from ConnectionError(text)
    except RuntimeError as chained:
        inner = ExceptionGroup("the fallbacks failed", [ValueError(text), chained])
    return ExceptionGroup("every lookup failed", [noted, inner])


_HEX = re.compile(r"[0-9a-f.:-]+")


def fragments(secret: str) -> list[str]:
    """Pieces of a secret that must not appear either: a leak of half a value is a leak.

    Pieces of hex digits and punctuation alone are left out: a correlation id or a timestamp
    holds them by chance.
    """
    width = len(secret) if len(secret) <= 4 else max(4, min(8, len(secret) // 2))
    pieces = {secret[i : i + width] for i in range(len(secret) - width + 1)}
    return sorted(piece for piece in pieces if piece == secret or not _HEX.fullmatch(piece))


def leaks(form: Planted, seen: str) -> list[str]:
    """The fragments of the form's secrets that appear in `seen`."""
    return [piece for secret in form.secrets for piece in fragments(secret) if piece in seen]
