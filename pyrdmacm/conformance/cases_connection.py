"""Cases: the connection manager's contract -- CONNECT, ACCEPT, REJECT, LISTEN, DISCONNECT,
NOTIFY and INIT_QP_ATTR.

Each case runs on an fd of its own (:func:`~.steps.on_own_fd`), with a listener and a client
on the local address where it needs a connection.  The expectations are ucma.c's and
cma.c's answers (cm-notes, section 5); where a case checks what follows on the wire rather
than an errno, it expects a text: the errno and the peer's event, "REJECTED 28" ...

The sizes are the ABI layer's: the short forms of CONNECT and ACCEPT are their bodies
without ``ece`` (what kernels before 5.8 read; from 5.8 ``ucma_connect`` and
``ucma_accept`` refuse an ``in`` below ``offsetofend(cmd, reserved)``, the same number),
the private data limits are :func:`pyrdmacm.abi.cm_private_data_limit`'s.
"""

from __future__ import annotations

import errno
import time
from typing import Dict, Tuple

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..wire import COMMAND
from .expect import outcome_text
from .registry import CaseList, Context
from .steps import CaseFd, E, at_new_port, conn_fields, connect_on, listener, on_own_fd, peer_summary, request, routed

__all__ = ["CASES"]

C = abi.UserCmCmd
S = abi.RdmaCmState
CASES = CaseList()

#: CONNECT and ACCEPT as kernels before 5.8 read them: everything before ``ece``
CONNECT_WITHOUT_ECE = CODECS["rdma_ucm_connect"].offset("ece.vendor_id")
ACCEPT_WITHOUT_ECE = CODECS["rdma_ucm_accept"].offset("ece.vendor_id")
#: the private data a REQ of an IP id, a REP and a REJ carry
REQ_DATA = abi.cm_private_data_limit("REQ")
REP_DATA = abi.cm_private_data_limit("REP")
REJ_DATA = abi.cm_private_data_limit("REJ")
#: INIT_QP_ATTR's reply, ``ib_uverbs_qp_attr``: the kernel takes no less (ucma_init_qp_attr)
QP_ATTR = COMMAND["INIT_QP_ATTR"].out


def _short_form(fd: CaseFd, name: str, fields: Dict[str, object], size_in: int) -> int:
    """Command ``name`` with ``fields``, only its first ``size_in`` body bytes written."""
    command = COMMAND[name]
    body = command.body.pack_dict(fields)
    return fd.cmd(command.cmd, None, {}, size_in=size_in, body=body[:size_in])


@CASES.case("connect_unbound", "CONNECT on a fresh id (no device: ucma_get_ctx_dev)",
            kernel_rules.expect(C.CONNECT, S.IDLE, device=False))
@on_own_fd
def _connect_unbound(fd: CaseFd, ctx: Context) -> int:
    return connect_on(fd, fd.create())


@CASES.case("connect_valid_zero", "CONNECT with conn_param.valid = 0 (ucma_connect: no parameters)", errno.EINVAL,
            needs_local=True)
@on_own_fd
def _connect_valid0(fd: CaseFd, ctx: Context) -> int:
    return connect_on(fd, routed(fd, at_new_port(ctx)), valid=0)


@CASES.case("connect_in_279", "CONNECT with hdr.in = %d, short of the %d-byte form (offsetofend reserved)"
            % (CONNECT_WITHOUT_ECE - 1, CONNECT_WITHOUT_ECE), errno.EINVAL, needs_local=True)
@on_own_fd
def _connect_279(fd: CaseFd, ctx: Context) -> int:
    h = routed(fd, at_new_port(ctx))
    return _short_form(fd, "CONNECT", conn_fields(h), CONNECT_WITHOUT_ECE - 1)


@CASES.case("connect_in_280", "CONNECT in the %d-byte form (no ECE: kernels before 5.8, librdmacm before 31)"
            % CONNECT_WITHOUT_ECE, 0, needs_local=True)
@on_own_fd
def _connect_280(fd: CaseFd, ctx: Context) -> int:
    h = routed(fd, at_new_port(ctx))
    return _short_form(fd, "CONNECT", conn_fields(h), CONNECT_WITHOUT_ECE)


@CASES.case("connect_twice", "CONNECT twice on one id: the second finds it connecting (cma_comp_exch)",
            kernel_rules.expect(C.CONNECT, S.CONNECT), needs_local=True)
@on_own_fd
def _connect_twice(fd: CaseFd, ctx: Context) -> Tuple[int, str]:
    h = routed(fd, at_new_port(ctx))
    first = connect_on(fd, h)
    return (connect_on(fd, h), "") if not first else (-1, "the first CONNECT failed: %s" % outcome_text(first))


@CASES.case("connect_private_data_57", "CONNECT with %d bytes of private data on an IP id (%d fit in a REQ "
            "after the %d-byte rdma_cm header)" % (REQ_DATA + 1, REQ_DATA, abi.CMA_HDR_SIZE), errno.EINVAL,
            needs_local=True)
