"""Test tools that pyrdmacm ships, for its own tests and for programs built on it.

* :class:`FakeKernel` (with :class:`FakeNet`, :class:`FakeDevice`): an rdma_cm that
  speaks the real bytes over a pipe, for tests on any machine:
  ``EventChannel(FakeKernel(FakeNet(...)))``; it can be told to queue any event
  (:meth:`~FakeKernel.inject_event`, :meth:`~FakeKernel.incoming_request`) and shows what
  it holds (:attr:`~FakeKernel.ids`, and :attr:`~FakeKernel.commands`: a :class:`Command`
  each, whose ``fields`` decode its body).
* :class:`FakeFabric` (with :class:`FakeHost`, :class:`FabricKernel`): several such
  hosts joined by a fabric, whose kernels carry the IB CM's messages between them
  (connect, accept, reject, disconnect, SIDR) as the real ones do for ids without a QP:
  ``fabric = FakeFabric(); a = fabric.host("10.9.0.1"); EventChannel(a())``.
* :func:`run_conformance`: the checker of the running kernel's rdma_cm contract
  (``pyrdmacm conformance``), as a function that returns its results.

Both fakes answer each command as :mod:`pyrdmacm.kernel_rules` says the kernel does in the
id's state (:class:`pyrdmacm.abi.RdmaCmState`), and move each connection's IB CM id through
:mod:`pyrdmacm.testing._ibcm`'s table (:class:`IbCmState`).
"""

from __future__ import annotations

from ..conformance import CASES, Result
from ..conformance import run as run_conformance
from ._ibcm import IbCmState
from .fabric import CmMessage, FabricKernel, FakeFabric, FakeHost
from .fake import Command, FakeDevice, FakeId, FakeKernel, FakeNet

__all__ = ["Command", "FakeDevice", "FakeId", "FakeKernel", "FakeNet", "FakeFabric", "FakeHost", "FabricKernel", "CmMessage",
           "IbCmState", "run_conformance", "CASES", "Result"]
