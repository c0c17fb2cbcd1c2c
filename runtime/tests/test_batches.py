"""Group commit: what arrives while a batch is in flight goes out in the next one, and each
caller hears its own answer. `send` stands for the database: it is outside the unit."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from resilient_mcp.store.batches import Batches

pytestmark = pytest.mark.anyio


class Database:
    """Answers each item with its double; holds a batch until released; refuses item 13."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []
        self.release = anyio.Event()

    async def send(self, items: list[int]) -> list[int]:
        self.sent.append(items)
        if len(self.sent) == 1:
            await self.release.wait()
        if 13 in items:
            raise ValueError("item 13 refused")
        return [item * 2 for item in items]


async def test_one_at_a_time_each_goes_alone_at_once() -> None:
    database = Database()
    database.release.set()
    batches = Batches(database.send)

    assert [await batches.submit(item) for item in (1, 2, 3)] == [2, 4, 6]
    assert database.sent == [[1], [2], [3]]


async def test_what_arrives_while_a_batch_is_in_flight_goes_out_together() -> None:
    database = Database()
    batches = Batches(database.send)
    answers: dict[int, int] = {}

    async def submit(item: int) -> None:
        answers[item] = await batches.submit(item)

    async with anyio.create_task_group() as group:
        group.start_soon(submit, 1)
        await anyio.wait_all_tasks_blocked()
        for item in (2, 3, 4):
            group.start_soon(submit, item)
        await anyio.wait_all_tasks_blocked()
        database.release.set()

    assert database.sent == [[1], [2, 3, 4]]
    assert answers == {1: 2, 2: 4, 3: 6, 4: 8}


async def test_the_callers_of_a_batch_resume_one_after_another() -> None:
    # All at once, each would run on to its next wait before any other ready task ran.
    database = Database()
    batches = Batches(database.send)
    steps: list[str] = []

    async def submit(item: int) -> None:
        await batches.submit(item)
        steps.append(f"{item} resumed")
        await anyio.lowlevel.checkpoint()  # its next step waits behind what was ready before it
        steps.append(f"{item} ran on")

    async with anyio.create_task_group() as group:
        group.start_soon(submit, 1)
        await anyio.wait_all_tasks_blocked()
        for item in (2, 3, 4):
            group.start_soon(submit, item)
        await anyio.wait_all_tasks_blocked()
        database.release.set()

    assert database.sent == [[1], [2, 3, 4]]
    later = [step for step in steps if step[0] in "234"]
    assert later == ["2 resumed", "3 resumed", "2 ran on", "4 resumed", "3 ran on", "4 ran on"]


async def test_the_callers_of_a_batch_join_the_next_one_with_their_next_item() -> None:
    # A claim's caller comes back with its outcome: it waits for the batch the others join,
    # rather than going out alone and leaving them one more round trip behind it.
    database = Database()
    batches = Batches(database.send)

    async def claim_then_complete(item: int) -> None:
        await batches.submit(item)
        await anyio.lowlevel.checkpoint()  # the tool's body
        await batches.submit(item + 100)

    async with anyio.create_task_group() as group:
        group.start_soon(batches.submit, 1)
        await anyio.wait_all_tasks_blocked()
        for item in (2, 3, 4):
            group.start_soon(claim_then_complete, item)
        await anyio.wait_all_tasks_blocked()
        database.release.set()

    assert database.sent == [[1], [2, 3, 4], [102, 103, 104]]


async def test_a_failed_batch_is_sent_again_item_by_item() -> None:
    database = Database()
    batches = Batches(database.send)
    answers: dict[int, int | str] = {}

    async def submit(item: int) -> None:
        try:
            answers[item] = await batches.submit(item)
        except ValueError as exc:
            answers[item] = str(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(submit, 1)
        await anyio.wait_all_tasks_blocked()
        for item in (12, 13, 14):
            group.start_soon(submit, item)
        await anyio.wait_all_tasks_blocked()
        database.release.set()

    assert answers == {1: 2, 12: 24, 13: "item 13 refused", 14: 28}
    assert database.sent[:2] == [[1], [12, 13, 14]]
    assert sorted(database.sent[2:]) == [[12], [13], [14]]


async def test_a_caller_cancelled_while_waiting_leaves_the_batch_whole() -> None:
    database = Database()
    batches = Batches(database.send)
    answers: dict[int, int] = {}

    async def submit(item: int) -> None:
        answers[item] = await batches.submit(item)

    async with anyio.create_task_group() as group:
        group.start_soon(submit, 1)
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as impatient:
            impatient.start_soon(submit, 2)
            group.start_soon(submit, 3)
            await anyio.wait_all_tasks_blocked()
            impatient.cancel_scope.cancel()
            database.release.set()

    assert database.sent == [[1], [2, 3]]
    assert answers == {1: 2, 2: 4, 3: 6}  # the batch a caller joined is answered to it
