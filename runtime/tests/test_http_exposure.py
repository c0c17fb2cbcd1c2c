"""Who may reach the HTTP server: Host/Origin checks on every bind, refusals at start-up, bearer tokens."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from http_support import client_with_token, post
from oauth_issuer import serve_issuer
from sample_server.project import ENV_PREFIX
from support import HTTP_TOOLS, free_port, http_server, server_argv, server_env

TOKEN = "t0k3n-" + "a1" * 20
OTHER_TOKEN = "t0k3n-" + "b2" * 20

pytestmark = pytest.mark.network


def env(data_dir: Path, **settings: str) -> dict[str, str]:
    return server_env(data_dir=str(data_dir), **settings)


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(
    not has_ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to bind"
)


def test_loopback_bind_refuses_a_foreign_host_and_origin(data_dir: Path) -> None:
    with http_server(env(data_dir)) as (url, _):
        port = url.split(":")[2].split("/")[0]
        assert post(url, Host="attacker.example")[0] == 421
        assert post(url, Origin="http://attacker.example")[0] == 403
        assert post(url, Host=f"localhost:{port}", Origin=f"http://localhost:{port}")[0] == 200


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Host", "localhost:{port}@attacker.example"),
        ("Host", "localhost:{port}.attacker.example"),
        ("Origin", "http://localhost:{port}.attacker.example"),
        ("Origin", "http://localhost:{port}@attacker.example"),
    ],
)
def test_loopback_bind_refuses_a_host_or_origin_that_only_starts_like_an_allowed_one(
    data_dir: Path, header: str, value: str
) -> None:
    with http_server(env(data_dir)) as (url, _):
        port = url.split(":")[2].split("/")[0]
        assert post(url, **{header: value.format(port=port)})[0] == {"Host": 421, "Origin": 403}[header]
        assert post(url, Host=f"localhost:{port}", Origin=f"http://127.0.0.1:{port}")[0] == 200


def test_all_interfaces_bind_checks_hosts_and_origins_against_the_settings(data_dir: Path) -> None:
    settings = env(
        data_dir,
        allowed_hosts="mcp.example.test",
        allowed_origins="https://app.example.test",
        allow_unauthenticated="true",
    )
    with http_server(settings, host="0.0.0.0") as (url, process):
        port = url.split(":")[2].split("/")[0]
        assert post(url, Host="mcp.example.test")[0] == 200
        assert post(url, Host=f"mcp.example.test:{port}", Origin="https://app.example.test")[0] == 200
        assert post(url)[0] == 421  # 127.0.0.1 is not a name clients were told to use
        assert post(url, Host="attacker.example")[0] == 421
        assert post(url, Host=f"mcp.example.test:{port}@attacker.example")[0] == 421
        assert post(url, Host="mcp.example.test", Origin="https://attacker.example")[0] == 403
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert any(json.loads(line).get("event") == "unauthenticated" for line in stderr.decode().splitlines())


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({}, "ALLOWED_HOSTS"),
        ({"allowed_hosts": "mcp.example.test"}, "ALLOW_UNAUTHENTICATED"),
        ({"allowed_hosts": "mcp.example.test", "auth": "bearer"}, "BEARER_TOKEN"),
        (
            {"allowed_hosts": "mcp.example.test", "auth": "bearer", "bearer_token": "too-short"},
            "BEARER_TOKEN",
        ),
        ({"allowed_hosts": "mcp.example.test", "auth": "oauth"}, "OAUTH_ISSUER"),
        ({"auth": "kerberos"}, "AUTH"),
    ],
)
def test_an_unsafe_network_configuration_stops_with_one_fatal_line(
    data_dir: Path, settings: dict[str, str], named: str
) -> None:
    argv = server_argv("serve", "--transport", "http", "--host", "0.0.0.0", "--port", str(free_port()))
    finished = subprocess.run(argv, env=env(data_dir, **settings), capture_output=True, timeout=60)
    lines = finished.stderr.decode().splitlines()
    assert finished.returncode == 78  # EX_CONFIG, written out: a changed constant fails here
    assert len(lines) == 1
    assert lines[0].startswith("FATAL: ")
    assert f"{ENV_PREFIX}{named}" in lines[0]
    assert "too-short" not in lines[0]  # a token is named, never shown


@pytest.mark.anyio
async def test_bearer_refuses_a_missing_or_wrong_token_and_serves_the_right_one(data_dir: Path) -> None:
    with http_server(env(data_dir, auth="bearer", bearer_token=TOKEN)) as (url, process):
        status, headers, _ = post(url)
        assert status == 401
        assert headers["www-authenticate"].startswith("Bearer ")
        assert post(url, Authorization=f"Bearer {OTHER_TOKEN}")[0] == 401
        assert post(url, Authorization=f"Basic {TOKEN}")[0] == 401
        async with client_with_token(url, TOKEN) as client:
            health = await client.call_tool("health_check", {})
        assert not health.is_error
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    log = stderr.decode()
    assert TOKEN not in log
    assert OTHER_TOKEN not in log
    calls = [json.loads(line) for line in log.splitlines() if '"tool_call"' in line]
    assert [call["subject"] for call in calls] == ["bearer"]


@pytest.mark.anyio
async def test_bearer_tokens_file_names_each_caller_in_the_log(data_dir: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# subject token\nalice {TOKEN}\n\nbob {OTHER_TOKEN}\n")
    with http_server(
        env(data_dir, auth="bearer", bearer_tokens_file=str(tokens)), extra_tools=HTTP_TOOLS
    ) as (
        url,
        process,
    ):
        for token, mode in ((TOKEN, "legacy"), (OTHER_TOKEN, "auto")):  # one caller per era
            async with client_with_token(url, token, mode) as client:
                answer = await client.call_tool("wait", {"seconds": 0})
            assert not answer.is_error
        assert post(url, Authorization="Bearer " + "c3" * 20)[0] == 401
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    calls = [json.loads(line) for line in stderr.decode().splitlines() if '"tool_call"' in line]
    assert [call["subject"] for call in calls] == ["alice", "bob"]
    assert TOKEN not in stderr.decode()


@needs_ipv6
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("host", "auth"),
    [("::1", "none"), ("[::1]", "none"), ("::1", "bearer"), ("[::1]", "bearer"), ("[::1]", "oauth")],
)
async def test_an_ipv6_loopback_bind_serves_a_tool_call_in_every_auth_mode(
    data_dir: Path, host: str, auth: str
) -> None:
    port = free_port()
    url = f"http://[::1]:{port}/mcp"
    with contextlib.ExitStack() as stack:
        settings = {"auth": auth}
        token = ""
        if auth == "bearer":
            settings["bearer_token"] = token = TOKEN
        if auth == "oauth":
            issuer = stack.enter_context(serve_issuer())
            settings.update(oauth_issuer=issuer.url, oauth_audience=url)
            token = issuer.token(url)
        served, _ = stack.enter_context(http_server(env(data_dir, **settings), host=host, port=port))
        assert served == url
        credentials = {"Authorization": f"Bearer {token}"} if token else {}
        if token:
            assert post(url)[0] == 401
        assert post(url, Host=f"[::1]:{port}", Origin=f"http://[::1]:{port}", **credentials)[0] == 200
        assert post(url, Host="attacker.example", **credentials)[0] == 421
        # The SDK's client sends `Host: [::1]:<port>`, as any client of this URL does.
        async with client_with_token(url, token) if token else Client(url) as client:
            answer = await client.call_tool("health_check", {})
    assert not answer.is_error


@needs_ipv6
@pytest.mark.anyio
async def test_an_ipv6_all_interfaces_bind_with_bearer_checks_the_allowed_hosts(data_dir: Path) -> None:
    # `::1` in ALLOWED_HOSTS is what a client of http://[::1]:<port> sends in brackets.
    settings = env(data_dir, auth="bearer", bearer_token=TOKEN, allowed_hosts="mcp.example.test,::1")
    credentials = {"Authorization": f"Bearer {TOKEN}"}
    with http_server(settings, host="::") as (url, _):
        assert post(url, Host="mcp.example.test", **credentials)[0] == 200
        assert post(url, Host="attacker.example", **credentials)[0] == 421
        assert post(url, Host="mcp.example.test")[0] == 401
        async with client_with_token(url, TOKEN) as client:
            answer = await client.call_tool("health_check", {})
    assert not answer.is_error


@pytest.mark.parametrize(
    "problem", ["port_in_use", "address_not_here", "ipv6_address_not_here", "not_a_port"]
)
def test_an_unusable_bind_stops_with_one_fatal_line(data_dir: Path, problem: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # 192.0.2.0/24 and 2001:db8::/32 are for documentation: no machine has them.
        host, port, named = {
            "port_in_use": ("127.0.0.1", taken.getsockname()[1], "in use"),
            "address_not_here": ("192.0.2.1", free_port(), "192.0.2.1"),
            "ipv6_address_not_here": ("[2001:db8::1]", free_port(), "[2001:db8::1]"),
            "not_a_port": ("127.0.0.1", 70000, "--port 70000"),
        }[problem]
        argv = server_argv("serve", "--transport", "http", "--host", host, "--port", str(port))
        settings = env(data_dir, allowed_hosts="mcp.example.test", allow_unauthenticated="true")
        finished = subprocess.run(argv, env=settings, capture_output=True, timeout=60)
    lines = finished.stderr.decode().splitlines()
    assert finished.returncode == 78, lines  # EX_CONFIG
    assert len(lines) == 1, lines
    assert lines[0].startswith("FATAL: ")
    assert named in lines[0]
