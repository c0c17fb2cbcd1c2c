"""`@record` beside its plain twin, `@dataclass(frozen=True)`: at run time the same fields,
construction, repr, equality, hash and `dataclasses` helpers; to the type checker, frozen."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from resilient_mcp.records import record


@record
class Fast:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class Plain:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)


@record
class Shown:
    value: float
    secret: str = dataclasses.field(default="", repr=False)
    label: str = dataclasses.field(default="", hash=False)
    parts: list[Any] = dataclasses.field(default_factory=list, compare=False)


@dataclasses.dataclass(frozen=True)
class PlainShown:
    value: float
    secret: str = dataclasses.field(default="", repr=False)
    label: str = dataclasses.field(default="", hash=False)
    parts: list[Any] = dataclasses.field(default_factory=list, compare=False)


@record(slots=True)
class Slotted:
    name: str
    count: int = 0


def test_a_record_is_made_compared_and_hashed_as_its_frozen_twin() -> None:
    fast, plain = Fast("a", 1, ("x",), {"k": 1}), Plain("a", 1, ("x",), {"k": 1})
    assert repr(fast).removeprefix("Fast") == repr(plain).removeprefix("Plain")
    assert [field.name for field in dataclasses.fields(fast)] == [
        field.name for field in dataclasses.fields(plain)
    ]
    assert fast == Fast("a", 1, ("x",), {"other": 2})  # `extra` is not compared, as in the twin
    assert plain == Plain("a", 1, ("x",), {"other": 2})
    assert fast != Fast("a", 2, ("x",))
    assert plain != Plain("a", 2, ("x",))
    assert hash(fast) == hash(Fast("a", 1, ("x",)))
    assert hash(plain) == hash(Plain("a", 1, ("x",)))
    assert (
        len({fast, Fast("a", 1, ("x",)), Fast("b")}) == len({plain, Plain("a", 1, ("x",)), Plain("b")}) == 2
    )
    assert dataclasses.replace(fast, count=5).count == dataclasses.replace(plain, count=5).count == 5
    assert dataclasses.asdict(fast) == dataclasses.asdict(plain)
    assert Fast("a").extra is not Fast("a").extra  # a default factory makes one each time


@pytest.mark.parametrize("value", [1.5, math.nan])
def test_fields_left_out_of_repr_or_hash_and_values_unequal_to_themselves_answer_as_in_the_twin(
    value: float,
) -> None:
    fast, plain = Shown(value, "hunter2", "a"), PlainShown(value, "hunter2", "a")
    assert repr(fast).removeprefix("Shown") == repr(plain).removeprefix("PlainShown")
    assert "hunter2" not in repr(fast)
    assert (fast == Shown(value, "hunter2", "a")) is (plain == PlainShown(value, "hunter2", "a"))
    assert (fast == fast) is (plain == plain)  # a NaN field: the same object
    other: object = plain
    assert (fast == other) is (other == fast) is False  # another class is never equal
    assert hash(Shown(1.0, label="a")) == hash(Shown(1.0, label="b"))  # `label` is not hashed
    assert hash(PlainShown(1.0, label="a")) == hash(PlainShown(1.0, label="b"))
    looped, plain_looped = Shown(1.0), PlainShown(1.0)
    looped.parts.append(looped)
    plain_looped.parts.append(plain_looped)
    assert repr(looped).removeprefix("Shown") == repr(plain_looped).removeprefix("PlainShown")


def test_a_slotted_record_has_slots_and_no_instance_dict() -> None:
    slotted = Slotted("a", 1)
    assert Slotted.__slots__ == ("name", "count")
    assert not hasattr(slotted, "__dict__")
    assert slotted == Slotted("a", 1)
    assert hash(slotted) == hash(Slotted("a", 1))


def test_the_type_checker_refuses_an_assignment_to_a_records_field(tmp_path: Path) -> None:
    module = tmp_path / "assigns.py"
    module.write_text(
        "from resilient_mcp.records import record\n"
        "@record\n"
        "class Point:\n"
        "    x: int\n"
        "point = Point(1)\n"
        "point.x = 2\n"
        "Point(x='not an int')\n",
        encoding="utf-8",
    )
    report, _, status = mypy_api.run(["--strict", "--no-incremental", str(module)])
    assert status == 1, report
    assert 'assigns.py:6: error: Property "x" defined in "Point" is read-only' in report
    assert "assigns.py:7: error: Argument" in report
