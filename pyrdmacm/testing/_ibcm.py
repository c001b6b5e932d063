"""The IB CM's states and transitions (drivers/infiniband/core/cm.c), as one table.

Theory of operation
-------------------
Each id that connects has, under the rdma_cm, an IB CM id (``cm_id_private``) in one of
the states of :class:`IbCmState` (the kernel's ``enum ib_cm_state``, its numbers).  What
moves it is something it does (a verb: ``ib_send_cm_rep`` ...), a message that reaches it
(``cm_rep_handler`` ...), or time (a REQ or DREQ nobody answers, the end of timewait): a
:class:`CmInput`.  :data:`TRANSITIONS` is ``(state, input) -> new state``, each row tagged
with the cm.c function that makes the move; an input absent from it in a state is refused
there (a verb: EINVAL, or :data:`REFUSALS`' errno; a message: dropped).  :data:`ON_DESTROY`
is what ``cm_destroy_id`` sends from each state.

:class:`IbCmId` holds one id's state and moves it only through the table
(:meth:`IbCmId.move`); the fakes (:mod:`pyrdmacm.testing`) keep one per id that has an
IB CM id and carry the messages between them.  MRA (the delayed "message received
acknowledgement") is not modelled, and so neither are its four states; the rows name the
MRA states cm.c takes alike where it helps to read them next to cm.c.
"""

from __future__ import annotations

import enum
import errno
from typing import Dict, FrozenSet, Mapping, NamedTuple, Optional, Tuple

from ..abi.named import NamedIntEnum

__all__ = ["IbCmState", "CmInput", "Transition", "TRANSITIONS", "REFUSALS", "ON_DESTROY", "QP_ATTR_STATES", "IbCmId",
           "after", "REJ_TIMEOUT", "REJ_INVALID_SERVICE_ID", "REJ_STALE_CONN", "REJ_CONSUMER_DEFINED"]

#: ``enum ib_cm_rej_reason`` values the IB CM itself sends
REJ_TIMEOUT, REJ_INVALID_SERVICE_ID, REJ_STALE_CONN, REJ_CONSUMER_DEFINED = 4, 8, 10, 28


class IbCmState(NamedIntEnum):
    """``enum ib_cm_state`` (include/rdma/ib_cm.h)."""

    IDLE = 0
    LISTEN = 1
    REQ_SENT = 2
    REQ_RCVD = 3
    MRA_REQ_SENT = 4
    MRA_REQ_RCVD = 5
    REP_SENT = 6
    REP_RCVD = 7
    MRA_REP_SENT = 8
    MRA_REP_RCVD = 9
    ESTABLISHED = 10
    DREQ_SENT = 11
    DREQ_RCVD = 12
    TIMEWAIT = 13
    SIDR_REQ_SENT = 14
    SIDR_REQ_RCVD = 15


class CmInput(enum.Enum):
    """What moves an IB CM id: a verb of its own, a message that reaches it, or time.  The
    value is the cm.c function that takes it."""

    LISTEN = "ib_cm_listen"
    SEND_REQ = "ib_send_cm_req"
    SEND_REP = "ib_send_cm_rep"
    SEND_RTU = "ib_send_cm_rtu"
    SEND_REJ = "ib_send_cm_rej"
    SEND_DREQ = "ib_send_cm_dreq"
    SEND_DREP = "ib_send_cm_drep"
    SEND_SIDR_REQ = "ib_send_cm_sidr_req"
    SEND_SIDR_REP = "ib_send_cm_sidr_rep"
    #: NOTIFY(IB_EVENT_COMM_EST): data came before the RTU
    ESTABLISH = "cm_establish"
    #: NOTIFY(IB_EVENT_PATH_MIG): switch to the alternate path
    MIGRATE = "cm_migrate"
    RECV_REQ = "cm_req_handler"
    RECV_REP = "cm_rep_handler"
    RECV_RTU = "cm_rtu_handler"
    RECV_REJ = "cm_rej_handler"
    #: a REJ with reason 10 (stale connection): the receiver enters timewait, whatever its state
    RECV_REJ_STALE = "cm_rej_handler (IB_CM_REJ_STALE_CONN)"
    RECV_DREQ = "cm_dreq_handler"
    RECV_DREP = "cm_drep_handler"
    RECV_SIDR_REQ = "cm_sidr_req_handler"
    RECV_SIDR_REP = "cm_sidr_rep_handler"
    #: the REQ's (or SIDR REQ's) retries ran out: REQ_ERROR / SIDR_REQ_ERROR
    REQ_TIMEOUT = "cm_process_send_error (REQ)"
    #: the DREQ's retries ran out: DREQ_ERROR
    DREQ_TIMEOUT = "cm_process_send_error (DREQ)"
    TIMEWAIT_EXIT = "cm_timewait_handler"
    #: the id is destroyed, after what ON_DESTROY sends
    DESTROY = "cm_destroy_id"


