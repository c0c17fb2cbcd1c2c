"""2026-07-28 caching hints: `server/discover` and every list say how long they stay fresh, and for whom."""

from __future__ import annotations

from typing import Any

import pytest

from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from sample_server.project import ENV_PREFIX
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv

LISTS = ("tools/list", "resources/list", "resources/templates/list", "prompts/list")


def hints_of(env: dict[str, str]) -> dict[str, tuple[Any, Any]]:
    """(ttlMs, cacheScope) of server/discover and of each list, from one real stdio server."""
    with StdioSession(server_argv("serve"), env=env) as session:
        answers = {"server/discover": open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)}
        for method in LISTS:
            answers[method] = session.request(method, with_envelope(MODERN))
    results = {method: answer["result"] for method, answer in answers.items()}
    return {method: (result.get("ttlMs"), result.get("cacheScope")) for method, result in results.items()}


def test_discovery_and_lists_are_fresh_for_a_minute_for_this_caller_by_default(
    subprocess_env: dict[str, str],
) -> None:
    hints = hints_of(subprocess_env)
    assert hints == dict.fromkeys(["server/discover", *LISTS], (60000, "private"))


@pytest.mark.parametrize("scope", ["public", "PUBLIC"])
def test_list_ttl_and_cache_scope_come_from_the_settings(subprocess_env: dict[str, str], scope: str) -> None:
    env = {**subprocess_env, f"{ENV_PREFIX}LIST_TTL_MS": "5000", f"{ENV_PREFIX}CACHE_SCOPE": scope}
    hints = hints_of(env)
    assert hints == dict.fromkeys(["server/discover", *LISTS], (5000, "public"))
