"""`AUTH=oauth`: JWT access tokens from a real key pair, checked against a JWKS served on loopback."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from http_support import client_with_token, get, json_rpc_answer, modern_call, post, shared_server_env
from oauth_issuer import Issuer, hanging_issuer, serve_issuer
from resilient_mcp.http.oauth_keys import MIN_INTERVAL_S, WAIT_S
from support import ANSWER_TIMEOUT_S, HTTP_TOOLS, error_of, free_port, http_server, server_env

SCOPE = "mcp:tools"

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Issuer, subprocess.Popen[bytes]]]:
    """One server for the module (start-up costs seconds): its URL, the issuer, its process."""
    data_dir = tmp_path_factory.mktemp("oauth-data")
    port = free_port()
    with serve_issuer() as issuer:
        settings = shared_server_env(
            request,
            data_dir,
            auth="oauth",
            oauth_issuer=issuer.url,  # the keys are found through the issuer's metadata
            oauth_audience=f"http://127.0.0.1:{port}/mcp",
            oauth_required_scopes=SCOPE,
        )
        with http_server(settings, extra_tools=HTTP_TOOLS, port=port) as (url, process):
            yield url, issuer, process


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_valid_token_is_served(
    served: tuple[str, Issuer, subprocess.Popen[bytes]], mode: str
) -> None:
    url, issuer, _ = served
    async with client_with_token(url, issuer.token(url, scopes=SCOPE), mode) as client:
        answer = await client.call_tool("wait", {"seconds": 0})
    assert not answer.is_error


@pytest.mark.parametrize(
    "problem",
    [
        "expired",
        "other_audience",
        "other_issuer",
        "other_key",
        "not_a_jwt",
        "exp_as_string",
        "nbf_as_string",
        "iat_as_string",
        "no_exp",
        "no_caller",
    ],
)
def test_a_token_that_fails_a_check_gets_401(
    served: tuple[str, Issuer, subprocess.Popen[bytes]], problem: str
) -> None:
    url, issuer, _ = served
    now = int(time.time())
    tokens = {
        "expired": issuer.token(url, scopes=SCOPE, lifetime_s=-120),
        "other_audience": issuer.token("https://another-server.example/mcp", scopes=SCOPE),
        "other_issuer": issuer.token(url, scopes=SCOPE, issuer="https://impostor.example"),
        "other_key": issuer.token(url, scopes=SCOPE, key=rsa.generate_private_key(65537, 2048)),
        "not_a_jwt": "x" * 40,
        # RFC 7519 NumericDate is a JSON number, never a string of digits.
        "exp_as_string": issuer.token(url, scopes=SCOPE, claims={"exp": str(now + 600)}),
        "nbf_as_string": issuer.token(url, scopes=SCOPE, claims={"nbf": str(now)}),
        "iat_as_string": issuer.token(url, scopes=SCOPE, claims={"iat": str(now)}),
        "no_exp": issuer.token(url, scopes=SCOPE, without=("exp",)),
        # Callers are told apart by sub or client_id: a token with neither would share one identity.
        "no_caller": issuer.token(url, scopes=SCOPE, without=("sub", "client_id")),
    }
    status, headers, _ = post(url, **bearer(tokens[problem]))
    assert status == 401
    assert headers["www-authenticate"].startswith("Bearer ")
    assert "resource_metadata=" in headers["www-authenticate"]


def test_a_token_without_the_required_scope_gets_403_insufficient_scope(
    served: tuple[str, Issuer, subprocess.Popen[bytes]],
) -> None:
    url, issuer, _ = served
    status, headers, body = post(url, **bearer(issuer.token(url, scopes="profile")))
    assert status == 403
    assert json.loads(body)["error"] == "insufficient_scope"
    assert 'error="insufficient_scope"' in headers["www-authenticate"]


def challenge_field(challenge: str, name: str) -> str:
    """One quoted parameter of a `WWW-Authenticate: Bearer ...` challenge."""
    return challenge.split(f'{name}="')[1].split('"')[0]


def calls_answered(url: str, token: str) -> int:
    """health_check's count of calls answered before it (a 2026-07-28 call)."""
    status, _, body = modern_call(url, token, "health_check", 99)
    assert status == 200, body
    calls: int = json_rpc_answer(body)["result"]["structuredContent"]["calls"]
    return calls