class Transition(NamedTuple):
    """Where an input leads, and the cm.c function that says so."""

    state: IbCmState
    where: str


St = IbCmState
In = CmInput
_REQ_SIDE = (St.REQ_SENT, St.MRA_REQ_RCVD)
_REQUEST = (St.REQ_RCVD, St.MRA_REQ_SENT)

# (inputs, states before, state after, where).  The passive side of a connection goes
# REQ_RCVD -> REP_SENT -> ESTABLISHED, the active side REQ_SENT -> REP_RCVD -> ESTABLISHED;
# either leaves through DREQ/DREP into TIMEWAIT, a REJ into IDLE (or TIMEWAIT once a REP
# went out: its QPN must not be reused at once), and TIMEWAIT ends in IDLE.
_ROWS: Tuple[Tuple[Tuple[CmInput, ...], Tuple[IbCmState, ...], IbCmState, str], ...] = (
    ((In.LISTEN,), (St.IDLE,), St.LISTEN, "cm.c:ib_cm_listen (cm_init_listen)"),
    ((In.SEND_REQ,), (St.IDLE,), St.REQ_SENT, "cm.c:ib_send_cm_req"),
    ((In.SEND_SIDR_REQ,), (St.IDLE,), St.SIDR_REQ_SENT, "cm.c:ib_send_cm_sidr_req"),
    ((In.RECV_REQ,), (St.IDLE,), St.REQ_RCVD, "cm.c:cm_req_handler (a new cm_id of the listener)"),
    ((In.RECV_SIDR_REQ,), (St.IDLE,), St.SIDR_REQ_RCVD, "cm.c:cm_sidr_req_handler (a new cm_id)"),
    ((In.SEND_REP,), _REQUEST, St.REP_SENT, "cm.c:ib_send_cm_rep"),
    ((In.RECV_REP,), _REQ_SIDE, St.REP_RCVD, "cm.c:cm_rep_handler"),
    ((In.SEND_RTU,), (St.REP_RCVD, St.MRA_REP_SENT), St.ESTABLISHED, "cm.c:ib_send_cm_rtu"),
    ((In.RECV_RTU, In.ESTABLISH), (St.REP_SENT, St.MRA_REP_RCVD), St.ESTABLISHED,
     "cm.c:cm_rtu_handler, cm_establish (IB_CM_USER_ESTABLISHED)"),
    ((In.MIGRATE,), (St.ESTABLISHED,), St.ESTABLISHED, "cm.c:cm_migrate"),
    # REJ sent: cm_send_rej_locked resets a request or an answered REQ, and puts an id that
    # sent its REP in timewait
    ((In.SEND_REJ,), _REQ_SIDE + _REQUEST + (St.REP_RCVD, St.MRA_REP_SENT), St.IDLE,
     "cm.c:cm_send_rej_locked (cm_reset_to_idle)"),
    ((In.SEND_REJ,), (St.REP_SENT, St.MRA_REP_RCVD), St.TIMEWAIT, "cm.c:cm_send_rej_locked (cm_enter_timewait)"),
    # REJ received (cm_rej_handler): an established id takes none here -- the lab saw no
    # event for it (cm-notes.md section 10), so the table drops it
    ((In.RECV_REJ,), _REQ_SIDE + (St.REP_SENT, St.MRA_REP_RCVD) + _REQUEST, St.IDLE,
     "cm.c:cm_rej_handler (cm_reset_to_idle)"),
    ((In.RECV_REJ, In.RECV_REJ_STALE), (St.REP_RCVD, St.MRA_REP_SENT, St.DREQ_SENT), St.TIMEWAIT,
     "cm.c:cm_rej_handler (cm_enter_timewait)"),
    ((In.RECV_REJ_STALE,), _REQ_SIDE + (St.REP_SENT, St.MRA_REP_RCVD) + _REQUEST, St.TIMEWAIT,
     "cm.c:cm_rej_handler (IB_CM_REJ_STALE_CONN: cm_enter_timewait)"),
    # disconnection
    ((In.SEND_DREQ,), (St.ESTABLISHED,), St.DREQ_SENT, "cm.c:cm_send_dreq_locked"),
    ((In.RECV_DREQ,), (St.REP_SENT, St.MRA_REP_RCVD, St.ESTABLISHED, St.DREQ_SENT), St.DREQ_RCVD,
     "cm.c:cm_dreq_handler (DREQ_SENT too: two DREQs crossed, each end waits for a DREP)"),
    ((In.RECV_DREQ,), (St.TIMEWAIT,), St.TIMEWAIT, "cm.c:cm_dreq_handler (cm_issue_drep: answered, no event)"),
    ((In.DREQ_TIMEOUT,), (St.DREQ_SENT,), St.TIMEWAIT, "cm.c:cm_process_send_error (DREQ_ERROR)"),
    ((In.SEND_DREP,), (St.DREQ_RCVD,), St.TIMEWAIT, "cm.c:cm_send_drep_locked"),
    ((In.RECV_DREP,), (St.DREQ_SENT, St.DREQ_RCVD), St.TIMEWAIT, "cm.c:cm_drep_handler"),
    ((In.TIMEWAIT_EXIT,), (St.TIMEWAIT,), St.IDLE, "cm.c:cm_timewait_handler"),
    ((In.REQ_TIMEOUT,), _REQ_SIDE + (St.SIDR_REQ_SENT,), St.IDLE, "cm.c:cm_process_send_error (REQ_ERROR, "
     "SIDR_REQ_ERROR)"),
    # SIDR (UD): one request, one answer, no connection
    ((In.SEND_SIDR_REP,), (St.SIDR_REQ_RCVD,), St.IDLE, "cm.c:cm_send_sidr_rep_locked"),
    ((In.RECV_SIDR_REP,), (St.SIDR_REQ_SENT,), St.IDLE, "cm.c:cm_sidr_rep_handler"),
    # destruction, once ON_DESTROY's message is sent: a listener stops, a SIDR REQ is cancelled,
    # a DREQ just sent (or sent before) is not waited for
    ((In.DESTROY,), (St.IDLE, St.LISTEN, St.SIDR_REQ_SENT), St.IDLE, "cm.c:cm_destroy_id"),
    ((In.DESTROY,), (St.DREQ_SENT, St.TIMEWAIT), St.TIMEWAIT, "cm.c:cm_destroy_id (cm_enter_timewait)"),
)


