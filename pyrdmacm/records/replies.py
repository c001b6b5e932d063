"""What the kernel's replies and events carry, as ``dataclass(frozen=True)`` records: the device,
address and route of an id (QUERY), an IB path and service record, the QP attributes
INIT_QP_ATTR answers, and a datagram id's parameters.  :mod:`pyrdmacm.records` re-exports them.

The one module that imports pyverbs (rdma-core's binding, not a dependency): inside
:meth:`QpAttr.to_pyverbs` and :meth:`AhAttr.to_pyverbs`, when they are called.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

from ..abi import QpAttrMask
from ..addr import Address

__all__ = ["MTU_BYTES", "mtu_bytes", "DeviceRef", "AddrInfo", "RouteInfo", "PathRecord", "ServiceRecord", "AhAttr",
           "UdParam", "QpAttr"]

#: IBTA's MTU code (``enum ib_mtu``) -> bytes
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def mtu_bytes(code: int) -> Optional[int]:
    """The MTU in bytes of an IBTA MTU code (3 -> 1024); None for a code IBTA does not define."""
    return MTU_BYTES.get(code)


@dataclass(frozen=True)
class DeviceRef:
    """The RDMA device an id is bound to, as the kernel named it in QUERY replies.

    ``name`` is None when no device of this host has the index or node GUID the
    kernel gave (a device removed meanwhile, or a sysfs the process cannot read).
    """

    name: Optional[str]
    index: Optional[int]
    node_guid: int

    def __str__(self) -> str:
        return self.name or ("ibdev#%d" % self.index if self.index is not None else "guid %016x" % self.node_guid)


@dataclass(frozen=True)
class AddrInfo:
    """QUERY ADDR's answer: where the id is bound and to what."""

    src: Optional[Address]
    dst: Optional[Address]
    device: Optional[DeviceRef]
    port_num: int
    pkey: int


@dataclass(frozen=True)
class RouteInfo:
    """QUERY_ROUTE's answer: the device and port the id is bound to and its route's first
    path: the GIDs it goes between and their partition key, in one command (an id on no
    device has none of them: ``device`` None, GIDs None)."""

    device: Optional[DeviceRef]
    port_num: int
    sgid: Optional[ipaddress.IPv6Address]
    dgid: Optional[ipaddress.IPv6Address]
    pkey: int
    #: the route's paths: 0 before resolve_route (the GIDs are then those the address
    #: resolution found), 1 or 2
    num_paths: int


@dataclass(frozen=True)
class PathRecord:
    """One IB path record (IBTA SA PathRecord, as QUERY PATH returns it).

    ``mtu``, ``rate`` and ``packet_life_time`` are IBTA codes (``mtu`` 3 is 1024
    bytes: :attr:`mtu_bytes`); ``flags`` are ``IB_PATH_*`` (:class:`pyrdmacm.abi.IbPathFlag`).
    """

    flags: int
    service_id: int
    dgid: ipaddress.IPv6Address
    sgid: ipaddress.IPv6Address
    dlid: int
    slid: int
    raw_traffic: int
    flow_label: int
    hop_limit: int
    traffic_class: int
    reversible: int
    numb_path: int
    pkey: int
    sl: int
    mtu_selector: int
    mtu: int
    rate_selector: int
    rate: int
    packet_life_time_selector: int
    packet_life_time: int
    preference: int

    @property
    def mtu_bytes(self) -> Union[int, None]:
        """The path MTU in bytes (1024 for code 3); None for a code IBTA does not define."""
        return mtu_bytes(self.mtu)


@dataclass(frozen=True)
class ServiceRecord:
    """One IB SA ServiceRecord as QUERY IB_SERVICE returns it (``ib_user_service_rec``,
    Linux 6.17+): the service's id, the GID and pkey that offer it, its lease, key and name."""

    id: int
    gid: ipaddress.IPv6Address
    pkey: int
    lease: int
    key: bytes
    name: str


