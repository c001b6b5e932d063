"""One end's view of the data path, as a transport on this host will program its QP: read
from a resolved id (where the route landed, its path record, the port and its GID table)
and, once the peer answered, from INIT_QP_ATTR.  What `ping` prints for each attempt and
`mesh` keeps in each cell; the same keys in both, so that two ends' views compare.

Nothing here sends anything: each read is one query of the id (QUERY_ROUTE, QUERY PATH,
INIT_QP_ATTR for RTR and RTS) and the devices as read once by the caller.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Dict, Iterable, List, Tuple

from ..addr.text import ip_text

#: (device, port, GID) -> (GID table index, GID type)
GidEntries = Dict[Tuple[str, int, Any], Tuple[int, str]]

_LINK_LOCAL = ipaddress.IPv6Network("fe80::/10")


def gid_entries(devs: Iterable[Any]) -> GidEntries:
    """(device, port, GID) -> the GID table's index and type to report for it: the port's
    default GID type first (configfs ``default_roce_mode`` where set, else RoCE v2, as
    rdma_cm's default is), then the lowest index (built once a run: a Soft-RoCE port's table
    is 1,024 entries)."""
    out: GidEntries = {}
    for d in devs:
        for p in d.ports:
            first = p.roce_mode.value if p.roce_mode is not None else "RoCE v2"
            for g in p.gids:
                key, mine = (d.name, p.number, g.gid), (g.index, g.type.value)
                have = out.get(key)
                if have is None or (mine[1] != first, mine[0]) < (have[1] != first, have[0]):
                    out[key] = mine
    return out


def where(cm: Any, devs: List[Any], gids: GidEntries) -> Dict[str, Any]:
    """Where a resolved id's route landed and the path its data will take (QUERY_ROUTE and
    QUERY PATH): ``device``, ``port``, ``sgid``, ``dgid``, ``gid_index``, ``gid_type`` and
    ``path``, a dict of what the transport programs from it: ``mtu`` (the path record's,
    bytes), ``port_mtu`` (the port's active MTU: where the driver does not show it, a RoCE
    port's as the kernel derives it from its netdev's, :func:`pyrdmacm.devices.roce_path_mtu`)
    and ``netdev_mtu`` (a RoCE port's netdev),
    ``link_local`` (the source GID is fe80::/10), ``tclass``, ``sl``, ``hop_limit``,
    ``flow_label``, ``pkey``.  A value the kernel or the host does not tell is None."""

    r = cm.query_route(devices=devs)
    name = r.device.name if r.device else None
    sgid, dgid = r.sgid, r.dgid
    entry = gids.get((name or "", r.port_num, sgid))
    index, kind = entry if entry is not None else (None, None)
    port = next((d.port(r.port_num) for d in devs if d.name == name), None)
    path: Dict[str, Any] = {
        "mtu": None, "port_mtu": (port.active_mtu or port.path_mtu) if port is not None else None,
        "netdev_mtu": port.netdev_mtu if port is not None else None,
        "link_local": sgid in _LINK_LOCAL if sgid is not None else None,
        "tclass": None, "sl": None, "hop_limit": None, "flow_label": None, "pkey": r.pkey}
    records = cm.query_path() if r.num_paths else []
    if records:
        p = records[0]
        path.update(mtu=p.mtu_bytes, tclass=p.traffic_class, sl=p.sl, hop_limit=p.hop_limit,
                    flow_label=p.flow_label, pkey=p.pkey)
    return {"device": name, "port": r.port_num, "sgid": ip_text(sgid) if sgid is not None else None,
            "dgid": ip_text(dgid) if dgid is not None else None, "gid_index": index, "gid_type": kind,
            "path": path}


def qp_view(cm: Any) -> Dict[str, Any]:
    """What a connected QP would be given at RTR and RTS (INIT_QP_ATTR, once the peer's REP or
    REQ is in): ``path_mtu`` (bytes), ``sgid_index``, ``tclass``, ``hop_limit``, ``sl``,
    ``flow_label`` (the address vector), ``timeout``, ``retry_cnt``,
    ``rnr_retry``, ``min_rnr_timer``, ``max_dest_rd_atomic`` (responder resources),
    ``max_rd_atomic`` (initiator depth)."""
    from ..abi import QpState
    from ..records import mtu_bytes

    rtr = cm.init_qp_attr(QpState.RTR)
    rts = cm.init_qp_attr(QpState.RTS)
    ah = rtr.ah_attr
    return {"path_mtu": mtu_bytes(rtr.path_mtu), "sgid_index": ah.sgid_index, "tclass": ah.traffic_class,
            "hop_limit": ah.hop_limit, "sl": ah.sl, "flow_label": ah.flow_label,
            "timeout": rts.timeout, "retry_cnt": rts.retry_cnt, "rnr_retry": rts.rnr_retry,
            "min_rnr_timer": rtr.min_rnr_timer, "max_dest_rd_atomic": rtr.max_dest_rd_atomic,
            "max_rd_atomic": rts.max_rd_atomic}


def _n(v: Any, fmt: str = "%s") -> str:
    return "?" if v is None else fmt % v


def path_text(w: Dict[str, Any]) -> str:
    """One line of :func:`where`'s answer: ``RoCE v2 GID 1 ::ffff:10.9.0.2, MTU 1024 (port
    1024, netdev 1500), tclass 0, SL 0, hop limit 64, flow label 0x0, pkey 0xffff`` (what is
    not known here left out)."""
    p = w["path"]
    gid = "GID %s" % (w["sgid"] or "?")
    if w["gid_index"] is not None:
        gid = "%s GID %d %s" % (w["gid_type"], w["gid_index"], w["sgid"])
    if p["link_local"]:
        gid += " (link-local)"
    port = ["port %d" % p["port_mtu"]] if p["port_mtu"] is not None else []
    port += ["netdev %d" % p["netdev_mtu"]] if p["netdev_mtu"] is not None else []
    mtu = "MTU %s%s" % (_n(p["mtu"]), " (%s)" % ", ".join(port) if port else "")
    return "%s, %s, tclass %s, SL %s, hop limit %s, flow label %s, pkey %s" % (
        gid, mtu, _n(p["tclass"]), _n(p["sl"]), _n(p["hop_limit"]), _n(p["flow_label"], "%#x"),
        _n(p["pkey"], "%#06x"))


def qp_text(q: Dict[str, Any]) -> str:
    """One line of :func:`qp_view`'s answer, as the QP's RTR and RTS would be set."""
    return ("path MTU %s, sgid index %s, tclass %s, hop limit %s, SL %s, timeout %s, retry %s, RNR retry %s, "
            "responder resources %s, initiator depth %s" % (
                _n(q["path_mtu"]), _n(q["sgid_index"]), _n(q["tclass"]), _n(q["hop_limit"]), _n(q["sl"]),
                _n(q["timeout"]), _n(q["retry_cnt"]), _n(q["rnr_retry"]), _n(q["max_dest_rd_atomic"]),
                _n(q["max_rd_atomic"])))


# -- both ends: what an identifying listener tells of its own view in its REP (within the
# REP's 196 bytes of private data, as short words after its host, rail and address), and the
# mismatches between two views

#: a word's key in the REP -> (the view's part, the key there); one table both ways
WORDS: Dict[str, Tuple[str, str]] = {
    "gi": ("where", "gid_index"), "gt": ("where", "gid_type"), "ll": ("path", "link_local"),
    "mtu": ("path", "mtu"), "pm": ("path", "port_mtu"), "nm": ("path", "netdev_mtu"), "tc": ("path", "tclass"),
    "sl": ("path", "sl"), "pk": ("path", "pkey"), "qm": ("qp", "path_mtu"), "qg": ("qp", "sgid_index"),
}
_GID_TYPES = {"IB": "ib", "RoCE v1": "v1", "RoCE v2": "v2"}


def view_words(w: Dict[str, Any], qp: Dict[str, Any]) -> List[str]:
    """A view (:func:`where` and :func:`qp_view`'s answers) as the REP's words: ``gi=1 gt=v2
    ll=0 mtu=1024 pm=1024 nm=1500 tc=0 sl=0 pk=ffff qm=1024 qg=1``; what is not known is
    left out."""
    parts = {"where": w, "path": w.get("path") or {}, "qp": qp}
    out = []
    for key, (part, name) in WORDS.items():
        v = parts[part].get(name)
        if v is None:
            continue
        if name == "gid_type":
            v = _GID_TYPES.get(v, "?")
        elif name == "pkey":
            v = "%x" % v
        elif isinstance(v, bool):
            v = int(v)
        out.append("%s=%s" % (key, v))
    return out


def view_of_words(words: Dict[str, str]) -> Dict[str, Any]:
    """The far end's view from its REP's words (:func:`view_words`), flat: ``gid_index``,
    ``gid_type``, ``link_local``, ``mtu``, ``port_mtu``, ``netdev_mtu``, ``tclass``, ``sl``,
    ``pkey``, ``qp_path_mtu``, ``qp_sgid_index``; a word that does not parse is left out."""
    types = {v: k for k, v in _GID_TYPES.items()}
    out: Dict[str, Any] = {}
    for key, (part, name) in WORDS.items():
        text = words.get(key)
        if text is None:
            continue
        flat = "qp_" + name if part == "qp" else name
        if name == "gid_type":
            if text in types:
                out[flat] = types[text]
            continue
        try:
            v = int(text, 16) if name == "pkey" else int(text)
        except ValueError:
            continue
        out[flat] = bool(v) if name == "link_local" else v
    return out


def flat_view(w: Dict[str, Any], qp: Dict[str, Any]) -> Dict[str, Any]:
    """This end's view in :func:`view_of_words`' keys, to compare with the far end's."""
    return view_of_words(dict(word.split("=", 1) for word in view_words(w, qp)))


def mismatches(here: Dict[str, Any], there: Dict[str, Any], names: Tuple[str, str] = ("here", "there")
               ) -> List[str]:
    """What differs between two ends' views (:func:`flat_view` / :func:`view_of_words`),
    each in words (``path MTU 1024 here, 4096 there``; ``names`` say where each end is), and
    what is wrong at one end alone (a link-local source GID, a QP path MTU above the port's):
    the causes a connection that the CM made then fails on, late, with retry-exceeded errors."""
    out = []

    def both(key: str, what: str) -> None:
        a, b = here.get(key), there.get(key)
        if a is not None and b is not None and a != b:
            out.append("%s %s %s, %s %s" % (what, a, names[0], b, names[1]))

    both("gid_type", "GID type")
    both("mtu", "path MTU")
    both("port_mtu", "port MTU")
    both("qp_path_mtu", "the QP's path MTU")
    both("tclass", "traffic class")
    both("sl", "SL")
    both("pkey", "pkey")
    for end, v in zip(names, (here, there)):
        if v.get("link_local"):
            out.append("the source GID is link-local %s (index %s): it routes nowhere past the link"
                       % (end, v.get("gid_index", "?")))
        qm, pm = v.get("qp_path_mtu"), v.get("port_mtu")
        if qm is not None and pm is not None and qm > pm:
            out.append("the QP's path MTU %d is larger than the port's %d %s: its full-size packets do not fit that port's MTU"
                       % (qm, pm, end))
    return out


def there_text(v: Dict[str, Any]) -> str:
    """The far end's view (:func:`view_of_words`) on one line, as :func:`path_text` writes
    this end's: ``RoCE v2 GID 1, MTU 1024 (port 1024, netdev 1500), tclass 0, SL 0, pkey
    0xffff; its QP: path MTU 1024, sgid index 1``."""
    gid = "%s GID %s%s" % (v.get("gid_type", "GID type ?"), _n(v.get("gid_index")),
                           " (link-local)" if v.get("link_local") else "")
    port = ["port %d" % v["port_mtu"]] if v.get("port_mtu") is not None else []
    port += ["netdev %d" % v["netdev_mtu"]] if v.get("netdev_mtu") is not None else []
    text = "%s, MTU %s%s, tclass %s, SL %s, pkey %s" % (gid, _n(v.get("mtu")), " (%s)" % ", ".join(port) if port else "",
                                                      _n(v.get("tclass")), _n(v.get("sl")), _n(v.get("pkey"), "%#06x"))
    if "qp_path_mtu" in v or "qp_sgid_index" in v:
        text += "; its QP: path MTU %s, sgid index %s" % (_n(v.get("qp_path_mtu")), _n(v.get("qp_sgid_index")))
    return text
