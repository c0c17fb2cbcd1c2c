"""The thread that owns the SQLite file's writing connection: the event loop never waits for the disk.

Two kinds of work arrive on one queue, in order:

- a single statement (a new key's claim; a start mark or an outcome that found the file
  locked). Statements that arrive while a batch is being written go into the next batch:
  one `BEGIN IMMEDIATE ... COMMIT`, so one fsync for all of them, and each caller hears
  back only once its batch is on disk. A statement that finds the thread idle runs alone
  in autocommit mode, so calls one at a time pay no more than one commit each.
- a session of several statements (taking over a key, an operator's verdict, the sweep,
  migrations): it holds the thread for its whole transaction, statement by statement, so
  no batch can interleave with it.

The callers of one batch are answered by one callback on the event loop: one wake-up of the
loop per commit, not one per caller (waking another thread is dear, on a VM most of all).

A commit holding a durable statement (a claim) is at `synchronous = FULL`: on disk
before its callers resume; a batch of writes that only found the file locked is not
flushed, as on the loop's connection. If one statement of a batch fails, the batch is
rolled back and each statement is run again alone, so one caller's error is never another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from resilient_mcp.store.dialect import Params

MAX_BATCH = 256  # statements per commit: bounds how long the write lock is held at once
SESSION_IDLE_S = 30.0  # a session that sends nothing for this long is rolled back
_STOP = object()


class SessionAbandonedError(sqlite3.OperationalError):
    """A session sent nothing for SESSION_IDLE_S: the thread rolled it back and moved on."""


class WriterStoppedError(sqlite3.OperationalError):
    """The store closed: its writer takes no more work."""


@dataclass
class _Reply:
    """Where the thread sends one answer: a future of the loop that waits for it."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.future = self.loop.create_future()

    def send(self, value: Any = None, error: BaseException | None = None) -> None:
        _send_all([(self, value, error)])

    async def wait(self) -> Any:
        # Shielded: once sent, a statement runs whether or not its caller is still there, and a
        # claim committed for a caller that left must still be answered to it (it releases it).
        with anyio.CancelScope(shield=True):
            return await self.future


_Answer = tuple[_Reply, Any, BaseException | None]  # a reply, and its value or error