@dataclass(frozen=True)
class AhAttr:
    """An address handle's attributes (``struct ib_uverbs_ah_attr``): how to reach the peer."""

    dgid: ipaddress.IPv6Address
    flow_label: int
    sgid_index: int
    hop_limit: int
    traffic_class: int
    dlid: int
    sl: int
    src_path_bits: int
    static_rate: int
    is_global: int
    port_num: int

    def to_pyverbs(self) -> Any:
        """This address handle as pyverbs takes it: a ``pyverbs.addr.AHAttr`` (with its
        ``GlobalRoute`` when ``is_global``), for ``pyverbs.addr.AH(pd, attr=...)``: the AH a
        UD QP sends to the peer of a SIDR answer (``event.param.ah``) or to a multicast
        group.  Imports pyverbs now; :class:`~pyrdmacm.UsageError` where it is missing."""
        AHAttr, GID, GlobalRoute = _pyverbs("addr", "AHAttr", "GID", "GlobalRoute")
        gr = None
        if self.is_global:
            gr = GlobalRoute(dgid=GID(self.dgid.exploded), flow_label=self.flow_label, sgid_index=self.sgid_index,
                             hop_limit=self.hop_limit, traffic_class=self.traffic_class)
        return AHAttr(dlid=self.dlid, sl=self.sl, src_path_bits=self.src_path_bits, static_rate=self.static_rate,
                      is_global=self.is_global, port_num=self.port_num, gr=gr)


def _pyverbs(module: str, *names: str) -> Tuple[Any, ...]:
    """``names`` of ``pyverbs.<module>``, imported now (pyverbs is rdma-core's, not a
    dependency); UsageError saying where to get it when this Python has none."""
    import importlib

    from ..errors import UsageError

    try:
        mod = importlib.import_module("pyverbs." + module)
    except ImportError as e:
        raise UsageError("to_pyverbs() needs pyverbs, rdma-core's Python binding, importable by this Python "
                         "(%s): install it (Debian and Ubuntu: python3-pyverbs, for the system python3; "
                         "rdma-core builds it elsewhere) or program the QP from fields()" % e) from None
    return tuple(getattr(mod, name) for name in names)


@dataclass(frozen=True)
class UdParam:
    """The ``ud`` arm of an event of a datagram id: the remote QP and how to reach it.

    ESTABLISHED after a SIDR exchange: the peer's QP number and qkey; MULTICAST_JOIN: the
    group (``qp_num`` 0xFFFFFF, the group's qkey; the address handle's ``dgid`` is the
    multicast GID).
    """

    qp_num: int
    qkey: int
    ah: AhAttr
    private_data: bytes

    @property
    def dgid(self) -> ipaddress.IPv6Address:
        """The address handle's destination GID (``ah.dgid``)."""
        return self.ah.dgid

    @property
    def dlid(self) -> int:
        """The address handle's destination LID (``ah.dlid``; 0 on RoCE)."""
        return self.ah.dlid

    @property
    def sl(self) -> int:
        """The address handle's service level (``ah.sl``)."""
        return self.ah.sl

    @property
    def port_num(self) -> int:
        """The address handle's port (``ah.port_num``)."""
        return self.ah.port_num

    @property
    def is_global(self) -> int:
        """1 when the address handle has a GRH (always on RoCE), ``ah.is_global``."""
        return self.ah.is_global