@on_own_fd
def _connect_pd57(fd: CaseFd, ctx: Context) -> int:
    return connect_on(fd, routed(fd, at_new_port(ctx)), private_data=bytes(REQ_DATA + 1))


@CASES.case("connect_private_data_56", "CONNECT with %d bytes of private data on an IP id: the most a REQ carries"
            % REQ_DATA, 0, needs_local=True)
@on_own_fd
def _connect_pd56(fd: CaseFd, ctx: Context) -> int:
    return connect_on(fd, routed(fd, at_new_port(ctx)), private_data=bytes(REQ_DATA))


@CASES.case("accept_fresh_id", "ACCEPT on a fresh id, no connection request's (no device)",
            kernel_rules.expect(C.ACCEPT, S.IDLE, device=False))
@on_own_fd
def _accept_fresh(fd: CaseFd, ctx: Context) -> int:
    return fd.send("ACCEPT", conn_fields(fd.create(), uid=7))


@CASES.case("accept_private_data_197", "ACCEPT with %d bytes of private data (a REP carries %d): refused, and "
            "the kernel rejects the request itself (the peer gets REJECTED 28)" % (REP_DATA + 1, REP_DATA),
            "EINVAL, peer REJECTED 28", needs_local=True)
@on_own_fd
def _accept_pd197(fd: CaseFd, ctx: Context) -> str:
    client, req = request(fd, ctx)
    err = fd.send("ACCEPT", conn_fields(req, bytes(REP_DATA + 1), uid=7))
    return peer_summary(err, fd.events(3.0, until=E.REJECTED), client)


@CASES.case("accept_uid_zero", "ACCEPT with uid 0: accepted, the connection completes for the peer, and none of "
            "the accepted id's events is queued (the kernel queues no event for uid 0)",
            "ok, peer CONNECT_RESPONSE, no event", needs_local=True)
@on_own_fd
def _accept_uid0(fd: CaseFd, ctx: Context) -> str:
    client, req = request(fd, ctx)
    err = fd.send("ACCEPT", conn_fields(req, uid=0))
    got = fd.events(2.0, until=E.CONNECT_RESPONSE)
    peer = [E(s.event).name for s in got if s.handle == client]
    if peer == ["CONNECT_RESPONSE"]:  # the RTU: the accepted id would get ESTABLISHED now
        fd.send("ACCEPT", {"id": client})
    mine = [s for s in got + fd.events(1.5) if s.handle == req]
    return "%s, peer %s, %s" % (outcome_text(err), " ".join(peer) or "nothing",
                                "no event" if not mine else " ".join(E(s.event).name for s in mine))


@CASES.case("accept_in_short", "ACCEPT with hdr.in = %d, short of offsetofend(reserved)" % (ACCEPT_WITHOUT_ECE - 1),
            errno.EINVAL, needs_local=True)
@on_own_fd
def _accept_short(fd: CaseFd, ctx: Context) -> int:
    _client, req = request(fd, ctx)
    return _short_form(fd, "ACCEPT", conn_fields(req, uid=7), ACCEPT_WITHOUT_ECE - 1)


@CASES.case("reject_reason_5", "REJECT with reason 5 (the kernel takes 0 -> 28 and 35 only)", errno.EINVAL,
            needs_local=True)
@on_own_fd
def _reject_5(fd: CaseFd, ctx: Context) -> int:
    _client, req = request(fd, ctx)
    return fd.send("REJECT", {"id": req, "reason": 5})


@CASES.case("reject_unbound", "REJECT on a fresh id (no device)", kernel_rules.expect(C.REJECT, S.IDLE, device=False))
@on_own_fd
def _reject_unbound(fd: CaseFd, ctx: Context) -> int:
    return fd.send("REJECT", {"id": fd.create()})


@CASES.case("reject_data_149", "REJECT with %d bytes of private data (a REJ carries %d)" % (REJ_DATA + 1, REJ_DATA),
            errno.EINVAL, needs_local=True)
@on_own_fd
def _reject_149(fd: CaseFd, ctx: Context) -> int:
    _client, req = request(fd, ctx)
    return fd.send("REJECT", {"id": req, "private_data_len": REJ_DATA + 1, "private_data": bytes(REJ_DATA + 1)})


@CASES.case("reject_consumer", "REJECT of a request with %d bytes: the peer gets REJECTED 28 (consumer defined)"
            % REJ_DATA, "ok, peer REJECTED 28", needs_local=True)
@on_own_fd
def _reject_148(fd: CaseFd, ctx: Context) -> str:
    client, req = request(fd, ctx)
    err = fd.send("REJECT", {"id": req, "private_data_len": REJ_DATA, "private_data": bytes(REJ_DATA)})
    return peer_summary(err, fd.events(3.0, until=E.REJECTED), client)


@CASES.case("disconnect_unbound", "DISCONNECT on a fresh id (no device)",
            kernel_rules.expect(C.DISCONNECT, S.IDLE, device=False))
@on_own_fd
def _disc_unbound(fd: CaseFd, ctx: Context) -> int:
    return fd.send("DISCONNECT", {"id": fd.create()})


