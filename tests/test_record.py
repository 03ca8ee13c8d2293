"""Records: declared like a frozen dataclass, and behaving like one."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import types

import pytest

from flashhub_kernels import LoadedKernel
from flashhub_kernels._models.record import Record

_EMPTY = types.MappingProxyType({})


class Point(Record):
    x: int
    y: int = 0
    tags: object = _EMPTY  # a default dataclasses would refuse as a class attribute


class Labelled(Point):
    """Annotates nothing: a kind of Point, with its fields."""


class Checked(Record):
    name: str

    def __init__(self, name: str) -> None:
        self._init(name.strip())


def test_fields_are_taken_by_position_by_name_or_from_their_defaults() -> None:
    assert Point(1, 2).y == 2
    assert Point(y=3, x=1) == Point(1, 3)
    point = Point(1)
    assert (point.y, point.tags) == (0, _EMPTY)
    assert vars(point) == {"x": 1, "y": 0, "tags": _EMPTY}  # every field on the instance


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Point(), "missing the field 'x'"),
        (lambda: Point(1, 2, 3, 4), "takes 3 fields, got 4"),
        (lambda: Point(1, z=2), "unexpected or repeated field 'z'"),
        (lambda: Point(1, x=2), "unexpected or repeated field 'x'"),
    ],
)
def test_a_wrong_call_is_a_type_error_naming_the_field(make, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()


def test_records_are_frozen_equal_by_fields_and_hashed_as_them() -> None:
    point = Point(1, 2, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.y  # type: ignore[misc]
    assert point == Point(1, 2, ()) and hash(point) == hash(Point(1, 2, ()))
    assert point != Labelled(1, 2, ())  # another kind of the same record
    assert repr(Point(1)) == "Point(x=1, y=0, tags=mappingproxy({}))"
    assert Labelled(4).x == 4


def test_pickle_copy_and_match_patterns_see_the_fields() -> None:
    point = Point(1, 2, ("a",))
    assert pickle.loads(pickle.dumps(point)) == point
    assert copy.copy(point) == point and copy.deepcopy(point) == point
    match point:
        case Point(x, y):
            assert (x, y) == (1, 2)
        case _:
            pytest.fail("Point(x, y) did not match")


def test_the_dataclasses_functions_work_and_see_no_class_defaults() -> None:
    point = Point(1, 2)
    assert dataclasses.is_dataclass(point)
    assert [f.name for f in dataclasses.fields(point)] == ["x", "y", "tags"]
    assert dataclasses.replace(point, y=7) == Point(1, 7)
    assert dataclasses.asdict(Point(1, 2, 3)) == {"x": 1, "y": 2, "tags": 3}
    assert "y" not in vars(Point)  # the defaults are kept aside, not as class attributes


def test_a_record_that_checks_its_arguments_writes_its_own_init() -> None:
    assert Checked("  name ").name == "name"
    assert dataclasses.replace(Checked("a"), name=" b ").name == "b"


def test_inspect_signature_and_help_show_the_fields_or_the_records_own_init() -> None:
    assert (
        str(inspect.signature(Point))
        == "(x: 'int', y: 'int' = 0, tags: 'object' = mappingproxy({}))"
    )
    assert inspect.signature(Labelled) == inspect.signature(Point)
    assert str(inspect.signature(Checked)) == "(name: 'str') -> 'None'"  # its own __init__
    fields = ["repo_id", "version", "variant", "path", "module"]
    assert list(inspect.signature(LoadedKernel).parameters) == fields
