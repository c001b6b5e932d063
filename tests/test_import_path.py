"""What the README's first line imports (not timed: docs/benchmarks.md has the figures from
tools/bench --startup-only): none of what the start-up work took off its path comes back."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: loaded on first use only (construct and random: the earlier start-up work).  The records and
#: the IB enums load with the library now: they are plain dataclasses and enums, and the
#: library's import has no target that a hand-made substitute would be worth (#36)
OFF_THE_PATH = ("construct", "random", "socket", "ctypes", "selectors", "pyrdmacm.abi.structs")


def imported(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         cwd=str(ROOT), capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_the_readme_first_line():
    mods = imported("from pyrdmacm import EventChannel, CmId")
    assert not mods & set(OFF_THE_PATH), sorted(mods & set(OFF_THE_PATH))


def test_the_later_enums_are_abi_s():
    from pyrdmacm import abi, records
    from pyrdmacm.core import events

    for name in abi._LATER:
        value = getattr(abi, name)
        if isinstance(value, type):
            assert value.__module__ == "pyrdmacm.abi" and value.__qualname__ == name
            member = next(iter(value))
            assert pickle.loads(pickle.dumps(member)) is member
    assert abi.REJECT_REASONS == (abi.RejectReason.CONSUMER_DEFINED, abi.RejectReason.VENDOR_OPTION_NOT_SUPPORTED)
    assert set(events.REJECT_HINTS) <= set(abi.RejectReason) and set(events.SIDR_HINTS) <= set(abi.SidrStatus)
    assert all(isinstance(k, abi.RejectReason) for k in events.REJECT_HINTS)
    assert records._mask_fields()[0] == (abi.QpAttrMask.STATE, ("qp_state",))