def _table() -> Dict[Tuple[IbCmState, CmInput], Transition]:
    out: Dict[Tuple[IbCmState, CmInput], Transition] = {}
    for inputs, states, new, where in _ROWS:
        for what in inputs:
            for st in states:
                key = (st, what)
                if key in out:
                    raise AssertionError("two rows for %s %s" % (st.name, what.name))
                out[key] = Transition(new, where)
    return out


#: ``(state, input) -> Transition``: the one table of how an IB CM id moves.
TRANSITIONS: Mapping[Tuple[IbCmState, CmInput], Transition] = _table()

#: The verbs refused with another errno than EINVAL, where: a second COMM_EST on an
#: established connection (cm_establish: EISCONN).
REFUSALS: Mapping[Tuple[IbCmState, CmInput], int] = {(St.ESTABLISHED, In.ESTABLISH): errno.EISCONN}

#: What ``cm_destroy_id`` does from each state: the message it sends (and its reject reason
#: or SIDR status), or None: nothing is sent.  A REQ nobody took yet is withdrawn (REJ 4); a
#: request or an unfinished handshake is rejected (REJ 28); an established connection is
#: disconnected (DREQ, and the id enters timewait at once); a DREQ received is answered.
ON_DESTROY: Mapping[IbCmState, Optional[Tuple[str, int]]] = {
    St.REQ_SENT: ("REJ", REJ_TIMEOUT), St.MRA_REQ_RCVD: ("REJ", REJ_TIMEOUT),
    St.REQ_RCVD: ("REJ", REJ_CONSUMER_DEFINED), St.MRA_REQ_SENT: ("REJ", REJ_CONSUMER_DEFINED),
    St.REP_SENT: ("REJ", REJ_CONSUMER_DEFINED), St.REP_RCVD: ("REJ", REJ_CONSUMER_DEFINED),
    St.MRA_REP_SENT: ("REJ", REJ_CONSUMER_DEFINED), St.MRA_REP_RCVD: ("REJ", REJ_CONSUMER_DEFINED),
    St.ESTABLISHED: ("DREQ", 0), St.DREQ_RCVD: ("DREP", 0), St.SIDR_REQ_RCVD: ("SIDR_REP", 2),
    St.IDLE: None, St.LISTEN: None, St.DREQ_SENT: None, St.TIMEWAIT: None, St.SIDR_REQ_SENT: None,
}


