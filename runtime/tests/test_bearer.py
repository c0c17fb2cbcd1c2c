"""`AUTH=bearer`: only a configured token, whole and exact, names a subject (in-process, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.http.bearer import StaticTokenVerifier, read_tokens_file

pytestmark = pytest.mark.anyio

TOKEN = "t0k3n-" + "a1" * 20
OTHER_TOKEN = "t0k3n-" + "b2" * 20


async def test_the_configured_token_names_its_subject() -> None:
    verifier = StaticTokenVerifier({"bearer": TOKEN, "ci": OTHER_TOKEN})

    accepted = await verifier.verify_token(TOKEN)
    other = await verifier.verify_token(OTHER_TOKEN)

    assert accepted is not None
    assert (accepted.subject, accepted.client_id, accepted.scopes) == ("bearer", "bearer", [])
    assert other is not None
    assert other.subject == "ci"


@pytest.mark.parametrize(
    "offered",
    [
        TOKEN[:-1],  # any prefix: a guess that grows one character at a time
        TOKEN[:8],
        TOKEN[:1],
        "",
        TOKEN + "x",  # the token with more after it
        TOKEN + TOKEN,
        TOKEN.upper(),  # another case
        TOKEN[1:],
        f" {TOKEN}",
    ],
)
async def test_anything_but_the_whole_exact_token_is_refused(offered: str) -> None:
    verifier = StaticTokenVerifier({"bearer": TOKEN})

    assert await verifier.verify_token(offered) is None


def test_a_tokens_file_line_with_a_short_token_is_refused_without_showing_it(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# who may call\nci {TOKEN}\n\nops sh0rt-but-real-token\n", encoding="utf-8")

    with pytest.raises(FatalError) as refused:
        read_tokens_file(tokens)

    assert "line 4" in refused.value.problem
    assert "sh0rt-but-real-token" not in str(refused.value)


def test_a_tokens_file_maps_each_subject_to_its_token(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ci {TOKEN}\n  # a comment\nops {OTHER_TOKEN}\n", encoding="utf-8")

    assert read_tokens_file(tokens) == {"ci": TOKEN, "ops": OTHER_TOKEN}
