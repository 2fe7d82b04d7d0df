"""A cheaper `__init__` for the frozen, slotted dataclasses the engine makes per chunk.

A frozen dataclass's own `__init__` sets each field with ``object.__setattr__``,
which looks the field up by name on every call. Setting the slots through their
descriptors' ``__set__`` instead does the same, less than half the time
(measured here: a `QueueItem` of 8 fields 1.6 µs against 0.73 µs). The engine
makes a `ChunkEvent` per state move (three or four per chunk) and a queue item
per chunk queued.

`slot_init` gives a class that `__init__`: same parameters, same defaults, the
class still frozen (assignment after construction still raises).

Examples
--------
>>> from dataclasses import FrozenInstanceError, dataclass
>>> @slot_init
... @dataclass(frozen=True, slots=True)
... class Point:
...     x: int
...     y: int = 0
>>> point = Point(1)
>>> point, point == Point(1, 0)
(Point(x=1, y=0), True)
>>> try:
...     point.x = 2
... except FrozenInstanceError:
...     print("still frozen")
still frozen
"""

from __future__ import annotations

import dataclasses
import keyword
from typing import Any

__all__ = ["slot_init"]


def slot_init[T](cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass `cls` an `__init__` filling its slots directly.

    Only plain fields are supported (no ``default_factory``, ``init=False``,
    ``kw_only`` or ``__post_init__``): anything else raises `TypeError`, as
    the generated `__init__` would not do what the dataclass's does.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__qualname__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__} has a __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    defaults: list[Any] = []
    for field in fields:
        if (
            not field.init
            or field.kw_only
            or field.default_factory is not dataclasses.MISSING
            or keyword.iskeyword(field.name)
            or not field.name.isidentifier()
        ):
            raise TypeError(f"{cls.__qualname__}.{field.name}: not a plain field")
        if field.default is not dataclasses.MISSING:
            defaults.append(field.default)
    names = [field.name for field in fields]
    namespace: dict[str, Any] = {}
    for name in names:
        slot = cls.__dict__.get(name)
        if slot is None or type(slot).__name__ != "member_descriptor":
            raise TypeError(f"{cls.__qualname__}.{name}: not a slot of the class itself")
        namespace[f"_set_{name}"] = slot.__set__
    body = "".join(f"    _set_{name}(self, {name})\n" for name in names) or "    pass\n"
    # As dataclasses does: the names are the class's own field names, checked above.
    exec(f"def __init__(self, {', '.join(names)}):\n{body}", namespace)
    init = namespace["__init__"]
    init.__defaults__ = tuple(defaults) or None
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    setattr(cls, "__init__", init)  # noqa: B010 (mypy: no assignment to a method)
    return cls
