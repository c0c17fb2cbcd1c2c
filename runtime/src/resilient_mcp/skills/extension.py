"""The Skills extension (SEP-2640, `io.modelcontextprotocol/skills`) as the SDK serves it.

Advertised only when skills/ holds a skill, with `directoryRead: true`:

- `skills/list`: every skill's entry (its `skill://<name>/SKILL.md` URI, its frontmatter
  verbatim, every file's URI, SHA-256 digest and size), in one page; `skills/get`: one entry
  by its URI, an unknown one -32602.
- `resources/directory/read`: a skill directory's direct children, subdirectories as
  `inode/directory`; a file or an unknown URI -32602.
- Each SKILL.md is listed in resources/list (`text/markdown`, named and described by its
  frontmatter); every file of a skill is read with resources/read (`ResilientServer` asks
  `read` first), its bytes checked against the digest it was listed with.

Each request is answered through the core as a resource read is (`calls.primitive_calls`):
within the caller's limits and the time limit, its failure categorised, logged in one line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ResourceBinding
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver.resources import Resource
from mcp_types import RequestParams
from pydantic import ConfigDict, Field

from resilient_mcp.authoring.errors import ToolInputError
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.calls.primitive_bounds import PrimitiveBounds
from resilient_mcp.calls.primitive_calls import answered
from resilient_mcp.calls.validation import unknown_name_message
from resilient_mcp.skills.catalog import MANIFEST_MIME_TYPE, SkillCatalog, SkillFile, is_text, read_verified

EXTENSION = "io.modelcontextprotocol/skills"
T = TypeVar("T")
_SHOWN = 20  # an unknown URI's answer lists this many skills
_URI_CHARS = 2048


class ListSkillsParams(RequestParams):
    model_config = ConfigDict(defer_build=True)  # built at its first request, not at start-up

    cursor: str | None = Field(None, max_length=_URI_CHARS)


class SkillUriParams(RequestParams):
    model_config = ConfigDict(defer_build=True)  # built at its first request, not at start-up

    uri: str = Field(min_length=1, max_length=_URI_CHARS)


class DirectoryReadParams(SkillUriParams):
    cursor: str | None = Field(None, max_length=_URI_CHARS)


class SkillFileResource(Resource):
    """A SKILL.md as resources/list shows it; read, it is checked as every skill file is."""

    file: SkillFile

    async def read(self) -> str | bytes:
        return await contents(self.file)


async def contents(file: SkillFile) -> str | bytes:
    """The file as a client gets it: text when it is UTF-8, else bytes (a base64 blob)."""
    data = await anyio.to_thread.run_sync(read_verified, file)
    return data.decode("utf-8") if is_text(data) else data


class SkillsExtension(Extension):
    """The owner's skills, served; `bind` hands it the server's bounds once they exist."""

    identifier = EXTENSION

    def __init__(self, catalog: SkillCatalog, settings: CoreSettings) -> None:
        self.catalog = catalog
        # 2026-07-28: skills/list and skills/get are cacheable results, as list results are.
        self._cache = {"ttlMs": settings.list_ttl_ms, "cacheScope": settings.cache_scope}
        self._bounds: PrimitiveBounds | None = None

    def bind(self, bounds: PrimitiveBounds) -> None:
        self._bounds = bounds

    def settings(self) -> dict[str, Any]:
        return {"directoryRead": True}

    def resources(self) -> Sequence[ResourceBinding]:
        return tuple(
            ResourceBinding(
                SkillFileResource(
                    uri=skill.uri,
                    name=skill.name,
                    description=skill.description,
                    mime_type=MANIFEST_MIME_TYPE,
                    file=skill.files[0],
                )
            )
            for skill in self.catalog.skills
        )

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("skills/list", ListSkillsParams, self.list_skills),
            MethodBinding("skills/get", SkillUriParams, self.get_skill),
            MethodBinding("resources/directory/read", DirectoryReadParams, self.read_directory),
        )

    async def list_skills(
        self, ctx: ServerRequestContext[Any, Any], params: ListSkillsParams
    ) -> HandlerResult:
        async def listed() -> dict[str, Any]:
            _one_page(params.cursor, "skills/list")
            return {"skills": [skill.entry() for skill in self.catalog.skills], **self._cache}

        return await self._answer("skills/list", "skills", listed)

    async def get_skill(self, ctx: ServerRequestContext[Any, Any], params: SkillUriParams) -> HandlerResult:
        async def got() -> dict[str, Any]:
            skill = self.catalog.skill(params.uri)
            if skill is None:
                known = (skill.uri for skill in self.catalog.skills)
                raise ToolInputError(unknown_name_message("skill", params.uri, known, listed_at_most=_SHOWN))
            return {"skill": skill.entry(), **self._cache}

        return await self._answer("skills/get", params.uri, got, uri=params.uri)

    async def read_directory(
        self, ctx: ServerRequestContext[Any, Any], params: DirectoryReadParams
    ) -> HandlerResult:
        async def listed() -> dict[str, Any]:
            _one_page(params.cursor, "resources/directory/read")
            children = self.catalog.directory(params.uri)
            if children is None:
                if params.uri in self.catalog.files:
                    raise ToolInputError(
                        f"{params.uri} is a file, not a directory: read it with resources/read"
                    )
                known = (skill.uri.removesuffix("/SKILL.md") for skill in self.catalog.skills)
                raise ToolInputError(
                    unknown_name_message("directory", params.uri, known, listed_at_most=_SHOWN)
                    + "; skills/list shows every skill's files"
                )
            return {"resources": list(children)}

        return await self._answer("resources/directory/read", params.uri, listed, uri=params.uri)

    def file(self, uri: str) -> SkillFile | None:
        """The skill file at `uri`, for resources/read; None when no skill has it."""
        return self.catalog.files.get(uri)

    async def read(self, file: SkillFile) -> list[ReadResourceContents]:
        return [ReadResourceContents(content=await contents(file), mime_type=file.mime_type)]

    async def _answer(
        self, method: str, target: str, run: Callable[[], Awaitable[T]], *, uri: str | None = None
    ) -> T:
        bounds = self._bounds
        assert bounds is not None, "SkillsExtension.bind was not called"
        return await bounds.counted(method, answered(method, target, bounds.within(method, run), uri=uri))


def _one_page(cursor: str | None, method: str) -> None:
    if cursor is not None:
        raise ToolInputError(f"{method} answers in one page and sent no nextCursor: send it without a cursor")
