"""The fake kernel's JOIN_MCAST, JOIN_IP_MCAST and LEAVE_MCAST: memberships with handles of
their own (the machine's ``multicast_table``), MULTICAST_JOIN at once, as a RoCE join needs
no SA (cm-notes.md section 4), under the membership's uid and handle.
"""

from __future__ import annotations

import errno

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..core.device import write_to_address
from ..addr import AF_IB, AF_INET, Address
from .fake_commands import in6
from .fake_file import UcmaFile, next_mc
from .fake_ids import IdContext, Membership, command_fields, kernel_error, sockaddr_or_none, write_reply
from .fake_net import HOP_LIMIT, SGID_INDEX, UDP_QKEY, FakeNet

__all__ = ["MulticastCommands", "ENOTSUPP"]

C = abi.UserCmCmd
E = abi.CmEventType
#: ``-ENOTSUPP``: the kernel-internal errno (524) a write may return as is
ENOTSUPP = 524
_RESP = CODECS["rdma_ucm_create_id_resp"]


class MulticastCommands:
    """Multicast memberships of the ids of one file (ucma_process_join, rdma_join_multicast,
    cma_iboe_join_multicast, ucma_leave_multicast).

    It holds the file (:class:`~pyrdmacm.testing.fake_file.UcmaFile`: its ids, the
    memberships, the event queue MULTICAST_JOIN goes to), the network whose GIDs the groups
    map to (:class:`~pyrdmacm.testing.FakeNet`), ``version``, the kernel whose state rules
    (:mod:`pyrdmacm.kernel_rules`) a join follows, and ``roce_ipv6_multicast`` (False: IPv6 and
    AF_IB groups on RoCE fail with -ENOTSUPP as the kernel's do; True: they join)."""

    def __init__(self, file: UcmaFile, net: FakeNet, *, version: kernel_rules.Version,
                 roce_ipv6_multicast: bool) -> None:
        self._file = file
        self._net = net
        self._version = version
        self._roce_ipv6_multicast = roce_ipv6_multicast

    def join_ip_mcast(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_join_ip_mcast", body)
        a = in6(f["addr"])  # rdma_addr_size_in6: nothing but IPv4 and IPv6 fit
        assert a is not None
        self._join(f["response"], f["uid"], f["id"], a, a.size, int(abi.McJoinFlag.FULLMEMBER), size_out)

    def join_mcast(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_join_mcast", body)
        a = sockaddr_or_none(f["addr"])
        if a is None:  # rdma_addr_size_kss: a family the kernel does not know
            raise kernel_error(errno.EINVAL)
        self._join(f["response"], f["uid"], f["id"], a, f["addr_size"], f["join_flags"], size_out)

    def _join(self, response: int, uid: int, handle: int, group: Address, addr_size: int, flags: int,
              size_out: int) -> None:
        """ucma_process_join: the reply's size, the address's, the flags, then the id."""
        if size_out < _RESP.size:
            raise kernel_error(errno.ENOSPC)
        if addr_size != group.size:
            raise kernel_error(errno.EINVAL)
        if flags not in (abi.McJoinFlag.FULLMEMBER, abi.McJoinFlag.SENDONLY_FULLMEMBER):
            raise kernel_error(errno.EINVAL)
        ctx = self._file.get(handle)
        ctx.check(C.JOIN_MCAST, version=self._version)  # a device, ADDR_BOUND or ADDR_RESOLVED, a UD id
        dev = ctx.dev
        assert dev is not None
        roce = dev.link_layer != "InfiniBand"
        if roce and ctx.loopback:
            raise kernel_error(errno.ENODEV)  # resolved to the any address: no netdev to join on
        if roce and group.family != AF_INET and not self._roce_ipv6_multicast:
            raise kernel_error(ENOTSUPP)  # cma_iboe_join_multicast on RoCEv2: IPv4 groups only
        mc = Membership(next_mc(), handle, uid, group, flags)
        if not response:
            raise kernel_error(errno.EFAULT)
        write_to_address(response, _RESP.pack_dict({"id": mc.id}))
        self._file.mcs[mc.id] = mc
        # RoCE joins without an SA: the event is made at once (cm-notes.md section 4)
        if ctx.uid:
            self._file.push(ctx.handle, self.join_event(ctx, mc), mc=mc.id)

    def join_event(self, ctx: IdContext, mc: Membership) -> bytes:
        """MULTICAST_JOIN as ``cma_make_mc_event`` makes it: under the membership's uid and id,
        the ud arm with QPN 0xFFFFFF, the qkey, the AH to the group's MGID; no private data."""
        dev = ctx.dev
        assert dev is not None
        if dev.link_layer == "InfiniBand":
            # an SA join, modelled as answered at once: the IPoIB mapping of the group (inferred)
            ip = mc.addr.ip
            mgid = ip.packed if ip.version == 6 else (b"\xff\x12\x40\x01\xff\xff" + bytes(6) + ip.packed)
            hop = 0
        else:
            mgid = self._net.gid_of(mc.addr.ip, dev).packed if mc.addr.family != AF_IB else mc.addr.ip.packed
            hop = HOP_LIMIT
        ud = CODECS["rdma_ucm_ud_param"].pack_dict({
            "qp_num": 0xFFFFFF, "qkey": UDP_QKEY, "ah_attr.grh.dgid": mgid, "ah_attr.grh.hop_limit": hop,
            "ah_attr.grh.sgid_index": SGID_INDEX, "ah_attr.is_global": 1, "ah_attr.port_num": dev.port_num})
        return CODECS["rdma_ucm_event_resp"].pack_dict(
            {"uid": mc.uid, "id": mc.id, "event": int(E.MULTICAST_JOIN), "status": 0, "param": ud})

    def leave_mcast(self, body: bytes, size_out: int) -> None:
        if size_out < CODECS["rdma_ucm_destroy_id_resp"].size:
            raise kernel_error(errno.ENOSPC)
        f = command_fields("rdma_ucm_destroy_id", body)  # LEAVE_MCAST's body is DESTROY_ID's
        mc = self._file.mcs.pop(f["id"], None)
        if mc is None:
            if any(f["id"] in other.mcs for other in list(self._file.machine.fds)
                   if other is not self._file and not other.closed):
                raise kernel_error(errno.EINVAL)  # a membership of an id of another fd
            raise kernel_error(errno.ENOENT)
        self._file.take_events(lambda q: q.mc == mc.id)  # ucma_cleanup_mc_events
        write_reply(f["response"], "rdma_ucm_destroy_id_resp", size_out, {"events_reported": mc.reported})
