"""`@record`: the library's immutable records, held immutable by the type checker.

A `@record` class takes about a millisecond to define on Python 3.11: it compiles
six methods, two of them (`__setattr__`, `__delattr__`) only to refuse an assignment at run time,
and its `__init__` sets each field through `object.__setattr__`. The library defines some thirty
such classes on the way to a server's first answer, 1.5% of its start-up. A record is the same
dataclass (its fields, `__init__`, `__repr__`, `__eq__`, a `__hash__` over the fields) without that
guard: type checkers see it frozen (PEP 681's `frozen_default`), so an assignment to a field is a
type error, which `mypy --strict` reports on this library and on every generated project.
Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")


@overload
def record(cls: type[_T], /) -> type[_T]: ...


@overload
def record(*, slots: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[_T] | None = None, /, *, slots: bool = False) -> Any:
    """A dataclass, frozen to the type checker: `@record` or `@record(slots=True)`."""

    def make(target: type[_T]) -> type[_T]:
        return dataclasses.dataclass(target, unsafe_hash=True, slots=slots)

    return make if cls is None else make(cls)
