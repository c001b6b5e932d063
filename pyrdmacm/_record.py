"""The base of the records whose methods are written out.

``dataclass(frozen=True)`` compiles six methods for each class it makes (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``: about 1 ms a class
on Python 3.11, five million instructions).  The library's import cannot pay that for the
records it defines (:class:`~pyrdmacm.records.ConnParam`, :class:`~pyrdmacm.addr.Address`),
nor the command line its :class:`~pyrdmacm._addr_lookup.HostName`, nor ``pyrdmacm route`` for the pre-check's
(:class:`~pyrdmacm.precheck.Prediction` and its parts).  Those are
``dataclass(init=False, repr=False, eq=False)`` subclasses of :class:`Record`: dataclass only
notes their fields (``dataclasses.fields``, ``replace`` and ``asdict`` work, and so does the
command line's JSON), each writes out its ``__init__``, ``_values`` and ``__repr__``, and
:class:`Record` compares, hashes and refuses changes as a frozen dataclass does.
tests/test_records.py holds each to what ``dataclass(frozen=True)`` makes of its fields.
The other records are plain ``dataclass(frozen=True)``.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any, Tuple

__all__ = ["Record", "set_field"]

#: how a record's ``__init__`` sets a field (``dataclass(frozen=True)``'s does the same)
set_field = object.__setattr__


class Record:
    """Equality and hashing by the fields (``_values()``, in order, for records of the same
    class), and fields that are set once, by ``__init__``: assigning or deleting one raises
    :class:`dataclasses.FrozenInstanceError`."""

    __slots__ = ()

    def _values(self) -> Tuple[Any, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError("cannot assign to field %r" % (name,))

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError("cannot delete field %r" % (name,))