@dataclass(frozen=True)
class QpAttr:
    """INIT_QP_ATTR's answer (``struct ib_uverbs_qp_attr``): what a QP moving to
    ``qp_state`` would be programmed with.  ``mask`` says which fields are set
    (:class:`~pyrdmacm.abi.QpAttrMask`; the others are zero); :meth:`fields` gives those,
    and :meth:`to_pyverbs` the ``(QPAttr, mask)`` pyverbs' ``qp.modify()`` takes: a QP made
    elsewhere carries the connection's data once given these (docs/pyverbs.md)."""

    mask: QpAttrMask
    qp_state: int
    cur_qp_state: int
    path_mtu: int
    path_mig_state: int
    qkey: int
    rq_psn: int
    sq_psn: int
    dest_qp_num: int
    qp_access_flags: int
    ah_attr: AhAttr
    alt_ah_attr: AhAttr
    pkey_index: int
    alt_pkey_index: int
    en_sqd_async_notify: int
    sq_draining: int
    max_rd_atomic: int
    max_dest_rd_atomic: int
    min_rnr_timer: int
    port_num: int
    timeout: int
    retry_cnt: int
    rnr_retry: int
    alt_port_num: int
    alt_timeout: int

    def fields(self) -> Dict[str, object]:
        """The attributes ``mask`` says are set, by name (``{"qp_state": 2, "dest_qp_num": ...}``)."""
        out: Dict[str, object] = {}
        for bit, names in _mask_fields():
            if self.mask & bit:
                for name in names:
                    out[name] = getattr(self, name)
        return out

    def to_pyverbs(self) -> Tuple[Any, int]:
        """This answer as pyverbs takes it: ``(attr, mask)``, a ``pyverbs.qp.QPAttr`` with the
        fields ``mask`` names (address handles made by :meth:`AhAttr.to_pyverbs`) and the
        mask as an int, for ``qp.modify(attr, mask)``: ``ibv_modify_qp`` with what
        ``rdma_init_qp_attr`` answered, the step librdmacm takes for a QP it owns.  The mask
        bits are ``IBV_QP_*`` (the kernel's ``IB_QP_*`` are the same numbers).

        A connected (RC) QP: INIT, RTR, RTS in turn, each from ``init_qp_attr`` asked after
        the CM exchange began (the kernel's INIT attributes grant remote write, and read
        with responder resources, only then).  A UD QP: INIT from ``init_qp_attr(INIT)``;
        RTR and RTS as librdmacm moves them (the state alone, then the state and
        ``sq_psn``), because the kernel's answer for those states names the port, which no
        QP may be given on the way to RTR (the device refuses it, EINVAL).  docs/pyverbs.md
        has the whole recipe.  Imports pyverbs now; :class:`~pyrdmacm.UsageError` where it
        is missing."""
        (QPAttr,) = _pyverbs("qp", "QPAttr")
        attr = QPAttr(qp_state=self.qp_state, cur_qp_state=self.cur_qp_state)
        for name, value in self.fields().items():
            setattr(attr, name, value.to_pyverbs() if isinstance(value, AhAttr) else value)
        return attr, int(self.mask)


_MASK_FIELDS: Tuple[Tuple[int, Tuple[str, ...]], ...] = ()


def _mask_fields() -> Tuple[Tuple[int, Tuple[str, ...]], ...]:
    """Which QpAttr fields each mask bit covers (made on first use: QpAttrMask loads then)."""
    global _MASK_FIELDS
    if not _MASK_FIELDS:
        from ..abi import QpAttrMask as _M

        _MASK_FIELDS = (
            (_M.STATE, ("qp_state",)),
            (_M.CUR_STATE, ("cur_qp_state",)),
            (_M.EN_SQD_ASYNC_NOTIFY, ("en_sqd_async_notify",)),
            (_M.ACCESS_FLAGS, ("qp_access_flags",)),
            (_M.PKEY_INDEX, ("pkey_index",)),
            (_M.PORT, ("port_num",)),
            (_M.QKEY, ("qkey",)),
            (_M.AV, ("ah_attr",)),
            (_M.PATH_MTU, ("path_mtu",)),
            (_M.TIMEOUT, ("timeout",)),
            (_M.RETRY_CNT, ("retry_cnt",)),
            (_M.RNR_RETRY, ("rnr_retry",)),
            (_M.RQ_PSN, ("rq_psn",)),
            (_M.MAX_QP_RD_ATOMIC, ("max_rd_atomic",)),
            (_M.ALT_PATH, ("alt_ah_attr", "alt_pkey_index", "alt_port_num", "alt_timeout")),
            (_M.MIN_RNR_TIMER, ("min_rnr_timer",)),
            (_M.SQ_PSN, ("sq_psn",)),
            (_M.MAX_DEST_RD_ATOMIC, ("max_dest_rd_atomic",)),
            (_M.PATH_MIG_STATE, ("path_mig_state",)),
            (_M.DEST_QPN, ("dest_qp_num",)),
        )
    return _MASK_FIELDS
