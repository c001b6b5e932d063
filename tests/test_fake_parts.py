"""The fake kernel's shape: :class:`~pyrdmacm.testing.FakeKernel` is made of parts, not of
mixins (one class, no base but ``object``), a :class:`~pyrdmacm.testing.FabricKernel` is a
FakeKernel with another id part, and every command of the ucma table reaches a handler of
one of the parts."""

from __future__ import annotations

import errno
from typing import Iterator

import pytest

from pyrdmacm import abi
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.testing import FabricKernel, FakeFabric, FakeKernel, FakeNet
from pyrdmacm.testing.fabric_ids import FabricIdCommands
from pyrdmacm.testing.fake_commands import IdCommands
from pyrdmacm.testing.fake_file import UcmaFile
from pyrdmacm.testing.fake_multicast import MulticastCommands
from pyrdmacm.testing.fake_options import OptionCommands

C = abi.UserCmCmd

#: what each command written with no body at all is answered with: the struct is short (EFAULT),
#: unless the command checks something before it reads it -- CONNECT and ACCEPT their body's
#: length (EINVAL), INIT_QP_ATTR and LEAVE_MCAST the reply's size (ENOSPC) -- and GET_OPTION,
#: which is in the kernel's table but not implemented (ENOSYS)
EMPTY_BODY = {**{c: errno.EFAULT for c in C}, C.CONNECT: errno.EINVAL, C.ACCEPT: errno.EINVAL,
              C.INIT_QP_ATTR: errno.ENOSPC, C.LEAVE_MCAST: errno.ENOSPC, C.GET_OPTION: errno.ENOSYS}


def test_each_class_stands_alone_or_on_the_one_it_extends() -> None:
    assert FakeKernel.__bases__ == (object,)
    assert FabricKernel.__bases__ == (FakeKernel,)
    assert FabricIdCommands.__bases__ == (IdCommands,)
    for part in (UcmaFile, IdCommands, OptionCommands, MulticastCommands):
        assert part.__bases__ == (object,), part


@pytest.fixture(params=["alone", "fabric"])
def kernel(request: pytest.FixtureRequest) -> Iterator[FakeKernel]:
    if request.param == "alone":
        k = FakeKernel(FakeNet())
        yield k
        k.close()
    else:
        with FakeFabric() as fabric:
            yield fabric.host("10.9.0.1")()


@pytest.mark.parametrize("cmd", list(C), ids=lambda c: c.name)
def test_every_command_reaches_its_handler(kernel: FakeKernel, cmd: abi.UserCmCmd) -> None:
    header = CODECS["rdma_ucm_cmd_hdr"].pack_dict({"cmd": int(cmd), "in": 0, "out": 0})
    with pytest.raises(OSError) as exc:
        kernel.write(header)
    assert exc.value.errno == EMPTY_BODY[cmd]
    # every command but GET_OPTION gets past ucma_write's checks, into the log
    assert [c for c, *_ in kernel.commands] == ([] if cmd is C.GET_OPTION else [cmd])


def test_a_net_of_ones_own_addresses_routes_from_them():
    """The README's first example on one's own addresses: FakeNet(local=...) alone makes the
    routing tables pick a source of the host's own (it kept 10.0.0.1, and the resolution
    failed with ENODEV and no hint); a default source that is not local is refused, naming it."""
    from pyrdmacm import EventChannel
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm.testing import FakeDevice

    net = FakeNet(local={"10.0.2.15": FakeDevice("rxe0")}, peers={"10.0.2.2"})
    assert net.default_src == {4: "10.0.2.15"}
    with EventChannel(FakeKernel(net)) as ch:
        cm = ch.create_id()
        cm.resolve_addr("10.0.2.2", timeout_ms=2000)
        ev = ch.get_event(5)
        assert ev is not None and (ev.event, ev.status) == (E.ADDR_RESOLVED, 0)
        ev.ack()
        assert str(cm.local_addr.ip) == "10.0.2.15" and cm.device is not None and cm.device.name == "rxe0"
    with pytest.raises(ValueError, match=r"default_src\[4\] '10.0.0.9' is no local address \(local: 10.0.2.15\)"):
        FakeNet(local={"10.0.2.15": FakeDevice()}, default_src={4: "10.0.0.9"})


def test_the_commands_written_are_named_records_that_decode():
    from pyrdmacm import EventChannel
    from pyrdmacm.testing import Command

    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        cm = ch.create_id()
        cm.resolve_addr("10.0.0.2", timeout_ms=1500)
        ch.get_event(5).ack()
    create, resolve, get = kernel.commands[:3]
    assert all(isinstance(c, Command) for c in kernel.commands)
    assert (create.cmd, resolve.cmd, get.cmd) == (C.CREATE_ID, C.RESOLVE_ADDR, C.GET_EVENT)
    assert resolve.in_size == len(resolve.body) and resolve.out_size == 0
    assert resolve.fields["dst_addr"] == "10.0.0.2" and resolve.fields["timeout_ms"] == 1500
    assert resolve.fields["id"] == cm.handle and create.fields["uid"] == cm.uid
    cmd, size_in, size_out, body = resolve  # still the tuple it was
    assert (cmd, size_in, size_out, body) == tuple(resolve)
