"""The server says who it is: description, instructions, website and icon, in both eras.

The instructions and the icon are the owner's files in the package (instructions.md,
icon.png), read at start-up; one too large, or an icon that is not a PNG, stops the server
with one FATAL line naming the file.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from mcp import Client, StdioServerParameters

from resilient_mcp.server.identity import MAX_INSTRUCTIONS_BYTES
from sample_server.project import DESCRIPTION, PACKAGE, WEBSITE_URL
from support import ANSWER_TIMEOUT_S, SAMPLE_PACKAGE, server_argv


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28 server/discover, 2025-11-25 initialize
async def test_a_client_sees_the_description_instructions_website_and_icon(
    mode: Literal["auto", "legacy"], subprocess_env: dict[str, str]
) -> None:
    command, *args = server_argv()
    async with Client(
        StdioServerParameters(command=command, args=args, env=subprocess_env), mode=mode
    ) as client:
        info, instructions = client.server_info, client.instructions
    assert info is not None
    assert (info.description, info.website_url) == (DESCRIPTION, WEBSITE_URL)
    assert instructions == (SAMPLE_PACKAGE / "instructions.md").read_text(encoding="utf-8").strip()
    [icon] = info.icons or []
    assert (icon.mime_type, icon.sizes) == ("image/png", ["64x64"])
    assert (
        icon.src
        == "data:image/png;base64," + base64.b64encode((SAMPLE_PACKAGE / "icon.png").read_bytes()).decode()
    )


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("instructions.md", b"x" * (MAX_INSTRUCTIONS_BYTES + 1), f"over the {MAX_INSTRUCTIONS_BYTES} bytes"),
        ("icon.png", b"<svg xmlns='http://www.w3.org/2000/svg'/>", "is not a PNG image"),
    ],
    ids=["instructions-too-large", "icon-not-png"],
)
def test_an_identity_file_out_of_bounds_stops_the_server_naming_it(
    name: str, content: bytes, fragment: str, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    # The project's package, copied where PYTHONPATH finds it first, with the owner's bad file.
    package = tmp_path / "code" / PACKAGE
    shutil.copytree(SAMPLE_PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / name).write_bytes(content)
    env = {**subprocess_env, "PYTHONPATH": str(package.parent)}
    result = subprocess.run(
        [sys.executable, "-m", PACKAGE, "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=4 * ANSWER_TIMEOUT_S,
    )
    assert result.returncode == 78, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("FATAL: ")
    assert str(package / name) in line
    assert fragment in line
