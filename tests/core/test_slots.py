"""`slot_init`: the `__init__` given to frozen dataclasses made per chunk does what the
dataclass's own does (same fields, defaults, keywords, errors), and refuses the classes
it could not serve."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import FrozenInstanceError, dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_lazy_zarr.core.slots import slot_init


def point_class() -> type:
    """The same dataclass each call: one keeps the dataclass's `__init__`, one gets
    `slot_init`'s."""

    @dataclass(frozen=True, slots=True, order=True)
    class Point:
        a: int
        b: object = field(compare=False)
        c: str = "c"
        d: float | None = None

    return Point


Plain = point_class()
Fast = slot_init(point_class())


def fields_of(value: object) -> tuple[object, ...]:
    return tuple(getattr(value, f.name) for f in dataclasses.fields(value))  # type: ignore[arg-type]


@given(st.integers(), st.text(), st.text(), st.one_of(st.none(), st.floats()), st.booleans())
def test_builds_what_the_dataclass_init_builds(
    a: int, b: str, c: str, d: float | None, keywords: bool
) -> None:
    if keywords:
        plain, fast = Plain(a=a, b=b, c=c, d=d), Fast(b=b, d=d, a=a, c=c)
    else:
        plain, fast = Plain(a, b, c, d), Fast(a, b, c, d)
    assert fields_of(fast) == fields_of(plain)
    assert fields_of(Fast(a, b)) == fields_of(Plain(a, b))  # the defaults
    assert (Fast(a, b) < Fast(a + 1, b)) is True  # ordering untouched
    assert fields_of(dataclasses.replace(fast, a=a + 1))[0] == a + 1


def test_keeps_the_signature_the_errors_and_the_freezing() -> None:
    assert str(inspect.signature(Fast)) == str(inspect.signature(Plain))
    for call in (lambda: Fast(1), lambda: Fast(1, 2, e=3), lambda: Fast(1, 2, 3, 4, 5)):
        with pytest.raises(TypeError):
            call()
    fast = Fast(1, 2)
    with pytest.raises(FrozenInstanceError):
        fast.a = 2  # type: ignore[misc]


def test_refuses_classes_it_cannot_serve() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = field(default_factory=list)

    @dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = field(kw_only=True)

    for cls in (NoSlots, NotFrozen, Factory, PostInit, KeywordOnly):
        with pytest.raises(TypeError):
            slot_init(cls)
