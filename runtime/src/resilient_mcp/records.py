"""`@record`: the library's immutable records, held immutable by the type checker.

A `@dataclass(frozen=True)` class takes about a millisecond to define on Python 3.11: it compiles
six methods from source, two of them (`__setattr__`, `__delattr__`) only to refuse an assignment at
run time, and its `__init__` sets each field through `object.__setattr__`. The library defines some
thirty such classes on the way to a server's first answer: 3% of its start-up.

A record is a dataclass whose `__init__` is the only method compiled for it. It is frozen to type
checkers (PEP 681's `frozen_default`), so an assignment to a field is a type error, which
`mypy --strict` reports on this library and on every generated project; there is no run-time guard.
Its `__repr__`, `__eq__` and `__hash__` are shared by every record and read the fields the dataclass
machinery recorded: they answer as a frozen dataclass's do (tests/test_records.py holds them to it).
Standard library only.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, cast, dataclass_transform, overload

_T = TypeVar("_T")


@overload
def record(cls: type[_T], /) -> type[_T]: ...


@overload
def record(*, slots: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[_T] | None = None, /, *, slots: bool = False) -> Any:
    """A dataclass, frozen to the type checker: `@record` or `@record(slots=True)`."""

    def make(target: type[_T]) -> type[_T]:
        made: Any = dataclasses.dataclass(target, repr=False, eq=False, slots=slots)
        fields = dataclasses.fields(made)
        # What a frozen dataclass's generated methods would read, field by field.
        made._record_shown = tuple(field.name for field in fields if field.repr)
        made._record_compared = tuple(field.name for field in fields if field.compare)
        made._record_hashed = tuple(
            field.name for field in fields if (field.compare if field.hash is None else field.hash)
        )
        made.__repr__, made.__eq__, made.__hash__ = _repr, _eq, _hash
        return cast("type[_T]", made)

    return make if cls is None else make(cls)


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_shown)
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self, self._record_compared) == _values(other, self._record_compared)


def _hash(self: Any) -> int:
    return hash(_values(self, self._record_hashed))


def _values(instance: object, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The fields as a tuple, which compares as the dataclass's own tuples do (`x is y` first)."""
    return tuple(getattr(instance, name) for name in names)
