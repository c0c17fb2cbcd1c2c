"""The owner's skills/ folder served as the Skills extension (SEP-2640).

The stand-in project has one skill, `note-taking` (SKILL.md and references/STYLE.md), served
by one real stdio server for the module. A server whose skills/ holds no skill advertises
nothing; a malformed skill is a FatalError naming the file and the fix, and stops start-up
with one FATAL line (a copy of the stand-in project, put first on the path).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from base64 import b64decode
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client

import sample_server
from http_support import shared_server_env
from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.skills.catalog import MAX_FILE_BYTES, load_catalog
from resilient_mcp.skills.frontmatter import parse_frontmatter
from support import ANSWER_TIMEOUT_S, StdioSession, server_argv, server_env
from test_startup import assert_one_fatal_line

EXTENSION = "io.modelcontextprotocol/skills"
PACKAGE_DIR = Path(sample_server.__file__).parent
SKILL_DIR = PACKAGE_DIR / "skills" / "note-taking"
SKILL_URI = "skill://note-taking/SKILL.md"
INVALID_PARAMS = -32602

Ask = Callable[..., dict[str, Any]]


@pytest.fixture(scope="module")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Ask, dict[str, Any]]]:
    """One server for the module: a request function (2026-07-28 envelope) and its server/discover."""
    env = shared_server_env(request, tmp_path_factory.mktemp("skills"))
    with StdioSession(server_argv("serve"), env=env) as session:
        discovered = open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)

        def ask(method: str, **params: Any) -> dict[str, Any]:
            return session.request(method, with_envelope(MODERN, params))

        yield ask, discovered["result"]


def test_the_extension_is_advertised_and_each_skill_listed(served: tuple[Ask, dict[str, Any]]) -> None:
    ask, discovered = served
    assert discovered["capabilities"]["extensions"][EXTENSION] == {"directoryRead": True}
    assert "resources" in discovered["capabilities"]
    (entry,) = ask("skills/list")["result"]["skills"]
    assert entry["uri"] == SKILL_URI
    assert entry["frontmatter"]["name"] == "note-taking"
    assert [file["uri"] for file in entry["resources"]] == [
        SKILL_URI,
        "skill://note-taking/references/STYLE.md",
    ]
    listed = {resource["uri"]: resource for resource in ask("resources/list")["result"]["resources"]}
    manifest = listed[SKILL_URI]  # SKILL.md is listed, named and described by its frontmatter
    assert (manifest["name"], manifest["description"]) == ("note-taking", entry["frontmatter"]["description"])
    assert manifest["mimeType"] == "text/markdown"
    assert "skill://note-taking/references/STYLE.md" not in listed  # read on demand, not listed


def test_a_skill_is_got_by_its_uri_and_an_unknown_one_is_invalid(served: tuple[Ask, dict[str, Any]]) -> None:
    ask, _ = served
    (entry,) = ask("skills/list")["result"]["skills"]
    got = ask("skills/get", uri=SKILL_URI)["result"]
    assert got["skill"] == entry
    assert "nextCursor" not in got
    unknown = ask("skills/get", uri="skill://note-takin/SKILL.md")["error"]
    assert unknown["code"] == INVALID_PARAMS
    assert "did you mean 'skill://note-taking/SKILL.md'" in unknown["message"]


def test_every_listed_file_reads_back_with_its_digest_and_size(served: tuple[Ask, dict[str, Any]]) -> None:
    ask, _ = served
    (entry,) = ask("skills/list")["result"]["skills"]
    for listed in entry["resources"]:
        (content,) = ask("resources/read", uri=listed["uri"])["result"]["contents"]
        data = content["text"].encode() if "text" in content else b64decode(content["blob"])
        assert listed["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert listed["size"] == len(data)
        assert data == (SKILL_DIR / listed["uri"].removeprefix("skill://note-taking/")).read_bytes()


def test_a_directory_lists_its_direct_children(served: tuple[Ask, dict[str, Any]]) -> None:
    ask, _ = served
    children = ask("resources/directory/read", uri="skill://note-taking")["result"]["resources"]
    kinds = {child["uri"]: child["mimeType"] for child in children}
    assert kinds == {SKILL_URI: "text/markdown", "skill://note-taking/references": "inode/directory"}
    (style,) = ask("resources/directory/read", uri="skill://note-taking/references")["result"]["resources"]
    assert style["uri"] == "skill://note-taking/references/STYLE.md"
    assert ask("resources/directory/read", uri=SKILL_URI)["error"]["code"] == INVALID_PARAMS


@pytest.mark.parametrize(
    "uri",
    [
        "skill://note-taking/../../project.py",
        "skill://note-taking/references/../../../settings.py",
        "skill://note-taking/%2e%2e/%2e%2e/cli.py",
        "skill://note-taking/../README.md",
        f"skill://note-taking/{PACKAGE_DIR / 'project.py'}",
    ],
)
def test_a_path_out_of_a_skill_is_refused(served: tuple[Ask, dict[str, Any]], uri: str) -> None:
    ask, _ = served
    error = ask("resources/read", uri=uri)["error"]
    assert error["code"] == INVALID_PARAMS
    assert "PROJECT" not in str(error)  # nothing of the file outside is read out
    directory = ask("resources/directory/read", uri=uri.rsplit("/", 1)[0])
    assert "error" in directory or not directory["result"]["resources"]


# --- a project whose skills/ holds no skill, or a malformed one


def write_skills(folder: Path, files: dict[str, str | bytes]) -> Path:
    """skills/ holding `files` (path -> content; a content starting "->" makes a symlink)."""
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("->"):
            path.symlink_to(content.removeprefix("->"))
        else:
            path.write_bytes(content.encode() if isinstance(content, str) else content)
    return folder


@pytest.mark.anyio
async def test_a_server_with_no_skill_advertises_nothing(server: ResilientServer, tmp_path: Path) -> None:
    assert load_catalog(write_skills(tmp_path / "skills", {"README.md": "# Skills\n"})).skills == ()
    async with Client(server) as client:  # tests/sample_tools has no skills/ beside it
        assert EXTENSION not in (client.server_capabilities.extensions or {})
        listed = await client.list_resources()
    assert not [resource for resource in listed.resources if str(resource.uri).startswith("skill://")]


GOOD = "---\nname: {name}\ndescription: Does one thing well.\n---\n\nBody.\n"


@pytest.mark.parametrize(
    ("files", "fragments"),
    [
        ({"tidy/SKILL.md": "# Tidy\n\nNo frontmatter.\n"}, ["tidy/SKILL.md has no YAML frontmatter"]),
        ({"tidy/SKILL.md": "---\nname: tidy\n---\n"}, ["tidy/SKILL.md: frontmatter has no description"]),
        ({"tidy/SKILL.md": "---\nname: tidy\ndescription: [a\n---\n"}, ["frontmatter is not valid YAML"]),
        ({"Tidy/SKILL.md": GOOD.format(name="Tidy")}, ["Tidy is not a valid skill name"]),
        (
            {"tidy/SKILL.md": GOOD.format(name="tidy"), "tidy/big.txt": b"x" * (MAX_FILE_BYTES + 1)},
            ["tidy/big.txt is larger than 1024 KiB"],
        ),
        (
            {"tidy/SKILL.md": GOOD.format(name="tidy"), "tidy/secrets": "->/etc/hostname"},
            ["tidy/secrets is a symlink"],
        ),
        (
            {"tidy/SKILL.md": GOOD.format(name="tidy"), "tidy/inner/SKILL.md": GOOD.format(name="inner")},
            ["tidy/inner/SKILL.md is a SKILL.md inside skill 'tidy'"],
        ),
    ],
    ids=["no-frontmatter", "no-description", "bad-yaml", "bad-name", "file-too-large", "symlink", "nested"],
)
def test_a_malformed_skill_is_named_with_what_to_fix(
    tmp_path: Path, files: dict[str, str | bytes], fragments: list[str]
) -> None:
    with pytest.raises(FatalError) as raised:
        load_catalog(write_skills(tmp_path / "skills", files))
    assert raised.value.fix, "the line says what to do next"
    for fragment in fragments:
        assert fragment in str(raised.value)


@pytest.mark.parametrize(
    "text",
    [
        "name: tidy\ndescription: Tidies notes, lists and drafts. Use it when asked to clean up.",
        "name: tidy\n\ndescription: It's the one   \nlicense: Apache-2.0",
        "name: tidy\ndescription: first\ndescription: last",
    ],
)
def test_plain_frontmatter_lines_read_as_yaml_reads_them(text: str) -> None:
    assert parse_frontmatter(text) == yaml.safe_load(text)


def test_frontmatter_values_are_what_a_yaml_1_2_reader_gets(tmp_path: Path) -> None:
    manifest = GOOD.format(name="tidy").replace(
        "---\n\n", "metadata:\n  reviewed: 2026-01-31\n  public: yes\n  strict: true\n  count: 3\n---\n\n"
    )
    (skill,) = load_catalog(write_skills(tmp_path / "skills", {"tidy/SKILL.md": manifest})).skills
    metadata = {"reviewed": "2026-01-31", "public": "yes", "strict": True, "count": 3}
    assert skill.frontmatter == {"name": "tidy", "description": "Does one thing well.", "metadata": metadata}


def test_a_malformed_skill_stops_start_up_with_one_fatal_line(tmp_path: Path) -> None:
    """A copy of the stand-in package, first on the path, with a skill whose name is not its folder's."""
    copy = tmp_path / "src" / "sample_server"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "skills"))
    write_skills(copy / "skills", {"tidy/SKILL.md": GOOD.format(name="neat")})
    result = subprocess.run(
        [sys.executable, "-m", "sample_server", "check"],
        env={**server_env(data_dir=str(tmp_path / "data")), "PYTHONPATH": str(tmp_path / "src")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_fatal_line(result, f"{copy}/skills/tidy/SKILL.md", "frontmatter name 'neat'", "set name: tidy")
