"""The connection verbs of an id: connect and establish on the active side, get_request,
accept, reject and notify on the passive side, and disconnect on both.

Their parameters are one :class:`~pyrdmacm.records.ConnParam` (checked by
:func:`pyrdmacm.core.params.conn_param`); the QP number is the caller's (pyrdmacm has no QP: the
kernel carries the number to the peer) or one allocated unique in the process.
:class:`Connections` is the part of :class:`~pyrdmacm.core.cmid.CmId` that holds them; the
general path of a call (``_call``) is CmId's.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, List, Optional, TypeVar, Union

from .. import abi, wire
from .params import check_int, conn_param, private_data_for
from .router import TAKES, Waiter
from ..addr import Address
from ..errors import EventError, KernelError, StateError, UsageError
from .events import Event
from ..records import ConnParam
from .life import Life
from ..state import Call, Kind

__all__ = ["Connections"]

#: the id's own class (CmId), which this module, below it, does not import
_S = TypeVar("_S", bound="Connections")

E = abi.CmEventType
_CMD = wire.COMMAND
_DATAGRAM = Kind.DATAGRAM
_REQ, _REP = ("REQ", "SIDR_REQ"), ("REP", "SIDR_REP")  # the messages of connect and accept's parameters
_CONNECT_CALL, _ESTABLISH_CALL, _DISCONNECT_CALL = Call.CONNECT, Call.ESTABLISH, Call.DISCONNECT
_ESTABLISH, _CONNECT_DEFAULT, _CONNECT = wire.ESTABLISH, wire.CONNECT_DEFAULT, _CMD["CONNECT"]
_DISCONNECT = wire.DISCONNECT


class Connections(Life):
    """The connection verbs (a mixin of :class:`~pyrdmacm.core.cmid.CmId`, which has the rest)."""

    __slots__ = ("_qpn", "_request", "_drep", "_moves")

    channel: Any
    handle: int
    uid: int
    _qpn: int
    _request: Event[Any]
    #: a DREP the old channel's reader could not send during migrate() (see :meth:`_answer_dreq`)
    _drep: List[bool]
    #: how many times migrate() moved the id (unset: never)
    _moves: int

    if TYPE_CHECKING:  # pragma: no cover - CmId's
        @property
        def sync(self) -> bool: ...

        @property
        def kind(self) -> Kind: ...

        def _peer(self) -> Optional[Address]: ...

        def _complete(self, call: Call, command: str, membership: Any = None, **ctx: Any) -> Event[Any]: ...

        def migrate(self, channel: Any) -> int: ...

    def connect(self: _S, param: Union[ConnParam, int, None] = None, private_data: Optional[bytes] = None,
                **fields: Any) -> Optional[Event[_S]]:
        """Connect to the resolved destination (CONNECT): ``rdma_connect``.

        ``param`` is a :class:`~pyrdmacm.records.ConnParam`, or its fields are given as
        keyword arguments (``connect(qp_num=..., private_data=b"...", retry_count=5)``; the
        QP number and private data may come positionally, as before).  Without libibverbs
        there is no QP here: ``qp_num`` names the QP the caller made elsewhere, or None
        for a number allocated unique in the process (:func:`allocate_qp_num`).

        A connected id then gets CONNECT_RESPONSE (the peer's REP; :meth:`establish` sends
        the RTU), REJECTED or UNREACHABLE; a datagram id ESTABLISHED (the SIDR REP) or
        UNREACHABLE.  In sync mode this waits, sends the RTU itself, and returns the event
        (REJECTED ... raise :class:`EventError`).
        """
        p, qp_num = conn_param(param, private_data, fields, _REQ[self._rules.kind is _DATAGRAM],
                               getattr(self._peer(), "family", abi.AF_INET), getattr(self.channel._t, "ece", True))
        cmd = (_CONNECT_DEFAULT(qp_num, self.handle) if p is wire.DEFAULT_CONN_PARAM
               else _CONNECT.encode(*wire.conn_fields(p, qp_num), self.handle, 0, *p.ece))
        self._qpn = qp_num
        self._call(_CONNECT_CALL, cmd, "CONNECT")
        if self.channel._wait_first and self.sync:  # a sync id's channel is its own
            ev = self._complete(Call.CONNECT, "CONNECT", dst=self._peer())
            if ev.event is E.CONNECT_RESPONSE:
                self.establish()
            return ev
        return None

    @property
    def qp_num(self) -> Optional[int]:
        """The QP number this id's connect() or accept() sent (None before either)."""
        return getattr(self, "_qpn", None)

    def establish(self) -> None:
        """Send the RTU after CONNECT_RESPONSE (ACCEPT with the parameters marked invalid):
        ``rdma_establish``.  The peer then gets ESTABLISHED; this side gets no event (its
        state is CONNECTED at once).  Sync mode and the helpers do it themselves."""
        self._call(_ESTABLISH_CALL, _ESTABLISH(self.handle), "ACCEPT")

    # -- connections: the passive side
    @property
    def request(self: _S) -> Optional[Event[_S]]:
        """The CONNECT_REQUEST event that made this id (None for an id made by CREATE_ID)."""
        return getattr(self, "_request", None)

    @property
    def listen_id(self: _S) -> Optional[_S]:
        """The listener a connection request's id came from (None for other ids)."""
        req = self.request
        return req.listen_id if req is not None else None

    def get_request(self: _S, timeout: Optional[float] = None) -> Optional[_S]:
        """``rdma_get_request``: the id of the next connection request to this listener, or
        None when none came within ``timeout`` seconds (None: wait for ever).

        For a sync listener (``CmId(None)``), as in librdmacm: a listener with a channel
        gets its requests as CONNECT_REQUEST events of that channel."""
        self._allowed(Call.GET_REQUEST)
        if not self.sync:
            raise UsageError("get_request is for a sync listener (CmId(None)); a listener with a channel "
                             "gets its requests as CONNECT_REQUEST events of the channel")
        ch = self.channel
        # none came in time: a later request is get_event's
        waiter = ch.wait_for(self.uid, Waiter(TAKES[(self.kind, Call.GET_REQUEST)]), timeout)
        if waiter.error is not None:
            raise waiter.error
        ev: Optional[Event[_S]] = waiter.event
        if ev is None:
            return None
        if not waiter.ok:
            raise EventError(ev, "LISTEN")
        return ev.id

    def accept(self: _S, param: Union[ConnParam, int, None] = None, private_data: Optional[bytes] = None,
               **fields: Any) -> Optional[Event[_S]]:
        """Accept a connection request (ACCEPT): ``rdma_accept``, on the id of a CONNECT_REQUEST.

        ``param`` as for :meth:`connect` (private data up to 196 bytes, 136 on a datagram
        id).  The id gets its own uid here (the kernel queues its events under it).  A
        connected id then gets ESTABLISHED when the peer's RTU comes; a datagram id is
        done at once (the SIDR REP is sent; no event follows).  If the kernel refuses the
        accept it rejects the request itself (the peer gets REJECTED 28): the id is FAILED.
        In sync mode (a request of a sync listener) the id first moves to a channel of its
        own, as librdmacm does, and this waits for ESTABLISHED.
        """
        ud = self.kind is Kind.DATAGRAM
        p, qp_num = conn_param(param, private_data, fields, _REP[self._rules.kind is _DATAGRAM],
                               getattr(self._peer(), "family", abi.AF_INET), getattr(self.channel._t, "ece", True))
        self._ready(Call.ACCEPT)
        if self.request is None:
            raise StateError("accept: id uid %d is no connection request's id" % self.uid)
        if self.sync:
            self.migrate(self.channel._private())
        ch = self.channel
        uid = ch.registry.register(self, ch)
        cmd = _CMD["ACCEPT"].encode(uid, *wire.conn_fields(p, qp_num), self.handle, 0, *p.ece)
        self._qpn = qp_num
        try:
            self._call(Call.ACCEPT, cmd, "ACCEPT")  # refused: the kernel rejected the request itself (FAILED)
        except BaseException:
            ch.registry.unregister(self)
            raise
        if self.sync and not ud:
            return self._complete(Call.ACCEPT, "ACCEPT", dst=self._peer())
        return None

    def reject(self, private_data: bytes = b"", reason: Optional[int] = None) -> None:
        """Reject a connection request (REJECT): ``rdma_reject``; on the active side, refuse
        the peer's REP (after CONNECT_RESPONSE).

        ``private_data`` goes in the REJ (at most 148 bytes; 136 in a datagram id's SIDR
        REP).  ``reason`` is None (what librdmacm sends: the kernel makes it 28,
        CONSUMER_DEFINED), 28, or 35 (VENDOR_OPTION_NOT_SUPPORTED: refusing the ECE
        offered); the kernel takes no other.  The id is FAILED after: destroy it."""
        ud = self.kind is Kind.DATAGRAM
        data = private_data_for(private_data, "SIDR_REP" if ud else "REJ", abi.AF_INET)
        if reason is None:
            code = 0
        else:
            code = check_int("reason", reason, 0xFF)
            if code not in abi.REJECT_REASONS:
                raise UsageError("reason %r: the kernel takes only 28 (CONSUMER_DEFINED) and 35 "
                                 "(VENDOR_OPTION_NOT_SUPPORTED); leave it out for 28" % (reason,))
        self._call(Call.REJECT, _CMD["REJECT"].encode(self.handle, len(data), code, b"", data), "REJECT")

    def notify(self, event: int = abi.NotifyEvent.COMM_EST) -> bool:
        """``rdma_notify``: tell the CM that the QP saw ``event``.  COMM_EST (the default) on an
        accepted id makes the connection ESTABLISHED without waiting for the RTU (the
        ESTABLISHED event follows); PATH_MIG switches to the alternate path.  Returns False
        when the connection was established already (the kernel's EISCONN, which librdmacm
        says may be ignored), True otherwise."""
        try:
            ev = abi.NotifyEvent(event)
        except ValueError:
            raise UsageError("notify takes NotifyEvent.COMM_EST (4) or PATH_MIG (6), got %r" % (event,)) from None
        try:
            self._call(Call.NOTIFY, _CMD["NOTIFY"].encode(self.handle, int(ev)), "NOTIFY")
        except KernelError as e:
            if e.errno == errno.EISCONN:
                return False
            raise
        return True

    def disconnect(self) -> None:
        """Disconnect (DISCONNECT): ``rdma_disconnect``; sends a DREQ, or the DREP once the
        peer's DREQ came (the DISCONNECTED event; the channel answers it itself unless
        ``channel.answer_disconnect`` is False).  TIMEWAIT_EXIT follows a few seconds later
        (while the id exists)."""
        self._call(_DISCONNECT_CALL, _DISCONNECT(self.handle), "DISCONNECT")

    def _answer_dreq(self) -> None:
        """DISCONNECTED came (the peer's DREQ, or the DREP of ours): send DISCONNECT, which answers
        a DREQ with the DREP (so the peer's disconnect completes, and both ends reach timewait when
        two DREQs crossed) and does nothing otherwise.  Written on the id's own channel: an id
        migrated after the reader took the event is on another fd now.  If MIGRATE_ID is moving
        the id right now, the write is refused on the old fd; migrate() then sends it on the new
        one (whichever of the two takes the pending answer first sends it, once).  Whether the
        id moved is told by its count of moves, not by its channel: two migrations (away and
        back) around the refused write leave the channel as it was."""
        data = _DISCONNECT(self.handle)
        moves = getattr(self, "_moves", 0)
        try:
            self.channel._write(data)
            return
        except OSError:
            if getattr(self, "_moves", 0) == moves:  # not moved since: gone, or MIGRATE_ID in flight
                pending = self._drep = [True]
                if getattr(self, "_moves", 0) == moves:
                    return  # a migrate() in flight finds it (see CmId.migrate)
                try:
                    pending.pop()
                except IndexError:
                    return  # migrate() took it
        try:  # moved meanwhile: where it is now
            self.channel._write(data)
        except OSError:
            pass

    def _requested(self: _S, event: Event[_S]) -> Event[_S]:
        """This id is the new id of the connection request ``event`` (which it counts)."""
        self._request = event
        self._counted()
        return event
