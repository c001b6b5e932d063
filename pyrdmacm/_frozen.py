"""``@dataclass(frozen=True)``, for less at import.

``dataclass(frozen=True)`` compiles six generated methods per class, one ``exec`` each
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``):
for the two dozen records of the library and the pre-check, most of their modules'
import time.  :func:`frozen` compiles ``__init__`` alone (with dataclass's text: a
record made is one call, as fast as before), and makes the five others as closures over
the field names (``operator.attrgetter`` for the tuple that ``__eq__`` and ``__hash__``
compare, as 3.9-3.12's text does); then ``dataclasses.dataclass`` does the rest (fields,
``__match_args__``, ``__doc__``) and the class is marked as ``dataclass(frozen=True)``
marks it (``__dataclass_params__``), so that ``dataclasses.fields``, ``replace``,
``asdict``, ``is_dataclass`` and pattern matching see a frozen dataclass.
tests/test_frozen.py holds every record of the package to what ``dataclass(frozen=True)``
makes of the same class body.

Modules import :func:`dataclass` at run time and ``dataclasses.dataclass`` for type
checkers (``if TYPE_CHECKING``), so mypy sees the real one.  Only what the package uses
is supported: plain annotated fields, with or without an (immutable) default, and
``__post_init__``; ``field()``, ``InitVar``, ``ClassVar``, dataclass bases and a method
of the six written by hand are refused (use ``dataclasses.dataclass`` for those).
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from reprlib import recursive_repr
from types import MethodType
from typing import Any, Callable, Dict, List, Tuple, Type, TypeVar

__all__ = ["dataclass", "frozen"]

_T = TypeVar("_T")
_MISSING = dataclasses.MISSING


def _methods(cls: type, names: Tuple[str, ...]) -> Tuple[Callable[..., Any], ...]:
    """__repr__, __eq__, __hash__, __setattr__, __delattr__ as dataclass(frozen=True) writes
    them for ``names`` (3.9-3.12's text: fields compared as one tuple), as closures."""
    values = attrgetter(*names) if len(names) > 1 else (lambda o: (getattr(o, names[0]),)) if names else (lambda o: ())
    shown = tuple("%s=" % n for n in names)
    fields = frozenset(names)

    @recursive_repr()
    def __repr__(self: Any) -> str:
        return str(self.__class__.__qualname__) + "(" + ", ".join([k + repr(v) for k, v in zip(shown, values(self))]) + ")"

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in fields:
            raise dataclasses.FrozenInstanceError("cannot assign to field %r" % (name,))
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in fields:
            raise dataclasses.FrozenInstanceError("cannot delete field %r" % (name,))
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]

    return __repr__, __eq__, __hash__, __setattr__, __delattr__


class _LazyInit:
    """A record's ``__init__`` until its first call (or a look at its signature): then it is
    compiled, with dataclass's text (a record made is one call, as fast as dataclass's), and
    takes this one's place in the class.  Most records of a module are never made in a
    given run: their ``__init__`` is never compiled."""

    def __init__(self, cls: type, names: Tuple[str, ...], defaults: Dict[str, Any], post_init: bool) -> None:
        self.cls, self.names, self.defaults, self.post_init = cls, names, defaults, post_init
        self.__name__ = "__init__"
        self.__qualname__ = "%s.__init__" % cls.__qualname__
        self.__module__ = cls.__module__

    def compile(self) -> Callable[..., None]:
        """The class's real ``__init__`` (compiled and put in place the first time)."""
        init: Any = self.cls.__dict__.get("__init__")
        if init is not self:
            return init  # type: ignore[no-any-return]
        names, defaults = self.names, self.defaults
        params = ", ".join(n + ("=__dflt_%s__" % n if n in defaults else "") for n in names)
        body = "".join(" __object_setattr__(self, %r, %s)\n" % (n, n) for n in names)
        if self.post_init:
            body += " self.__post_init__()\n"
        text = "def __init__(self%s%s):\n%s" % (", " if params else "", params, body or " pass\n")
        scope: Dict[str, Any] = {"__dflt_%s__" % n: v for n, v in defaults.items()}
        scope["__name__"] = self.__module__  # the method's __module__, as dataclass's
        scope["__object_setattr__"] = object.__setattr__
        exec(text, scope)
        init = scope["__init__"]
        init.__qualname__ = self.__qualname__
        init.__annotations__ = dict({n: self.cls.__dict__["__annotations__"][n] for n in names}, **{"return": None})
        type.__setattr__(self.cls, "__init__", init)
        return init  # type: ignore[no-any-return]

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.compile()(*args, **kwargs)

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else MethodType(self, obj)

    @property
    def __signature__(self) -> Any:  # what inspect.signature and help() show: the real one's
        import inspect

        return inspect.signature(self.compile())

    def __repr__(self) -> str:
        return "<function %s (compiled on first use)>" % self.__qualname__


def frozen(cls: Type[_T]) -> Type[_T]:
    """``@dataclass(frozen=True)``, for less at import."""
    names: List[str] = []
    defaults: Dict[str, Any] = {}
    for name, kind in cls.__dict__.get("__annotations__", {}).items():
        text = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
        if text.startswith(("ClassVar", "InitVar", "dataclasses.", "typing.ClassVar")):
            raise TypeError("%s.%s: @frozen takes plain fields only" % (cls.__name__, name))
        value = cls.__dict__.get(name, _MISSING)
        if isinstance(value, dataclasses.Field):
            raise TypeError("%s.%s: @frozen takes no field(): use dataclass" % (cls.__name__, name))
        if value is not _MISSING:
            defaults[name] = value
        elif defaults:
            raise TypeError("non-default argument %r follows default argument" % name)
        names.append(name)
    if any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        raise TypeError("%s: @frozen does not take dataclass bases" % cls.__name__)
    stub = _LazyInit(cls, tuple(names), defaults, hasattr(cls, "__post_init__"))
    for fn in (stub,) + _methods(cls, tuple(names)):
        if fn.__name__ in cls.__dict__:
            raise TypeError("%s defines %s: use dataclass" % (cls.__name__, fn.__name__))
        fn.__qualname__ = "%s.%s" % (cls.__qualname__, fn.__name__)
        setattr(cls, fn.__name__, fn)
    out = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    p = out.__dataclass_params__  # type: ignore[attr-defined]
    p.init = p.repr = p.eq = p.frozen = True
    return out


_frozen = frozen


def dataclass(*, frozen: bool = False) -> Callable[[Type[_T]], Type[_T]]:
    """``dataclass(frozen=True)`` is :func:`frozen`; anything else is ``dataclasses.dataclass``."""
    return _frozen if frozen else dataclasses.dataclass()