def test_a_2026_call_to_a_tool_whose_scope_the_token_lacks_gets_403_naming_every_scope_it_needs(
    served: tuple[str, Issuer, subprocess.Popen[bytes]],
) -> None:
    """Scope step-up: refused before the call begins, with the scopes a new token must carry."""
    url, issuer, _ = served
    token = issuer.token(url, scopes=SCOPE)
    before = calls_answered(url, token)
    status, headers, body = modern_call(url, token, "report", 1)
    assert status == 403, body
    challenge = headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"')
    assert challenge_field(challenge, "scope") == f"{SCOPE} reports:read"  # required ones and the tool's
    metadata_url = challenge_field(post(url)[1]["www-authenticate"], "resource_metadata")  # the 401's
    assert challenge_field(challenge, "resource_metadata") == metadata_url
    assert json.loads(body)["error"] == "insufficient_scope"  # the SDK's body for its own 403
    assert calls_answered(url, token) == before + 1  # only the health_check above: report never began

    status, _, body = modern_call(url, issuer.token(url, scopes=f"{SCOPE} reports:read"), "report", 2)
    assert status == 200, body
    assert not json_rpc_answer(body)["result"]["isError"]


@pytest.mark.anyio
async def test_a_2025_call_to_a_tool_whose_scope_the_token_lacks_gives_forbidden_naming_it(
    served: tuple[str, Issuer, subprocess.Popen[bytes]],
) -> None:
    """The 2025-11-25 era names no tool in headers: the core refuses it in the tool result."""
    url, issuer, _ = served
    async with client_with_token(url, issuer.token(url, scopes=SCOPE), mode="legacy") as client:
        refused = await client.call_tool("report", {})
    stepped_up = issuer.token(url, scopes=f"{SCOPE} reports:read")
    async with client_with_token(url, stepped_up, mode="legacy") as client:
        allowed = await client.call_tool("report", {})
    text, error = error_of(refused)
    assert error["category"] == "forbidden"
    assert error["retryable"] is False
    assert "reports:read" in text
    assert not allowed.is_error


def test_protected_resource_metadata_names_the_issuer(
    served: tuple[str, Issuer, subprocess.Popen[bytes]],
) -> None:
    url, issuer, _ = served
    _, headers, _ = post(url)
    metadata_url = headers["www-authenticate"].split('resource_metadata="')[1].split('"')[0]
    status, metadata = get(url, "/" + metadata_url.split("/", 3)[3])
    assert status == 200
    assert metadata["resource"] == url
    assert metadata["authorization_servers"] == [issuer.url]
    assert metadata["scopes_supported"] == [SCOPE]


@contextmanager
def own_server(data_dir: Path, log: IO[bytes] | None = None) -> Iterator[tuple[str, Issuer]]:
    """A server and an issuer of its own, for a test that takes the issuer's keys away."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with serve_issuer() as issuer:
        settings = server_env(
            data_dir=str(data_dir), auth="oauth", oauth_issuer=issuer.url, oauth_audience=url
        )
        with http_server(settings, port=port, stderr=log or subprocess.PIPE):
            yield url, issuer


# An outage rarely begins right after a fetch. JWKS clients commonly refuse to refetch for an
# unknown kid within some seconds of a fetch (PyJWKClient: 30 s), which would hide what happens
# after: the outage begins once the library's own interval has passed, and the test checks that
# the unknown kid did send a fetch into it.
OUTAGE_AFTER_THE_LAST_FETCH_S = MIN_INTERVAL_S + 0.5


def wait_for_jwks_requests(issuer: Issuer, more_than: int) -> None:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while issuer.jwks_requests <= more_than:
        assert time.monotonic() < deadline, "the unknown kid sent no fetch of the key set"
        time.sleep(0.05)


def test_an_outage_of_the_key_set_never_refuses_or_delays_a_token_whose_key_is_known(
    data_dir: Path,
) -> None:
    """An attacker's unknown kids while the JWKS hangs, then answers 503: valid tokens are served."""
    with own_server(data_dir) as (url, issuer):
        valid = bearer(issuer.token(url))
        assert post(url, **valid)[0] == 200  # the key set answered once
        time.sleep(OUTAGE_AFTER_THE_LAST_FETCH_S)

        issuer.jwks_answer = "hang"  # accepts the fetch and never answers
        fetched = issuer.jwks_requests
        started = time.monotonic()
        assert post(url, **bearer(issuer.token(url, kid="not-published")))[0] == 401
        assert time.monotonic() - started < WAIT_S + 5  # not the fetch's own 10 s timeout
        wait_for_jwks_requests(issuer, more_than=fetched)  # the outage was met, not skipped
        for _ in range(5):
            assert post(url, **valid)[0] == 200  # while that fetch hangs

        issuer.jwks_answer = "503"
        for attempt in range(20):
            assert post(url, **bearer(issuer.token(url, kid=f"attacker-{attempt}")))[0] == 401
            assert post(url, **valid)[0] == 200, f"refused after {attempt + 1} unknown kids"
        assert issuer.jwks_requests <= 6  # one refresh at a time, backing off: not one per unknown kid


