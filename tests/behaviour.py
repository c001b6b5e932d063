"""One base class per tier for the behavioural suites.

``suite(*core())`` is a class with every ``test_*`` function of the core's suite modules
(:func:`core`) as a method; a tier's test module subclasses it (``class
TestFakeKernel(suite(*core()))``) and provides the ``world`` fixture.  A test added to a
suite module is thereby in every tier, and a module added to :func:`core` too: one list, so
none can silently drop out of one tier.
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


def core() -> tuple:
    """The core's behavioural suite, by job: ids and addresses, events read many at a time,
    faults and waits, the fd and its threads, asyncio."""
    import aio_behaviour
    import batch_behaviour
    import cm_behaviour
    import fault_behaviour
    import fd_behaviour

    return cm_behaviour, batch_behaviour, fault_behaviour, fd_behaviour, aio_behaviour


def connections() -> tuple:
    """The connection manager's behavioural suite, by job: the handshakes and their
    parameters; requests left unanswered and messages that cross."""
    import conn_behaviour
    import conn_crossing_behaviour

    return conn_behaviour, conn_crossing_behaviour
