"""The fabric check's records: a rail, a target, and a cell (one rail to one target), with
the outcomes a cell can have and what each means."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

#: outcome -> (the CM path works, what it means); the order is the legend's
OUTCOMES: Dict[str, Tuple[bool, str]] = {
    "established": (True, "a listener accepted: REQ, REP, RTU, then DREQ and DREP"),
    "no-listener": (True, "REJ reason 8 (invalid service id): the whole CM path works, nobody listens on the port"),
    "rejected": (True, "a listener rejected the request (the REJ's reason): the CM path works"),
    "wrong-host": (False, "a listener answered, but it names another host or address than the target: "
                          "the address is answered by the wrong node"),
    "addr-error": (False, "ADDR_ERROR: the address did not resolve (status: why)"),
    "route-error": (False, "ROUTE_ERROR: the route did not resolve (status: why)"),
    "unreachable": (False, "UNREACHABLE: neither a REP nor a REJ came back (the CM's retries ran out)"),
    "refused": (False, "the kernel refused a command at once (its errno)"),
    "timeout": (False, "no answer within the timeout"),
    "no-source": (False, "the rail has no address of the target's family"),
    "not-checked": (False, "not checked: the run was stopped first"),
    "bad-target": (False, "the target cannot be used (a name that does not resolve, an address of no family "
                          "this rail has)"),
}


@dataclass(frozen=True)
class Rail:
    """A local RDMA netdev with an address: where a cell's source comes from."""

    netdev: str
    addresses: Tuple[str, ...]
    device: Optional[str] = None  #: the RDMA device behind it, when one is (None: a rail that cannot work)
    port: Optional[int] = None
    networks: Tuple[str, ...] = ()  #: the subnets of its addresses (``10.1.0.0/24``), for ``same_subnet``
    #: the subnets and the first address of each IP version, parsed once (a run asks for
    #: every rail and target: parsed per pair, they were a fifth of a 1,000-cell run)
    _nets: Tuple[Any, ...] = field(init=False, repr=False, compare=False)
    _sources: Dict[int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        import ipaddress

        sources: Dict[int, str] = {}
        for a in self.addresses:
            sources.setdefault(ipaddress.ip_address(a.split("%")[0]).version, a)
        object.__setattr__(self, "_nets", tuple(ipaddress.ip_network(n) for n in self.networks))
        object.__setattr__(self, "_sources", sources)

    def source(self, version: int) -> Optional[str]:
        """The rail's first address of IP ``version`` (4 or 6), or None."""
        return self._sources.get(version)

    def on_subnet(self, address: Any) -> bool:
        """Whether ``address`` (text, or an ``ipaddress`` address) lies in one of the rail's
        subnets (on its own segment)."""
        if isinstance(address, str):
            import ipaddress

            address = ipaddress.ip_address(address.split("%")[0])
        return any(address in n for n in self._nets)


@dataclass(frozen=True)
class Target:
    """A destination as given (``name``) and the address checked (``address``; None when
    it could not be made: ``error`` says why)."""

    name: str
    address: Optional[str]
    error: Optional[str] = None
    #: the address parsed once (without its zone), None with it
    ip: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        import ipaddress

        object.__setattr__(self, "ip", ipaddress.ip_address(self.address.split("%")[0])
                           if self.address is not None else None)


@dataclass
class Cell:
    """One rail to one target: the outcome, where it went, what each step took."""

    host: str
    rail: str
    target: str
    outcome: str = "not-checked"
    src: Optional[str] = None
    dst: Optional[str] = None
    #: the event's status: a negative errno, or the REJ's reason (REJECTED)
    status: Optional[int] = None
    detail: Optional[str] = None  #: the status by name, or the error, in words
    device: Optional[str] = None
    port: Optional[int] = None
    gid_index: Optional[int] = None
    gid_type: Optional[str] = None
    #: the data path as this end programs it (:func:`pyrdmacm.mesh.path.where`): MTUs, GID
    #: link-local, tclass, SL, hop limit, flow label, pkey; empty before the route resolved
    path: Dict[str, Any] = field(default_factory=dict)
    #: a connected QP's RTR and RTS attributes (:func:`pyrdmacm.mesh.path.qp_view`), once a
    #: listener's REP came: empty otherwise
    qp: Dict[str, Any] = field(default_factory=dict)
    sgid: Optional[str] = None
    dgid: Optional[str] = None
    ms: Dict[str, float] = field(default_factory=dict)  #: each step's time: addr, route, connect, disconnect
    agent: Optional[Dict[str, str]] = None  #: what an identifying listener said it is: host, rail, addr
    #: the identifying listener's own view of the path, from its REP
    #: (:func:`pyrdmacm.mesh.path.view_of_words`): empty from any other far end
    there: Dict[str, Any] = field(default_factory=dict)
    #: what differs between this end's view and ``there`` (:func:`pyrdmacm.mesh.path.mismatches`)
    mismatches: List[str] = field(default_factory=list)
    error: Optional[Dict[str, Any]] = None  #: the one error object, when a command was refused
    why: List[str] = field(default_factory=list)  #: the pre-check's explanation of a failure

    @property
    def ok(self) -> bool:
        """The CM path from the rail to the target works (established, or rejected by the far CM)."""
        return OUTCOMES[self.outcome][0]

    def view(self) -> Dict[str, Any]:
        """This end's view of the data path in the keys a far end's is told in
        (:func:`pyrdmacm.mesh.path.flat_view`), to compare the two."""
        from .path import flat_view

        return flat_view({"gid_index": self.gid_index, "gid_type": self.gid_type, "path": self.path}, self.qp)

    def to_json(self) -> Dict[str, Any]:
        """The cell as a JSON object (its lists and dicts shared, not copied: asdict's deep
        copy was a tenth of a 1,000-cell run's time)."""
        from dataclasses import fields

        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["ok"] = self.ok
        return out

    @classmethod
    def from_json(cls, d: Any) -> "Cell":
        """A cell as :meth:`to_json` wrote it, each field's value checked against the
        field's own annotation above (the one statement of its type); keys it does not know
        are left out (a newer writer's).  ValueError naming the field and what is wrong."""
        if not isinstance(d, dict):
            raise ValueError("\"cell\" is %s, not a JSON object" % shown(d))
        missing = [k for k in ("host", "rail", "target", "outcome") if k not in d]
        if missing:
            raise ValueError("a cell needs %s" % ", ".join(missing))
        hints = _cell_hints()
        kept = {}
        for k, v in d.items():
            hint = hints.get(k)
            if hint is None:
                continue
            if not _conforms(v, hint):
                raise ValueError("field %r is %s, not %s" % (k, shown(v), _described(hint)))
            kept[k] = v
        if kept["outcome"] not in OUTCOMES:
            raise ValueError("unknown outcome %s (known: %s)" % (shown(kept["outcome"]), ", ".join(OUTCOMES)))
        return cls(**kept)


_HINTS: Dict[str, Any] = {}


def _cell_hints() -> Dict[str, Any]:
    """Cell's fields and their types, resolved once."""
    if not _HINTS:
        import typing

        _HINTS.update(typing.get_type_hints(Cell))
    return _HINTS


def _conforms(v: Any, hint: Any) -> bool:
    """Whether the JSON value ``v`` has the type ``hint`` (str, int, float, Any, Optional,
    List[X], Dict[str, X]: what a cell's fields use).  A bool is no number here."""
    import typing

    if hint is Any:
        return True
    if hint is float:
        return v.__class__ is int or v.__class__ is float
    if hint in (str, int, type(None)):
        return v.__class__ is hint
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return any(_conforms(v, a) for a in args)
    if origin is list:
        return v.__class__ is list and all(_conforms(x, args[0]) for x in v)
    if origin is dict:
        return v.__class__ is dict and all(_conforms(x, args[1]) for x in v.values())
    raise TypeError("a cell's field of type %r: _conforms does not know that type" % (hint,))


def _described(hint: Any) -> str:
    """``hint`` in the words of JSON: "a string", "an integer or null", "a list of strings"."""
    import typing

    words = {str: "a string", int: "an integer", float: "a number", type(None): "null"}
    if hint in words:
        return words[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return " or ".join(_described(a) for a in args)
    if origin is list:
        return "a list of %ss" % _described(args[0]).split(" ", 1)[1]
    if origin is dict and args[1] is not Any:
        return "an object of %ss" % _described(args[1]).split(" ", 1)[1]
    return "an object" if origin is dict else "any value"


def shown(v: Any) -> str:
    """A JSON value as an error message shows it: short, on one line."""
    import json

    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


#: what an identifying listener (``pyrdmacm listen --identify``) puts first in its REP's
#: private data, then ``key=value`` words: host, rail, addr
IDENTIFY_MAGIC = "pyrdmacm-id"


def parse_identity(data: bytes) -> Optional[Dict[str, str]]:
    """What an identifying listener said in its REP (``pyrdmacm-id host=.. rail=.. addr=..``),
    or None when the private data is not that."""
    text = data.rstrip(b"\0").decode("ascii", "replace")
    words = text.split()
    if not words or words[0] != IDENTIFY_MAGIC:
        return None
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


def identity(host: str, rail: str, addr: str, view: Tuple[str, ...] = ()) -> bytes:
    """The REP's private data of an identifying listener: who it is, then ``view``, the words
    of its own view of the path (:func:`pyrdmacm.mesh.path.view_words`), as many whole words
    as the REP's 196 bytes hold."""
    out = ("%s host=%s rail=%s addr=%s" % (IDENTIFY_MAGIC, host, rail, addr)).encode("ascii", "replace")[:196]
    for word in view:
        more = out + b" " + word.encode("ascii", "replace")
        if len(more) > 196:
            break
        out = more
    return out
