"""The package's records are frozen dataclasses: immutable, compared, hashed and shown by
their fields.  Each is held to the real ``dataclass(frozen=True)`` of its own class body (the
oracle): those no start-up path defines are one, and those the library's import and
``pyrdmacm route`` define write their methods out (pyrdmacm._record), which must come to the
same (fields, signature, repr, equality, hash, the frozen errors, replace, asdict, pickling)."""

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

from pyrdmacm import _addr_lookup, addr, records
from pyrdmacm._record import Record
from pyrdmacm.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["pyrdmacm.records", "pyrdmacm.addr", "pyrdmacm._addr_lookup", "pyrdmacm.precheck.model", "pyrdmacm.devices",
           "pyrdmacm.netlink", "pyrdmacm._netlink_route"]
#: what dataclass adds to a class body, and what a record writes out in its place
MADE = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__dict__", "__weakref__",
        "__dataclass_fields__", "__dataclass_params__", "__match_args__", "_values"}
#: the records whose methods are written out (Record subclasses, dataclass(init=False, repr=False, eq=False))
WRITTEN_OUT = {"ConnParam", "Address", "HostName", "Candidate", "IpoibStatus", "Missing", "Prediction"}


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
    ref = type(cls.__name__, tuple(b for b in cls.__bases__ if b is not Record) or (object,), body)
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
    assert {c.__name__ for c in ALL if issubclass(c, Record)} == WRITTEN_OUT
    assert all(not c.__dataclass_params__.init for c in ALL if issubclass(c, Record))


@pytest.mark.parametrize("cls", ALL, ids=lambda c: "%s.%s" % (c.__module__.split(".")[-1], c.__qualname__))
def test_as_dataclass_frozen(cls):
    ref = reference(cls)
    assert [(f.name, f.type, f.default, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(cls)] == [
        (f.name, f.type, f.default, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(ref)]
    assert cls.__dataclass_params__.frozen or issubclass(cls, Record)  # a Record refuses changes itself
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


def test_the_later_records_are_records_own():
    for name in records._LATER:
        value = getattr(records, name)
        if isinstance(value, type):
            assert value.__module__ == "pyrdmacm.records" and value.__qualname__ == name
    path = records.PathRecord(*range(2), ipaddress.IPv6Address(1), ipaddress.IPv6Address(2), *range(16), 3)
    assert path.mtu_bytes is None and pickle.loads(pickle.dumps(path)) == path
    assert records.mtu_bytes(3) == records.MTU_BYTES[3] == 1024
    assert "PathRecord" in records.__all__ and set(records.__all__) <= set(dir(records)) | records._LATER
    with pytest.raises(AttributeError):
        records.no_such_record
    from pyrdmacm.records import QpAttr  # a from-import finds them too

    assert QpAttr is records.QpAttr


def test_records_alone_leaves_the_later_ones():
    out = subprocess.run([sys.executable, "-c", "import sys, pyrdmacm.records as r; r.ConnParam(); "
                          "print('pyrdmacm._records_later' in sys.modules)"],
                         cwd=str(ROOT), capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]