def test_a_key_published_after_start_is_accepted_once_the_minimum_interval_passed(data_dir: Path) -> None:
    with own_server(data_dir) as (url, issuer):
        assert post(url, **bearer(issuer.token(url)))[0] == 200  # the key set was fetched just now
        issuer.publish_new_key("rotated-key")
        time.sleep(MIN_INTERVAL_S + 0.5)  # no refresh is due sooner: waiting longer changes nothing
        assert post(url, **bearer(issuer.token(url, kid="rotated-key")))[0] == 200


def test_an_issuer_that_never_answers_costs_each_request_a_bounded_wait(data_dir: Path) -> None:
    """No key was ever fetched: every request is refused after at most WAIT_S, not a fetch's timeout."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with hanging_issuer() as issuer:
        settings = server_env(
            data_dir=str(data_dir), auth="oauth", oauth_issuer=issuer.url, oauth_audience=url
        )
        with http_server(settings, port=port):
            token = bearer(issuer.token(url))
            for _ in range(4):
                started = time.monotonic()
                assert post(url, **token)[0] == 401
                assert time.monotonic() - started < WAIT_S + 5  # a fetch waits 10 s or more


def test_a_token_that_names_no_caller_gets_401_and_a_log_line_saying_why(
    data_dir: Path, tmp_path: Path
) -> None:
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log, own_server(data_dir, log) as (url, issuer):
        nobody = issuer.token(url, without=("sub", "client_id"))
        assert post(url, **bearer(nobody))[0] == 401
        assert post(url, **bearer(issuer.token(url, without=("sub",))))[0] == 200  # client_id suffices
    log_text = log_path.read_text()
    lines = [json.loads(line) for line in log_text.splitlines() if line.startswith("{")]
    refusals = [line for line in lines if line.get("event") == "token_refused"]
    assert [line["reason"] for line in refusals] == ["NoCallerError"]
    assert "no sub, client_id or azp" in refusals[0]["detail"]
    assert nobody not in log_text


@pytest.mark.anyio
async def test_tokens_never_reach_the_log_but_subjects_do(
    served: tuple[str, Issuer, subprocess.Popen[bytes]],
) -> None:
    """Last in this module: it stops the module's server to read its log."""
    url, issuer, process = served
    accepted = issuer.token(url, scopes=SCOPE, subject="ana")
    async with client_with_token(url, accepted) as client:
        await client.call_tool("wait", {"seconds": 0})
    refused = issuer.token("https://another-server.example/mcp", scopes=SCOPE)
    assert post(url, **bearer(refused))[0] == 401
    process.terminate()
    _, stderr = process.communicate(timeout=60)
    log = stderr.decode()
    assert accepted not in log
    assert refused not in log
    subjects = [json.loads(line).get("subject") for line in log.splitlines() if '"tool_call"' in line]
    assert subjects[-1] == "ana"
