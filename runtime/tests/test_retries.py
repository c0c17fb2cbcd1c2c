"""Transient failures of tools that are safe to repeat are retried, within bounds."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from mcp import Client

from resilient_mcp.server.resilient_server import ResilientServer
from sample_server.project import ENV_PREFIX
from sample_tools.failing import ATTEMPT_TIMES, CALLS


def fresh_key() -> str:
    return uuid.uuid4().hex


@pytest.mark.anyio
async def test_safe_tool_failing_twice_then_succeeding_returns_success(server: ResilientServer) -> None:
    key = fresh_key()
    async with Client(server) as client:
        result = await client.call_tool("flaky", {"key": key, "failures": 2})
    assert not result.is_error
    assert result.structured_content == {"result": 3}
    assert CALLS[key] == 3


@pytest.mark.anyio
async def test_tool_not_safe_to_repeat_is_not_retried(server: ResilientServer) -> None:
    key = fresh_key()
    async with Client(server) as client:
        result = await client.call_tool("flaky_unsafe", {"key": key, "failures": 1})
    assert result.is_error
    assert result.meta is not None
    assert result.meta["error"]["category"] == "transient"
    assert result.meta["error"]["retryable"] is True
    assert CALLS[key] == 1


@pytest.mark.anyio
async def test_retries_stop_at_the_attempt_bound(
    make_server: Callable[..., ResilientServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"{ENV_PREFIX}RETRY_MAX_ATTEMPTS", "3")
    key = fresh_key()
    async with Client(make_server()) as client:
        result = await client.call_tool("flaky", {"key": key, "failures": 10})
    assert result.is_error
    assert result.meta is not None
    assert result.meta["error"]["category"] == "transient"
    assert CALLS[key] == 3


@pytest.mark.anyio
async def test_retries_stop_at_the_time_bound(
    make_server: Callable[..., ResilientServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"{ENV_PREFIX}RETRY_MAX_ATTEMPTS", "20")
    monkeypatch.setenv(f"{ENV_PREFIX}RETRY_MAX_S", "0.05")
    key = fresh_key()
    async with Client(make_server()) as client:
        result = await client.call_tool("flaky", {"key": key, "failures": 100})
    assert result.is_error
    # The first wait (0.05-0.1 s) already passes the 0.05 s bound: the attempt limit never comes into play.
    assert CALLS[key] == 1


@pytest.mark.anyio
async def test_no_retry_comes_sooner_than_the_retry_after_hint(server: ResilientServer) -> None:
    key = fresh_key()
    async with Client(server) as client:
        result = await client.call_tool("throttled", {"key": key})
    assert not result.is_error
    first, second = ATTEMPT_TIMES[key]
    assert second - first >= 0.5, "the backoff (0.05-0.1 s here) must wait out the 0.5 s hint"
