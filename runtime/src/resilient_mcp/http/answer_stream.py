"""2025-11-25 answers over HTTP: sse-starlette's stream, with one task where it starts five.

The SDK's session transport answers a 2025-11-25 POST with an SSE stream, sse-starlette's
`EventSourceResponse`: a task group with one task each to write the events, to ping every 15 s,
to watch for the server's shutdown, to watch for the client leaving, and to run the SDK's
writer that feeds the stream. Most answers are one event written within milliseconds, and for
them four of the five tasks are started and cancelled for nothing (what that costs:
benchmarks/HTTP_LOAD.md). `AnswerStream` writes the events in the request's own task, runs the
SDK's writer as the one task, and starts sse-starlette's other three, unchanged, only for an
answer still open after WATCH_AFTER_S: the first ping then comes 15 s after that, and a client
that leaves sooner is noticed then.

Every other stream (the standing GET stream, a replay after `Last-Event-ID`) is sse-starlette's
as it is, and `<PREFIX>HTTP_EXCHANGE=sdk` leaves POST answers to it too. The differential test
(tests/test_modern_exchange.py) holds both to the same answers in this era as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup
from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from resilient_mcp.sdk_fence import collapse_excgroups

WATCH_AFTER_S = 1.0  # how long an answer stays open before sse-starlette's own watchers start


class AnswerStream(EventSourceResponse):
    """`EventSourceResponse` for the answer to a POST: see the module docstring."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        with collapse_excgroups():
            async with anyio.create_task_group() as group:
                if self.data_sender_callable:
                    group.start_soon(self.data_sender_callable)
                timer = asyncio.get_running_loop().call_later(
                    WATCH_AFTER_S, self._watch, group, receive, send
                )
                try:
                    await self._stream_response(send)
                finally:
                    timer.cancel()
                group.cancel_scope.cancel()  # the answer is written: what still runs for it ends
        await self._end(send)

    def _watch(self, group: TaskGroup, receive: Receive, send: Send) -> None:
        """sse-starlette's own watchers, each ending the answer when it returns, as it runs them."""
        if self._ping_interval > 0:
            group.start_soon(_ends_the_answer, group, lambda: self._ping(send))
        group.start_soon(_ends_the_answer, group, self._listen_for_exit_signal_with_grace)
        group.start_soon(_ends_the_answer, group, lambda: self._listen_for_disconnect(receive))

    async def _end(self, send: Send) -> None:
        """What sse-starlette does once its tasks are done: close a stream a shutdown cut short."""
        cut_short = self._response_started and not self._response_complete
        if cut_short and not self._client_disconnected and not self._send_interrupted:
            try:
                await self._send_with_timeout(
                    send, {"type": "http.response.body", "body": b"", "more_body": False}
                )
                self._response_complete = True
            except OSError:  # the peer has gone already (a send time-out is an OSError too)
                pass
        if self.background is not None:
            await self.background()


async def _ends_the_answer(group: TaskGroup, watcher: Callable[[], Awaitable[None]]) -> None:
    await watcher()
    group.cancel_scope.cancel()
