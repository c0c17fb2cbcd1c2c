"""Where the two databases differ, and how a statement runs: the parts every SQL module of the
store builds on (`sql.py` for the keys, `task_table.py` for the tasks), with no store logic."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from resilient_mcp.records import record

Params = Mapping[str, Any]
NO_PARAMS: Params = {}


@record
class Dialect:
    """The SQL fragments where the two databases differ. Statements name their parameters
    `:name`; `placeholder` is the form the driver wants instead (`%(name)s` for psycopg)."""

    time_type: str  # a point in time: seconds since the epoch, or a timestamp
    time_default: str  # the DDL default of a time column
    float_type: str
    small_int_type: str
    now: str  # the current time, as the database (or the caller) sees it
    epoch: str  # `{}`: a time column, as float seconds since the epoch
    after: str  # `{}`: a float parameter; the time that many seconds from now
    before: str  # `{}`: a float parameter; the time that many seconds ago
    row_lock: str  # appended to a SELECT of `idempotency_keys AS k`: lock the row until commit ("": none)
    schema_lock: str | None  # a statement serialising migrations (None: the transaction does)
    sweep_lock: str | None  # a statement answering whether this sweep may run now
    # Whether ALTER TABLE can replace a primary key (PostgreSQL); if not, the table is copied (SQLite).
    alters_primary_key: bool
    placeholder: str = ":{}"
    # A statement making this transaction's commit return before it is flushed (None: commits
    # that need not reach the disk are not flushed anyway).
    relaxed_commit: str | None = None

    def compile(self, statement: str) -> str:
        """The statement with the driver's placeholders."""
        if self.placeholder == ":{}":
            return statement
        return _PARAMETER.sub(lambda match: self.placeholder.format(match[1]), statement)


_PARAMETER = re.compile(r"(?<![:\w]):([a-z_]\w*)")


class Session(ABC):
    """Statements on one connection (within one transaction when the session opened one)."""

    @abstractmethod
    async def rows(self, statement: str, params: Params = NO_PARAMS) -> list[tuple[Any, ...]]:
        """The rows a query returns."""

    @abstractmethod
    async def execute(self, statement: str, params: Params = NO_PARAMS) -> int:
        """Run a statement; how many rows it changed."""

    async def one(self, statement: str, params: Params = NO_PARAMS) -> tuple[Any, ...] | None:
        rows = await self.rows(statement, params)
        return rows[0] if rows else None


Transaction = Callable[[], AbstractAsyncContextManager[Session]]
