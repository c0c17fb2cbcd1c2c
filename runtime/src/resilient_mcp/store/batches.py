"""Group commit on the event loop: statements that arrive while one is in flight go out together.

A caller that finds nothing in flight sends its item alone at once, so calls one at a time
pay what they always did. Callers that arrive while a batch is on its way to the database
wait; when it returns, the first of them sends everything that waited as one batch (one
round trip, one commit, one flush), and each hears its own answer. If a batch fails, each
of its callers sends its item again alone, so one caller's error is never another's.

The callers of a batch that returned resume one after another, each once the one before it
has: resumed all at once, each would run its call on to the next wait (the tool's body, the
answer) while every other ready task, such as a call with no key at all, waited behind them.

The next batch goes out once the event loop has run what was ready when this one returned
(for at most MAX_GATHER_S): the callers just resumed then join it with their next item (the
outcome after a claim) rather than wait for a round trip of their own. Each round trip costs
the loop far more than the statement's rows do (benchmarks/IDEMPOTENT_CALLS.md).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from resilient_mcp.sdk_fence import loop_has_ready_callbacks

Item = TypeVar("Item")
Answer = TypeVar("Answer")

MAX_BATCH = 256  # items in one statement
MAX_GATHER_S = 0.005  # how long the next batch may wait for the loop to run what was ready


class _Lead:
    """Your turn to send the next batch."""


class _Alone:
    """Your batch failed: send your item alone."""


LEAD, ALONE = _Lead(), _Alone()


@dataclass
class _Waiter(Generic[Item, Answer]):
    item: Item
    turn: asyncio.Future[Answer | _Lead | _Alone] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # Set when its batch returned: the batch's next caller and its answer, woken by this one.
    then: tuple[_Waiter[Item, Answer], Answer] | None = None

    def wake_next(self) -> None:
        if self.then is not None:
            waiter, answer = self.then
            waiter.turn.set_result(answer)


class Batches(Generic[Item, Answer]):
    """Sends items through `send`, a list of items to a list of answers in the same order."""

    def __init__(
        self, send: Callable[[list[Item]], Awaitable[list[Answer]]], *, max_batch: int = MAX_BATCH
    ) -> None:
        self._send = send
        self._max_batch = max_batch
        self._waiting: list[_Waiter[Item, Answer]] = []
        self._in_flight = False

    def _hand_over(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """The next batch to the first waiter, once the loop has nothing else ready to run."""
        if loop_has_ready_callbacks(loop) and loop.time() < deadline:
            loop.call_soon(self._hand_over, loop, deadline)
        elif self._waiting:
            self._waiting[0].turn.set_result(LEAD)
        else:
            self._in_flight = False

    async def submit(self, item: Item) -> Answer:
        # Shielded: others wait for the batch this caller sends, and a claim committed for a
        # caller that left must still be answered to it (it releases it).
        with anyio.CancelScope(shield=True):
            return await self._take_turn(item)
        raise AssertionError("unreachable: a shielded scope suppresses nothing")

    async def _take_turn(self, item: Item) -> Answer:
        waiter: _Waiter[Item, Answer] = _Waiter(item)
        self._waiting.append(waiter)
        if self._in_flight:
            turn = await waiter.turn
            waiter.wake_next()
            if isinstance(turn, _Alone):
                return (await self._send([item]))[0]
            if not isinstance(turn, _Lead):
                return turn
        return await self._lead(waiter)

    async def _lead(self, me: _Waiter[Item, Answer]) -> Answer:
        self._in_flight = True
        batch, self._waiting = self._waiting[: self._max_batch], self._waiting[self._max_batch :]
        answers: list[Answer] | None = None
        others: list[tuple[_Waiter[Item, Answer], Answer]] = []
        try:
            answers = await self._send([waiter.item for waiter in batch])
        except BaseException as exc:
            for waiter in batch:
                if waiter is not me:
                    waiter.turn.set_result(ALONE)
            if len(batch) == 1 or not isinstance(exc, Exception):
                raise
        else:
            answered = zip(batch, answers, strict=True)
            others = [(waiter, answer) for waiter, answer in answered if waiter is not me]
            for (waiter, _), after in itertools.pairwise(others):
                waiter.then = after
            if others:
                first, answer = others[0]
                first.turn.set_result(answer)
        finally:
            # Still in flight: the next batch is the first waiter's to send, or, when callers of
            # this one resume, the first of them to come back.
            if self._waiting or others:
                loop = asyncio.get_running_loop()
                self._hand_over(loop, loop.time() + MAX_GATHER_S)
            else:
                self._in_flight = False
        if answers is None:
            return (await self._send([me.item]))[0]
        return answers[batch.index(me)]
