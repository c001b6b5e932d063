"""The package's records are frozen dataclasses: immutable, compared, hashed and shown by
their fields.  Each is held to the real ``dataclass(frozen=True)`` of its own class body (the
oracle): every one is made by ``dataclass(frozen=True)`` itself, none writes its methods out
(fields, signature, repr, equality, hash, the frozen errors, replace, asdict, pickling), and the
public ones' annotations resolve (``typing.get_type_hints``), as pydantic, cattrs, typeguard and
sphinx-autodoc-typehints need."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import ipaddress
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pyrdmacm.addr import lookup as _addr_lookup
from pyrdmacm import addr, records
from pyrdmacm.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["pyrdmacm.records", "pyrdmacm.records.replies", "pyrdmacm.addr", "pyrdmacm.addr.lookup", "pyrdmacm.precheck.model", "pyrdmacm.devices",
           "pyrdmacm.netlink", "pyrdmacm.netlink.route"]
#: what dataclass adds to a class body, and what a record writes out in its place
MADE = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__dict__", "__weakref__",
        "__dataclass_fields__", "__dataclass_params__", "__match_args__"}


def records_of(name):
    module = importlib.import_module(name)
    names = set(vars(module)) | set(getattr(module, "_LATER", ()))  # records' own load on first use
    out = []
    for attr in sorted(names):
        value = getattr(module, attr)
        if isinstance(value, type) and value.__module__ == name and dataclasses.is_dataclass(value):
            out.append(value)
    return out


ALL = [cls for name in MODULES for cls in records_of(name)]


def reference(cls):
    """The real dataclass(frozen=True) of ``cls``'s own class body."""
    body = {k: v for k, v in vars(cls).items() if k not in MADE}
    if body.get("__doc__") is None:
        body.pop("__doc__", None)
    ref = type(cls.__name__, cls.__bases__, body)
    ref.__qualname__ = cls.__qualname__
    return dataclasses.dataclass(frozen=True)(ref)


def sample(cls, k=0):
    """Field values the class takes (Address checks them, and completes family 0: given here)."""
    if cls is addr.Address:
        return (ipaddress.IPv4Address("10.0.2.%d" % (k + 1)), 7471 + k, 0, 0, addr.AF_INET)
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is dataclasses.MISSING] or fields[:1]
    return tuple("v%d-%s" % (k, f.name) for f in required)


def test_every_record_is_found():
    names = {c.__qualname__ for c in ALL}
    assert {"ConnParam", "QpAttr", "PathRecord", "UdParam", "Address", "HostName", "Prediction", "Device",
            "Route"} <= names
    assert len(ALL) >= 24
    # made by dataclass(frozen=True), every method: none written out by hand
    assert all(c.__dataclass_params__.frozen and c.__dataclass_params__.init and c.__dataclass_params__.eq
               and c.__dataclass_params__.repr for c in ALL)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: "%s.%s" % (c.__module__.split(".")[-1], c.__qualname__))
def test_as_dataclass_frozen(cls):
    ref = reference(cls)
    assert [(f.name, f.type, f.default, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(cls)] == [
        (f.name, f.type, f.default, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(ref)]
    assert cls.__dataclass_params__.frozen
    assert getattr(cls, "__match_args__", None) == getattr(ref, "__match_args__", None)
    assert list(inspect.signature(cls).parameters.values()) == list(inspect.signature(ref).parameters.values())
    assert cls.__doc__ == ref.__doc__
    # made by dataclasses (whose __init__ is named so from 3.10; 3.9's is its factory's local)
    assert cls.__init__.__qualname__ in (cls.__qualname__ + ".__init__", "__create_fn__.<locals>.__init__")
    assert cls.__hash__ is not None

    a, b, c = cls(*sample(cls)), cls(*sample(cls)), cls(*sample(cls, 1))
    ra, rc = ref(*sample(cls)), ref(*sample(cls, 1))
    assert repr(a) == repr(ra) and repr(c) == repr(rc)
    assert (a == b, a == c, a != c, a == ra) == (True, False, True, False)
    assert hash(a) == hash(b) == hash(ra) and hash(c) == hash(rc)
    assert a.__eq__(object()) is NotImplemented
    assert vars(a) == vars(ra)
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
    assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) == a


def test_the_written_out_records_take_what_dataclass_would():
    """Keywords, defaults, and the errors of a wrong call, as dataclass's __init__ gives them."""
    cp = records.ConnParam(qp_num=5, private_data=b"x")
    assert cp == records.ConnParam(5, b"x", 0, 0, 0, 7, 7, 0, 0, (0, 0)) and cp.ece == (0, 0)
    assert dataclasses.replace(cp, retry_count=3).retry_count == 3
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        records.ConnParam(nope=1)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'ip'"):
        addr.Address()  # type: ignore[call-arg]
    a = addr.Address(ipaddress.IPv6Address("fe80::1"), 7471, scope_id=2)
    assert a.family == addr.AF_INET6 and dataclasses.replace(a, port=1).port == 1
    with pytest.raises(UsageError, match="port"):  # replace() checks as the constructor does
        dataclasses.replace(a, port=1 << 16)
    assert {a: 1}[addr.Address(ipaddress.IPv6Address("fe80::1"), 7471, 2)] == 1
    assert a != addr.Address(ipaddress.IPv6Address("fe80::1"), 7471, 3)
    if sys.version_info >= (3, 10):  # a match statement's positional pattern: case Address(ip, port)
        assert addr.Address.__match_args__[:2] == ("ip", "port")
    h = _addr_lookup.HostName("peer", (a.ip,), a.ip)
    assert str(h) == "peer is fe80::1" and json.dumps(dataclasses.asdict(h), default=str)


def test_the_replies_records_are_found_in_records():
    for name in records.__all__:
        value = getattr(records, name)
        if isinstance(value, type):
            assert value.__module__.startswith("pyrdmacm.records") and value.__qualname__ == name
    path = records.PathRecord(*range(2), ipaddress.IPv6Address(1), ipaddress.IPv6Address(2), *range(16), 3)
    assert path.mtu_bytes is None and pickle.loads(pickle.dumps(path)) == path
    assert records.mtu_bytes(3) == records.MTU_BYTES[3] == 1024
    assert "PathRecord" in records.__all__ and set(records.__all__) <= set(dir(records))
    with pytest.raises(AttributeError):
        records.no_such_record
    from pyrdmacm.records import QpAttr

    assert QpAttr is records.QpAttr


def _public_annotated():
    """Every public class and function of pyrdmacm and pyrdmacm.aio, and each class's own methods."""
    import pyrdmacm
    import pyrdmacm.aio as aio

    out = []
    for module, names in ((pyrdmacm, pyrdmacm.__all__), (aio, aio.__all__)):
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                out.append(("%s.%s" % (module.__name__, name), obj))
            if inspect.isclass(obj):
                out.extend(("%s.%s.%s" % (module.__name__, name, k), v) for k, v in vars(obj).items()
                           if inspect.isfunction(v))
    return out


def test_every_public_annotation_resolves():
    """typing.get_type_hints() of every public class, function and method: what pydantic, cattrs,
    typeguard and sphinx-autodoc-typehints call (a name imported only for type checkers is a
    NameError there)."""
    import typing

    found = _public_annotated()
    assert len(found) > 100
    failed = {}
    for name, obj in found:
        try:
            typing.get_type_hints(obj)
        except Exception as e:  # noqa: BLE001 - every failure is reported by name
            failed[name] = repr(e)
    assert not failed, failed
