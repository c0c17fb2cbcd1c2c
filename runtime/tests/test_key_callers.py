"""An idempotency key belongs to its caller, over HTTP with real servers and real tokens.

Two bearer subjects in both protocol eras, OAuth subjects, and two replicas sharing
PostgreSQL: another caller's key is a new call (the tool runs for this caller), each caller's
retry replays its own result, and no answer tells one caller what another did with a key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import CallToolResult, TextContent

from http_support import STATELESS, client_with_token, post
from oauth_issuer import serve_issuer
from sample_tools.effects import effects_count
from support import SAMPLE_TOOLS, free_port, http_server, postgres_project, server_env

pytestmark = [pytest.mark.network, pytest.mark.anyio]

ANA, BEN = "t0k3n-" + "a1" * 20, "t0k3n-" + "b2" * 20
LEGACY, MODERN = "legacy", "auto"  # the SDK client's modes: 2025-11-25 and 2026-07-28
CHARGE = {"account": "acme", "cents": 250}


def bearer_env(data_dir: Path, tmp_path: Path, **settings: str) -> dict[str, str]:
    """A server's settings with two bearer subjects, ana and ben (a tokens file)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ana {ANA}\nben {BEN}\n", encoding="utf-8")
    return server_env(data_dir=str(data_dir), auth="bearer", bearer_tokens_file=str(tokens), **settings)


async def call(
    url: str, token: str, tool: str, arguments: dict[str, Any], mode: str = MODERN
) -> CallToolResult:
    async with client_with_token(url, token, mode) as client:
        return await client.call_tool(tool, arguments)


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def replayed(result: CallToolResult) -> bool:
    assert not result.is_error, text(result)
    assert result.meta is not None
    flag: bool = result.meta["idempotency"]["replayed"]
    return flag


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_another_subjects_key_runs_for_this_subject_and_each_retry_replays_its_own(
    data_dir: Path, tmp_path: Path, mode: str
) -> None:
    arguments = {**CHARGE, "idempotency_key": "order-1:charge"}
    with http_server(bearer_env(data_dir, tmp_path), extra_tools=SAMPLE_TOOLS) as (url, _):
        ana = await call(url, ANA, "charge", arguments, mode)
        ben = await call(url, BEN, "charge", arguments, mode)
        ana_retry = await call(url, ANA, "charge", arguments, mode)
        ben_retry = await call(url, BEN, "charge", arguments, mode)

    assert (replayed(ana), replayed(ben)) == (False, False), "ben's call is his own: it runs"
    assert "effect #1" in text(ana)
    assert "effect #2" in text(ben)
    assert (replayed(ana_retry), text(ana_retry)) == (True, text(ana))
    assert (replayed(ben_retry), text(ben_retry)) == (True, text(ben))
    assert effects_count() == 2


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_a_key_another_subject_holds_is_neither_a_conflict_nor_a_hint(
    data_dir: Path, tmp_path: Path, mode: str
) -> None:
    # ben used one key with other arguments, and is still running another: ana learns neither.
    used = {"account": "acme", "cents": 999, "idempotency_key": "order-2:charge"}
    running = {"account": "acme", "cents": 1, "seconds": 1.5, "idempotency_key": "order-3:charge"}
    answers: dict[str, CallToolResult] = {}
    with http_server(bearer_env(data_dir, tmp_path), extra_tools=SAMPLE_TOOLS) as (url, _):
        await call(url, BEN, "charge", used, mode)

        async def ben_runs() -> None:
            answers["ben"] = await call(url, BEN, "charge_slowly", running, mode)

        async with anyio.create_task_group() as group:
            group.start_soon(ben_runs)
            with anyio.fail_after(60):
                while effects_count() < 2:  # ben's body has had its effect and is still busy  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            answers["ana_used"] = await call(url, ANA, "charge", {**used, "cents": 250}, mode)
            answers["ana_running"] = await call(url, ANA, "charge_slowly", {**running, "seconds": 0}, mode)

    for name, answer in answers.items():
        assert replayed(answer) is False, name
    assert effects_count() == 4


@postgres_project
async def test_two_replicas_keep_each_subjects_key_apart(data_dir: Path, tmp_path: Path) -> None:
    env = {**bearer_env(data_dir, tmp_path), **STATELESS}
    arguments = {**CHARGE, "idempotency_key": "order-4:charge"}
    with (
        http_server(env, extra_tools=SAMPLE_TOOLS) as (url_a, _),
        http_server(env, extra_tools=SAMPLE_TOOLS) as (url_b, _),
    ):
        ana = await call(url_a, ANA, "charge", arguments)
        ben = await call(url_b, BEN, "charge", arguments)
        ana_retry = await call(url_b, ANA, "charge", arguments)
        ben_retry = await call(url_a, BEN, "charge", arguments)

    assert (replayed(ana), replayed(ben)) == (False, False)
    assert (replayed(ana_retry), text(ana_retry)) == (True, text(ana))
    assert (replayed(ben_retry), text(ben_retry)) == (True, text(ben))
    assert effects_count() == 2


@contextmanager
def oauth_server(data_dir: Path) -> Iterator[tuple[str, Any]]:
    port = free_port()
    with serve_issuer() as issuer:
        settings = server_env(
            data_dir=str(data_dir),
            auth="oauth",
            oauth_issuer=issuer.url,
            oauth_audience=f"http://127.0.0.1:{port}/mcp",
        )
        with http_server(settings, extra_tools=SAMPLE_TOOLS, port=port) as (url, _):
            yield url, issuer


async def test_oauth_subjects_and_clients_each_have_their_own_keys(data_dir: Path) -> None:
    arguments = {**CHARGE, "idempotency_key": "order-5:charge"}
    with oauth_server(data_dir) as (url, issuer):
        ana, ben = issuer.token(url, subject="ana"), issuer.token(url, subject="ben")
        # A client's own token (no subject) and a user whose subject is that client's id.
        app = issuer.token(url, subject="", claims={"client_id": "app-1"})
        lookalike = issuer.token(url, subject="app-1")
        nobody = issuer.token(url, subject="", claims={"client_id": ""})
        answers = [await call(url, token, "charge", arguments) for token in (ana, ben, app, lookalike)]
        retries = [await call(url, token, "charge", arguments) for token in (ana, ben, app, lookalike)]
        refused = post(url, Authorization=f"Bearer {nobody}")[0]

    assert [replayed(answer) for answer in answers] == [False] * 4
    assert [replayed(retry) for retry in retries] == [True] * 4
    assert [text(retry) for retry in retries] == [text(answer) for answer in answers]
    assert effects_count() == 4
    assert refused == 401, "a token naming nobody would share one key space with every other such token"
