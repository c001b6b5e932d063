"""One base class per tier for the behavioural suites.

``suite(cm_behaviour, aio_behaviour)`` is a class with every ``test_*`` function of those
modules as a method; a tier's test module subclasses it (``class TestFakeKernel(suite(...))``)
and provides the ``world`` fixture.  A test added to a suite module is thereby in every tier:
no list to keep, so none can silently drop out of one.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Dict


def suite(*modules: ModuleType) -> type:
    members: Dict[str, Any] = {}
    for module in modules:
        for name, fn in vars(module).items():
            if name.startswith("test_") and callable(fn):
                if name in members:
                    raise AssertionError("%s is in two behavioural suites" % name)
                members[name] = staticmethod(fn)
    return type("Behaviour", (), members)


def suite_tests(*modules: ModuleType) -> set:
    return {n for m in modules for n, fn in vars(m).items() if n.startswith("test_") and callable(fn)}