def _send_all(answers: list[_Answer]) -> None:
    """Every answer of a batch in one callback per loop: one wake-up of the loop, not one each."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Answer]] = {}
    for answer in answers:
        by_loop.setdefault(answer[0].loop, []).append(answer)
    for loop, theirs in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle_all, theirs)


def _settle_all(answers: list[_Answer]) -> None:
    for reply, value, error in answers:
        if reply.future.done():
            continue
        if error is not None:
            reply.future.set_exception(error)
        else:
            reply.future.set_result(value)


@dataclass
class _Statement:
    sql: str
    params: Params
    rows: bool  # answer with the rows fetched, not the count of rows changed
    durable: bool  # its commit must reach the disk before its caller resumes
    reply: _Reply

    def run(self, conn: sqlite3.Connection) -> Any:
        cursor = conn.execute(self.sql, self.params)
        return cursor.fetchall() if self.rows else cursor.rowcount


_Step = _Statement | bool | None  # a statement of the session; None commits it, False rolls it back


@dataclass
class _Session:
    """A transaction run statement by statement."""

    begun: _Reply
    durable: bool
    steps: queue.SimpleQueue[tuple[_Step, _Reply]] = field(default_factory=queue.SimpleQueue)
    abandoned: bool = False


class SQLiteWriter:
    """Runs statements and sessions on `conn` in a thread of its own; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, *, name: str = "idempotency-writer") -> None:
        self._conn = conn
        self._durable = False  # the connection's synchronous setting: FULL when True
        conn.execute("PRAGMA synchronous = NORMAL")
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def execute(self, sql: str, params: Params, *, durable: bool = False) -> int:
        """Run one statement (in the next batch); how many rows it changed."""
        result: int = await self._submit(sql, params, rows=False, durable=durable)
        return result

    async def rows(self, sql: str, params: Params, *, durable: bool = False) -> list[tuple[Any, ...]]:
        result: list[tuple[Any, ...]] = await self._submit(sql, params, rows=True, durable=durable)
        return result

    async def _submit(self, sql: str, params: Params, *, rows: bool, durable: bool) -> Any:
        if self._stopped:
            raise WriterStoppedError("the idempotency store is closed")
        reply = _Reply(asyncio.get_running_loop())
        self._jobs.put(_Statement(sql, params, rows, durable, reply))
        return await reply.wait()

    @asynccontextmanager
    async def session(self, *, durable: bool = False) -> AsyncIterator[WriterSession]:
        """A `BEGIN IMMEDIATE` transaction on the thread, committed when the block ends."""
        if self._stopped:
            raise WriterStoppedError("the idempotency store is closed")
        loop = asyncio.get_running_loop()
        session = _Session(_Reply(loop), durable)
        self._jobs.put(session)
        await session.begun.wait()
        try:
            yield WriterSession(session, loop)
        except BaseException:
            await _step(session, loop, False)
            raise
        await _step(session, loop, None)

    def stop(self) -> None:
        """Finish what was sent, then end the thread (blocking: call it from a worker thread)."""
        self._stopped = True
        self._jobs.put(_STOP)
        self._thread.join()
        while True:  # sent after the stop: answered, never left waiting
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            reply = job.begun if isinstance(job, _Session) else job.reply
            reply.send(error=WriterStoppedError("the idempotency store is closed"))

    # --- on the thread ----------------------------------------------------------

    def _serve(self) -> None:
        waiting: Any = None
        while True:
            job = waiting if waiting is not None else self._jobs.get()
            waiting = None
            if job is _STOP:
                return
            if isinstance(job, _Session):
                self._run_session(job)
                continue
            batch = [job]
            while len(batch) < MAX_BATCH:
                try:
                    following = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if not isinstance(following, _Statement):
                    waiting = following  # a session or the stop: after this batch, in order
                    break
                batch.append(following)
            self._run_batch(batch)

    def _flush_commits(self, durable: bool) -> None:
        if durable != self._durable:
            self._conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            self._durable = durable

    def _run_batch(self, batch: list[_Statement]) -> None:
        conn = self._conn
        try:
            self._flush_commits(any(statement.durable for statement in batch))
            if len(batch) > 1:
                conn.execute("BEGIN IMMEDIATE")  # the lock, once: another process may hold it long
        except Exception as exc:  # nothing ran: the same answer for all
            _send_all([(statement.reply, None, exc) for statement in batch])
            return
        if len(batch) > 1:
            try:
                results = [statement.run(conn) for statement in batch]
                conn.execute("COMMIT")
            except Exception:
                _roll_back(conn)
            else:
                _send_all(
                    [
                        (statement.reply, result, None)
                        for statement, result in zip(batch, results, strict=True)
                    ]
                )
                return
        for statement in batch:  # alone, or again one by one after a failed batch
            _answer(statement.reply, statement.run, conn)

    def _run_session(self, session: _Session) -> None:
        conn = self._conn
        try:
            self._flush_commits(session.durable)
            conn.execute("BEGIN IMMEDIATE")
        except Exception as exc:
            session.begun.send(error=exc)
            return
        session.begun.send()
        while True:
            try:
                step, reply = session.steps.get(timeout=SESSION_IDLE_S)
            except queue.Empty:  # its caller stopped sending: never seen, but never wait forever
                session.abandoned = True
                _roll_back(conn)
                return
            if isinstance(step, _Statement):
                _answer(reply, step.run, conn)
                continue
            if step is None:
                _answer(reply, _commit, conn)
            else:  # rolled back before the answer: the caller may read right after it
                _roll_back(conn)
                reply.send()
            return


class WriterSession:
    """The statements of one session on the writer thread."""

    def __init__(self, session: _Session, loop: asyncio.AbstractEventLoop) -> None:
        self._session = session
        self._loop = loop

    async def execute(self, sql: str, params: Params) -> int:
        statement = _Statement(sql, params, False, False, _Reply(self._loop))
        result: int = await _step(self._session, self._loop, statement)
        return result

    async def rows(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        statement = _Statement(sql, params, True, False, _Reply(self._loop))
        result: list[tuple[Any, ...]] = await _step(self._session, self._loop, statement)
        return result


async def _step(session: _Session, loop: asyncio.AbstractEventLoop, step: _Step) -> Any:
    if session.abandoned:
        raise SessionAbandonedError("the idempotency store's session was idle too long and rolled back")
    reply = step.reply if isinstance(step, _Statement) else _Reply(loop)
    session.steps.put((step, reply))
    return await reply.wait()


def _answer(reply: _Reply, run: Callable[[sqlite3.Connection], Any], conn: sqlite3.Connection) -> None:
    try:
        result = run(conn)
    except Exception as exc:  # the caller's to handle: the thread goes on
        reply.send(error=exc)
    else:
        reply.send(result)


def _commit(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("COMMIT")
    except BaseException:
        _roll_back(conn)
        raise


def _roll_back(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back itself (SQLITE_FULL)
            conn.execute("ROLLBACK")
