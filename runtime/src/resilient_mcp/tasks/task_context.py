"""The `Context` a task's body gets: the same interface as in a request, with no request behind it.

A task runs after its `tools/call` was answered, maybe on another replica, maybe after a
restart: there is no request, session or stream to talk back on. So this Context answers
from the task: its protocol is the 2026-07-28 one (a question is an `InputRequiredResult`,
which parks the task until `tasks/update` answers it, also through the SDK's
`Resolve`/`Elicit`), its client capabilities are those declared when it was created, the
answers gathered so far are its `input_responses`, and progress becomes the task's
`statusMessage`. What needs a live request (`elicit` mid-call, a log line to the client) is
refused with the way to do it instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import ClientCapabilities

TASK_PROTOCOL_VERSION = "2026-07-28"  # the era whose questions a task can carry
ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]


class TaskContext(Context[Any, Any]):
    """A request's Context for a body that runs as a task (see the module's docstring)."""

    _task_id: str
    _capabilities: ClientCapabilities | None
    _progress: ProgressSink | None

    def __init__(
        self,
        *,
        task_id: str,
        capabilities: Mapping[str, Any] | None,
        progress: ProgressSink | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._task_id = task_id
        self._capabilities = None if capabilities is None else ClientCapabilities.model_validate(capabilities)
        self._progress = progress

    @property
    def protocol_version(self) -> str | None:
        return TASK_PROTOCOL_VERSION

    @property
    def client_capabilities(self) -> ClientCapabilities | None:
        return self._capabilities

    @property
    def request_id(self) -> str:
        return self._task_id

    @property
    def headers(self) -> Mapping[str, str] | None:
        return None

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Shown as the task's `statusMessage` (written at most once a second)."""
        if self._progress is not None:
            await self._progress(progress, total, message)

    async def elicit(self, message: str, schema: Any) -> Any:
        raise RuntimeError(_NO_REQUEST.format(what="ctx.elicit"))

    async def elicit_url(self, message: str, url: str, elicitation_id: str) -> Any:
        raise RuntimeError(_NO_REQUEST.format(what="ctx.elicit_url"))


_NO_REQUEST = (
    "{what} needs a live request, and a task runs after its request was answered: ask by "
    "returning an InputRequiredResult (or through Resolve/Elicit), and read the answers in "
    "ctx.input_responses when the task runs again"
)
