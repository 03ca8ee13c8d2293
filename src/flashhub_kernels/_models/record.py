"""Immutable records that cost next to nothing to define.

A frozen dataclass compiles its methods with ``exec`` when the class is defined: about
0.5 ms each, paid by every process that imports it. A :class:`Record` subclass declares
its fields as a dataclass does, by annotating them in order, with their defaults
(``offline: bool = False``); its methods are shared, and behave as a frozen dataclass's:

- made by calling the class with the fields, positionally or by name;
- equal to a record of the same class with equal fields, hashed as the tuple of fields;
- ``repr`` as ``ClassName(field=value, ...)``;
- assigning or deleting an attribute raises :class:`dataclasses.FrozenInstanceError`;
- pickled and copied by calling the class with the fields;
- ``dataclasses.fields``, ``asdict``, ``astuple``, ``replace`` and ``is_dataclass`` work,
  and ``inspect.signature`` and ``help()`` show the fields (or the record's ``__init__``):
  what they read is made when first read (:mod:`.record_lazy`), so only a process that asks pays.
"""

from __future__ import annotations

# Not typing.TYPE_CHECKING: importing typing would cost the hook more than this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import Field
    from inspect import Signature
    from typing import Any, ClassVar

    # Type checkers then see each record's __init__ as a frozen dataclass's.
    from typing_extensions import Self, dataclass_transform
else:

    def dataclass_transform(**options: object) -> object:
        return lambda cls: cls


def frozen_error(name: str, action: str = "assign to") -> AttributeError:
    """The error a frozen dataclass raises when a field is assigned (or deleted)."""
    from dataclasses import FrozenInstanceError  # only on a mistake: dataclasses is slow

    return FrozenInstanceError(f"cannot {action} field {name!r}")


class _ReadFirst:
    """An attribute of every record class, made by ``record_lazy.<maker>`` when first read."""

    def __init__(self, maker: str) -> None:
        self.maker = maker

    def __get__(self, instance: object, owner: type[Record]) -> Any:
        from . import record_lazy

        return getattr(record_lazy, self.maker)(instance, owner, Record)


_MISSING = object()


@dataclass_transform(frozen_default=True)
class Record:
    """Base of an immutable record. A subclass annotates its fields in order, every
    class annotation being a field, a field with a default after those without. One
    that checks or converts its arguments writes its own ``__init__``, which stores the
    fields with :meth:`_init`. A subclass of a record either annotates nothing, and keeps
    its base's fields (a kind of the same record, unequal to the base's), or subclasses
    ``Record`` itself.
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()  # the names of the fields, in order
    _defaults: ClassVar[dict[str, object]] = {}
    if TYPE_CHECKING:
        # What the type checker knows of a dataclass: dataclasses.replace() accepts one.
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
        __signature__: ClassVar[Signature | None]
    else:
        __dataclass_fields__ = _ReadFirst("dataclass_fields")
        __signature__ = _ReadFirst("signature")

    def __init_subclass__(cls) -> None:
        # Its own annotations only (Python >= 3.10), or else the fields of its base.
        own = tuple(cls.__annotations__)
        if own:
            cls._fields = own
            # Kept aside, not as class attributes: an instance holds every field itself,
            # and dataclasses.fields() sees no default it would refuse (a mappingproxy).
            cls._defaults = {name: cls.__dict__[name] for name in own if name in cls.__dict__}
            for name in cls._defaults:
                delattr(cls, name)
        cls.__match_args__ = cls._fields  # type: ignore[attr-defined,misc]  # `case` patterns

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self).__qualname__
        if len(args) > len(self._fields):
            raise TypeError(f"{cls}() takes {len(self._fields)} fields, got {len(args)}")
        values = dict(zip(self._fields, args, strict=False))  # the rest by name, or defaults
        for name, value in kwargs.items():
            if name not in self._fields or name in values:
                raise TypeError(f"{cls}() got an unexpected or repeated field {name!r}")
            values[name] = value
        for name in self._fields:
            value = values.get(name, self._defaults.get(name, _MISSING))
            if value is _MISSING:
                raise TypeError(f"{cls}() is missing the field {name!r}")
            object.__setattr__(self, name, value)

    def _init(self, *values: object) -> None:
        """Store ``values`` as the fields, in the order of ``_fields``."""
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        """The fields, in order."""
        return tuple([getattr(self, name) for name in self._fields])

    def _replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied to the named fields (as ``NamedTuple._replace``)."""
        fields = {name: getattr(self, name) for name in self._fields}
        return type(self)(**{**fields, **changes})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record) and other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise frozen_error(name)

    def __delattr__(self, name: str) -> None:
        raise frozen_error(name, "delete")

    def __reduce__(self) -> str | tuple[Any, ...]:  # typed as object's, which a subclass may keep
        return type(self), self._values()