@CASES.case("disconnect_never_connected", "DISCONNECT on a resolved id that never connected (no IB CM id)",
            kernel_rules.expect(C.DISCONNECT, S.ROUTE_RESOLVED), needs_local=True)
@on_own_fd
def _disc_never(fd: CaseFd, ctx: Context) -> int:
    return fd.send("DISCONNECT", {"id": routed(fd, at_new_port(ctx))})


@CASES.case("notify_unbound", "NOTIFY COMM_EST on a fresh id (no device)",
            kernel_rules.expect(C.NOTIFY, S.IDLE, device=False))
@on_own_fd
def _notify_unbound(fd: CaseFd, ctx: Context) -> int:
    return fd.send("NOTIFY", {"id": fd.create(), "event": abi.NotifyEvent.COMM_EST})


@CASES.case("notify_no_connection", "NOTIFY COMM_EST on a resolved id with no connection (no IB CM id)",
            kernel_rules.expect(C.NOTIFY, S.ROUTE_RESOLVED), needs_local=True)
@on_own_fd
def _notify_nocm(fd: CaseFd, ctx: Context) -> int:
    return fd.send("NOTIFY", {"id": routed(fd, at_new_port(ctx)), "event": abi.NotifyEvent.COMM_EST})


@CASES.case("init_qp_attr_unbound", "INIT_QP_ATTR on a fresh id (no device)",
            kernel_rules.expect(C.INIT_QP_ATTR, S.IDLE, device=False))
@on_own_fd
def _qpattr_unbound(fd: CaseFd, ctx: Context) -> int:
    return fd.send("INIT_QP_ATTR", {"id": fd.create(), "qp_state": abi.QpState.INIT})


@CASES.case("init_qp_attr_state_7", "INIT_QP_ATTR for qp_state 7, beyond IB_QPS_ERR", errno.EINVAL, needs_local=True)
@on_own_fd
def _qpattr_7(fd: CaseFd, ctx: Context) -> int:
    return fd.send("INIT_QP_ATTR", {"id": routed(fd, at_new_port(ctx)), "qp_state": 7})


@CASES.case("init_qp_attr_out_short", "INIT_QP_ATTR with out = %d, below ib_uverbs_qp_attr" % (QP_ATTR - 1),
            errno.ENOSPC, needs_local=True)
@on_own_fd
def _qpattr_short(fd: CaseFd, ctx: Context) -> int:
    return fd.send("INIT_QP_ATTR", {"id": routed(fd, at_new_port(ctx)), "qp_state": abi.QpState.INIT},
                   out=QP_ATTR - 1)


@CASES.case("listen_twice", "LISTEN on a listening id (only IDLE and ADDR_BOUND listen)",
            kernel_rules.expect(C.LISTEN, S.LISTEN), needs_local=True)
@on_own_fd
def _listen_twice(fd: CaseFd, ctx: Context) -> int:
    return fd.send("LISTEN", {"id": listener(fd, at_new_port(ctx)), "backlog": 4})


@CASES.case("listen_backlog_huge", "LISTEN with backlog 2^31-1: taken, as the kernel's max_backlog", 0,
            needs_local=True)
@on_own_fd
def _listen_huge(fd: CaseFd, ctx: Context) -> int:
    h = fd.create()
    if fd.bind(h, at_new_port(ctx)):
        return -1
    return fd.send("LISTEN", {"id": h, "backlog": 0x7FFFFFFF})


@CASES.case("listen_backlog_one", "a listener with backlog 1 and two requests unread: the second is dropped, not "
            "rejected (ucma_connect_event_handler -ENOMEM; the IB CM sends no REJ so the client may retry), and "
            "comes on the client's REQ retry once the first is read",
            "one request, none rejected, the other on retry", needs_local=True)
@on_own_fd
def _backlog_one(fd: CaseFd, ctx: Context) -> str:
    addr = at_new_port(ctx)
    listener(fd, addr, backlog=1)
    a, b = routed(fd, addr), routed(fd, addr)
    for h in (a, b):
        err = connect_on(fd, h)
        if err:
            return "CONNECT failed: %s" % outcome_text(err)
    time.sleep(1.0)  # both REQs have arrived; the listener has read nothing
    got = fd.events(0.5)  # reading the first request gives its backlog slot back
    requests = [s for s in got if s.event == E.CONNECT_REQUEST]
    rejected = [s for s in got if s.event == E.REJECTED]
    if len(requests) != 1 or rejected:
        return "%d requests, %s" % (len(requests), " ".join("REJECTED %d" % s.status for s in rejected) or
                                    "none rejected")
    later = fd.events(12.0, until=E.CONNECT_REQUEST)  # the REQ timeout is about 4.3 s (response timeout 20)
    again = [s for s in later if s.event == E.CONNECT_REQUEST]
    rejected = [s for s in later if s.event == E.REJECTED]
    return "one request, %s, %s" % (
        " ".join("REJECTED %d" % s.status for s in rejected) or "none rejected",
        "the other on retry" if again else "the other never came")