#: The IB CM states in which ``ib_cm_init_qp_attr`` answers for each QP state (1 INIT, 2 RTR,
#: 3 RTS; cm.c:cm_init_qp_init_attr, cm_init_qp_rtr_attr, cm_init_qp_rts_attr); elsewhere EINVAL.
_ANSWERED = (St.REQ_RCVD, St.MRA_REQ_SENT, St.REP_RCVD, St.MRA_REP_SENT, St.REP_SENT, St.MRA_REP_RCVD,
             St.ESTABLISHED)
QP_ATTR_STATES: Mapping[int, FrozenSet[IbCmState]] = {
    1: frozenset(_REQ_SIDE + _ANSWERED), 2: frozenset(_ANSWERED), 3: frozenset(_ANSWERED)}


def after(state: IbCmState, what: CmInput) -> Optional[IbCmState]:
    """Where ``what`` leads from ``state``, or None: refused (a verb) or dropped (a message)."""
    t = TRANSITIONS.get((state, what))
    return None if t is None else t.state


class IbCmId:
    """One IB CM id (``cm_id_private``) as far as its state goes, and the figures of its
    connection that INIT_QP_ATTR reads: the peer's QPN and starting PSN, this end's responder
    resources and initiator depth, retry and RNR retry counts, the path's traffic class."""

    __slots__ = ("state", "remote_qpn", "remote_psn", "rr", "idepth", "retry", "rnr", "tc")

    def __init__(self, state: IbCmState = St.IDLE) -> None:
        self.state = state
        self.remote_qpn = self.remote_psn = 0
        self.rr = self.idepth = self.retry = self.rnr = self.tc = 0

    def can(self, what: CmInput) -> bool:
        """Whether the table takes ``what`` in the id's state."""
        return (self.state, what) in TRANSITIONS

    def move(self, what: CmInput) -> Optional[IbCmState]:
        """Apply ``what``: the new state, or None (nothing moved: the table has no row)."""
        new = after(self.state, what)
        if new is not None:
            self.state = new
        return new

    def refusal(self, what: CmInput) -> int:
        """The errno of a verb the table refuses in the id's state (0: it takes it)."""
        if self.can(what):
            return 0
        return REFUSALS.get((self.state, what), errno.EINVAL)
