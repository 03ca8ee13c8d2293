"""What a record class makes only when something reads it, out of :mod:`.record`, which
every kernel load imports: its dataclass fields, for the ``dataclasses`` functions, and
its signature, for ``inspect.signature`` and ``help()``."""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .record import Record


def dataclass_fields(
    _instance: object, owner: type[Record], base: type[Record]
) -> dict[str, dataclasses.Field[Any]]:
    """``__dataclass_fields__`` of the record class ``owner`` (``base`` is ``Record``),
    made by turning the class into a dataclass, its methods left as they are."""
    if owner is base:
        raise AttributeError("__dataclass_fields__")  # the base is no dataclass
    # No method is generated (init, repr and eq are off; not frozen): the record's
    # own stay. This sets the class's own __dataclass_fields__, shadowing the base's.
    dataclasses.dataclass(init=False, repr=False, eq=False)(owner)
    fields: dict[str, dataclasses.Field[Any]] = owner.__dict__["__dataclass_fields__"]
    return fields


def signature(
    instance: object, owner: type[Record], base: type[Record]
) -> inspect.Signature | None:
    """``__signature__`` of the record class ``owner`` (``base`` is ``Record``): its
    fields, with their defaults. ``None`` (inspect then reads ``__init__``) for a record
    with an ``__init__`` of its own, and for an instance."""
    init_from = next(c for c in owner.__mro__ if "__init__" in vars(c))
    if instance is not None or init_from is not base:
        return None
    declared = next(c for c in owner.__mro__ if "_fields" in vars(c)).__annotations__
    kind, empty = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty
    defaults = owner._defaults
    return inspect.Signature(
        [
            inspect.Parameter(n, kind, default=defaults.get(n, empty), annotation=declared[n])
            for n in owner._fields
        ]
    )
