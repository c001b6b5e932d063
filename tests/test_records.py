"""pyrdmacm._frozen makes what dataclass(frozen=True) makes: every record of the package,
compared with the real dataclass of the same class body (fields, parameters, signature,
doc, repr, equality, hash, the frozen errors, replace, asdict, pattern matching)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import ipaddress
import pickle
import sys

import pytest

from pyrdmacm import _frozen

MODULES = ["pyrdmacm.records", "pyrdmacm.addr", "pyrdmacm.precheck", "pyrdmacm.devices", "pyrdmacm.netlink"]
GENERATED = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__dict__", "__weakref__",
             "__dataclass_fields__", "__dataclass_params__", "__match_args__"}


def records():
    out = []
    for name in MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == name and dataclasses.is_dataclass(value):
                out.append(value)
    return out


def reference(cls):
    """The real dataclass(frozen=True) of ``cls``'s own class body."""
    body = {k: v for k, v in vars(cls).items() if k not in GENERATED}
    if body.get("__doc__") is None:
        body.pop("__doc__", None)
    ref = type(cls.__name__, cls.__bases__, body)
    ref.__qualname__ = cls.__qualname__
    return dataclasses.dataclass(frozen=True)(ref)


def params(cls):
    p = cls.__dataclass_params__
    return {k: getattr(p, k) for k in p.__slots__} if hasattr(p, "__slots__") else repr(p)


def sample(cls, k=0):
    """Field values the class takes (its __post_init__ checks some)."""
    if cls.__name__ == "Address" and cls.__module__ == "pyrdmacm.addr":
        return (ipaddress.IPv4Address("10.0.2.%d" % (k + 1)), 7471 + k)
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is dataclasses.MISSING] or fields[:1]
    return tuple("v%d-%s" % (k, f.name) for f in required)


ALL = records()


def test_every_record_is_found():
    names = {c.__qualname__ for c in ALL}
    assert {"ConnParam", "QpAttr", "PathRecord", "Address", "Prediction", "Device", "Route"} <= names
    assert len(ALL) >= 24


@pytest.mark.parametrize("cls", ALL, ids=lambda c: "%s.%s" % (c.__module__.split(".")[-1], c.__qualname__))
def test_as_dataclass_frozen(cls):
    ref = reference(cls)
    assert [(f.name, f.type, f.default, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(cls)] == [
        (f.name, f.type, f.default, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(ref)]
    assert params(cls) == params(ref)
    assert getattr(cls, "__match_args__", None) == getattr(ref, "__match_args__", None)
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert cls.__doc__ == ref.__doc__
    assert cls.__init__.__qualname__ == cls.__qualname__ + ".__init__"
    if sys.version_info >= (3, 10):  # 3.9's dataclass names it __create_fn__.<locals>.__init__
        assert ref.__init__.__qualname__ == cls.__init__.__qualname__
    assert cls.__hash__ is not None

    a, b, c = cls(*sample(cls)), cls(*sample(cls)), cls(*sample(cls, 1))
    ra, rc = ref(*sample(cls)), ref(*sample(cls, 1))
    assert repr(a) == repr(ra) and repr(c) == repr(rc)
    assert (a == b, a == c, a != c, a == ra) == (True, False, True, False)
    assert hash(a) == hash(b) == hash(ra) and hash(c) == hash(rc)
    assert a.__eq__(object()) is NotImplemented
    name = dataclasses.fields(cls)[0].name
    for target in (a, ra):
        with pytest.raises(dataclasses.FrozenInstanceError) as e1:
            setattr(target, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError) as e2:
            delattr(target, name)
        with pytest.raises(dataclasses.FrozenInstanceError) as e3:
            target.not_a_field = 1
        assert (str(e1.value), str(e2.value), str(e3.value)) == (
            "cannot assign to field %r" % name, "cannot delete field %r" % name, "cannot assign to field 'not_a_field'")
    assert dataclasses.replace(a) == a and dataclasses.asdict(a) == dataclasses.asdict(ra)
    assert pickle.loads(pickle.dumps(a)) == a


def test_subclasses_and_recursion():
    @_frozen.dataclass(frozen=True)
    class Box:
        item: object
        tag: int = 0

    @dataclasses.dataclass(frozen=True)
    class Labelled(Box):  # a frozen dataclass may subclass it, and is frozen
        label: str = ""

    x = Labelled(1, 2, "x")
    assert repr(x) == "test_subclasses_and_recursion.<locals>.Labelled(item=1, tag=2, label='x')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.tag = 3
    with pytest.raises(TypeError, match="non-frozen"):
        @dataclasses.dataclass
        class Loose(Box):
            pass
    lst = []
    b = Box(lst)
    lst.append(b)
    assert repr(b) == "test_subclasses_and_recursion.<locals>.Box(item=[...], tag=0)"
    if sys.version_info >= (3, 10):
        assert Box.__match_args__ == ("item", "tag")


def test_refuses_what_it_does_not_write():
    with pytest.raises(TypeError, match="field"):
        @_frozen.dataclass(frozen=True)
        class WithField:
            x: list = dataclasses.field(default_factory=list)
    with pytest.raises(TypeError, match="follows default"):
        @_frozen.dataclass(frozen=True)
        class Order:
            x: int = 0
            y: int
    with pytest.raises(TypeError, match="__repr__"):
        @_frozen.dataclass(frozen=True)
        class OwnRepr:
            x: int

            def __repr__(self):
                return "x"


def test_init_compiled_on_first_use():
    @_frozen.dataclass(frozen=True)
    class Pair:
        """A pair."""

        a: int
        b: int = 2

    @dataclasses.dataclass(frozen=True)
    class Ref:
        """A pair."""

        a: int
        b: int = 2

    assert type(Pair.__dict__["__init__"]).__name__ == "_LazyInit"
    assert Pair(1) == Pair(1, 2) and Pair(a=3).b == 2
    assert inspect.isfunction(Pair.__dict__["__init__"])  # compiled, in place
    errors = []
    for cls in (Pair, Ref):
        with pytest.raises(TypeError) as e:
            cls()
        errors.append(str(e.value).replace("Ref", "Pair"))
    assert errors[0] == errors[1] and errors[0].endswith("missing 1 required positional argument: 'a'")

    @_frozen.dataclass(frozen=True)
    class Unused:
        """Never made."""

        x: int

    assert str(inspect.signature(Unused)) == "(x: 'int') -> None"  # the signature compiles it
    assert inspect.isfunction(Unused.__dict__["__init__"])
