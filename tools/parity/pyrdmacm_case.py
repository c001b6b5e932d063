#!/usr/bin/env python3
"""One parity scenario through pyrdmacm: the twin of librdmacm_case.c.

Same step language, same JSON on stdout (see librdmacm_case.c), so that
tests/kernel/test_parity.py can run a scenario through both libraries and compare
what each wrote to rdma_cm and what each reported.  Where pyrdmacm refuses a call
before any syscall (librdmacm would let the kernel refuse it), the step records
``"refused"`` with the exception's class and its errno.

The queries librdmacm makes after every event, pyrdmacm makes when asked: here
by the ``info`` step, which asks for exactly what librdmacm_case.c prints.

Two choices make pyrdmacm do what the C program does, and no more: the channel does
not answer a peer's DREQ by itself (``answer_disconnect`` is False: the scenario's own
``disconnect`` step sends the DREP, as a librdmacm application must), and a ``notify``
that pyrdmacm reports as False (the kernel's EISCONN: established already) is recorded
as librdmacm reports it, ret -1 with errno EISCONN.
"""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import sys
import warnings

import pyrdmacm
from pyrdmacm import CmId, EventChannel, PortSpace, State
from pyrdmacm.records import ConnParam, UdParam

PORT_SPACES = {"tcp": PortSpace.TCP, "udp": PortSpace.UDP, "ipoib": PortSpace.IPOIB, "ib": PortSpace.IB}


def text_of(addr):
    if addr is None:
        return None
    ip = addr.ip
    scope = getattr(addr, "scope_id", 0)
    return "%s%%%d" % (ip, scope) if scope else str(ip)


def gid_text(gid):
    # spelt as inet_ntop spells it, like librdmacm_case.c (v4-mapped GIDs in dotted form)
    return socket.inet_ntop(socket.AF_INET6, gid.packed) if gid is not None else "::"


QP_STATES = {"INIT": 1, "RTR": 2, "RTS": 3}
#: the events whose report carries the peer's qp_num and private data (librdmacm_case.c)
PARAM_EVENTS = {"CONNECT_REQUEST", "CONNECT_RESPONSE", "ESTABLISHED", "REJECTED", "UNREACHABLE", "MULTICAST_JOIN"}
HEX = set("0123456789abcdefABCDEF")


def is_pd(text):
    return bool(text) and len(text) % 2 == 0 and len(text) <= 512 and set(text) <= HEX


def take_pd(args):
    """An optional PD argument (hex) at the head of ``args``: its bytes."""
    return bytes.fromhex(args.pop(0)) if args and is_pd(args[0]) else b""


def conn_param(qpn, pd):
    """The fixed connection parameters of connect and accept (librdmacm_case.c)."""
    return ConnParam(qp_num=int(qpn, 0), private_data=pd, responder_resources=1, initiator_depth=1,
                     flow_control=0, retry_count=5, rnr_retry_count=7, srq=0)


def pd_text(data):
    return data.rstrip(b"\0").hex()


def event_param(ev, name):
    if name not in PARAM_EVENTS:
        return {}
    p = ev.param
    if isinstance(p, UdParam):
        out = {"qp_num": p.qp_num, "qkey": p.qkey, "pd_len": len(p.private_data)}
        if name != "MULTICAST_JOIN":
            out["pd"] = pd_text(p.private_data)
        return out
    out = {"qp_num": p.qp_num, "pd_len": len(p.private_data)}
    if p.private_data:
        out["pd"] = pd_text(p.private_data)
    return out


def qp_attr_fields(a):
    ah = a.ah_attr
    return {"mask": int(a.mask), "qp_state": a.qp_state, "path_mtu": a.path_mtu, "dest_qp_num": a.dest_qp_num,
            "qkey": a.qkey, "qp_access_flags": a.qp_access_flags, "pkey_index": a.pkey_index,
            "port_num": a.port_num, "max_rd_atomic": a.max_rd_atomic, "max_dest_rd_atomic": a.max_dest_rd_atomic,
            "min_rnr_timer": a.min_rnr_timer, "timeout": a.timeout, "retry_cnt": a.retry_cnt,
            "rnr_retry": a.rnr_retry, "ah_dgid": gid_text(ah.dgid), "ah_sgid_index": ah.sgid_index,
            "ah_hop_limit": ah.hop_limit, "ah_traffic_class": ah.traffic_class, "ah_is_global": ah.is_global,
            "ah_dlid": ah.dlid, "ah_sl": ah.sl, "ah_port_num": ah.port_num}


def main(argv):
    warnings.simplefilter("ignore")
    try:
        os.write(-1, b"parity-start")
    except OSError:
        pass
    steps = []
    channel = None
    sync = False
    ids = {"": None}  # the ids by name ("" before any @NAME), all on one channel
    cur = ""
    request = None  # the id of the last CONNECT_REQUEST
    memberships = {}
    args = list(argv)

    def name_of(obj):
        return next((n for n, i in ids.items() if i is obj and obj is not None), "?")

    def call(name, fn):
        try:
            result = fn()
        except pyrdmacm.KernelError as e:
            steps.append({"call": name, "ret": -1, "errno": e.errno})
            return None
        except pyrdmacm.EventError as e:
            # sync mode: the outcome event was a failure; librdmacm returns -1 with errno set
            steps.append({"call": name, "ret": -1, "errno": e.errno})
            return None
        except (pyrdmacm.UsageError, pyrdmacm.StateError) as e:
            steps.append({"call": name, "ret": -1, "errno": getattr(e, "errno", None) or 0,
                          "refused": type(e).__name__})
            return None
        steps.append({"call": name, "ret": 0, "errno": 0})
        return result

    def wait_event(want):
        skipped = []
        while True:
            if channel is None or not select.select([channel], [], [], 10)[0]:
                steps.append({"call": "wait_event", "ret": -1,
                              "errno": errno.ETIMEDOUT if channel else errno.EINVAL, "skipped": skipped})
                return None
            ev = channel.get_event(0)
            if ev is None:
                continue  # nothing for the application (an event of an id destroyed meanwhile)
            name = ev.event.name
            ev.ack()
            if name != want:
                skipped.append("RDMA_CM_EVENT_" + name)
                continue
            on = ev.listen_id if ev.listen_id is not None else ev.id
            step = {"call": "wait_event", "ret": 0, "errno": 0, "event": "RDMA_CM_EVENT_" + name,
                    "status": ev.status, "on": name_of(on)}
            step.update(event_param(ev, name))
            step["skipped"] = skipped
            steps.append(step)
            return ev

    while args:
        step = args.pop(0)
        cm_id = ids.get(cur)
        if step == "sync":
            sync = True
        elif step.startswith("@"):
            cur = step
            ids.setdefault(cur, None)
        elif step == "get-request":
            if request is None:
                sys.exit("pyrdmacm_case: get-request: no CONNECT_REQUEST came")
            ids[cur] = request
        elif step == "listen":
            backlog = int(args.pop(0))
            call("listen", lambda: cm_id.listen(backlog))
        elif step == "wait-event":
            ev = wait_event(args.pop(0))
            if ev is not None and ev.listen_id is not None:
                request = ev.id
        elif step == "connect":
            p = conn_param(args.pop(0), take_pd(args))
            call("connect", lambda: cm_id.connect(p))
        elif step == "accept":
            p = conn_param(args.pop(0), take_pd(args))
            call("accept", lambda: cm_id.accept(p))
        elif step == "establish":
            call("establish", cm_id.establish)
        elif step == "reject":
            pd = take_pd(args)
            call("reject", lambda: cm_id.reject(pd))
        elif step == "notify":
            if call("notify", cm_id.notify) is False:
                steps[-1].update(ret=-1, errno=errno.EISCONN)
        elif step == "disconnect":
            call("disconnect", cm_id.disconnect)
        elif step == "join":
            addr = args.pop(0)
            send_only = bool(args) and args[0] == "sendonly"
            if send_only:
                args.pop(0)
            m = call("join_multicast", lambda: cm_id.join_multicast(addr, send_only=send_only))
            if m is not None:
                memberships[addr] = m
        elif step == "leave":
            addr = args.pop(0)
            if addr in memberships:
                call("leave_multicast", memberships.pop(addr).leave)
            else:  # librdmacm: no such group on the id
                steps.append({"call": "leave_multicast", "ret": -1, "errno": errno.EADDRNOTAVAIL})
        elif step == "set-tos":
            n = int(args.pop(0))
            call("set_option", lambda: cm_id.set_tos(n))
        elif step == "set-ack-timeout":
            n = int(args.pop(0))
            call("set_option", lambda: cm_id.set_ack_timeout(n))
        elif step == "set-reuseaddr":
            call("set_option", lambda: cm_id.set_reuseaddr(True))
        elif step == "set-afonly":
            call("set_option", lambda: cm_id.set_afonly(True))
        elif step == "init-qp-attr":
            state = args.pop(0)
            state_num = QP_STATES[state] if state in QP_STATES else int(state)
            attr = call("init_qp_attr", lambda: cm_id.init_qp_attr(state_num))
            if attr is not None:
                steps[-1].update(qp_attr_fields(attr))
        elif step == "create":
            ps = PORT_SPACES[args.pop(0)]
            if not sync and channel is None:
                channel = EventChannel()
            made = call("create_id", lambda: CmId(None if sync else channel, ps))
            if channel is not None:
                channel.answer_disconnect = False
            ids[cur] = made if made is not None else ids[cur]
        elif step == "bind":
            a = args.pop(0)
            call("bind_addr", lambda: cm_id.bind_addr(a))
        elif step == "resolve":
            dst, src, timeout = args.pop(0), args.pop(0), int(args.pop(0))
            src_addr = None if src == "-" else src  # pyrdmacm takes what users write, "gid:..." too
            call("resolve_addr", lambda: cm_id.resolve_addr(dst, src=src_addr, timeout_ms=timeout))
        elif step == "route":
            timeout = int(args.pop(0))
            call("resolve_route", lambda: cm_id.resolve_route(timeout))
        elif step in ("wait", "wait-noack"):
            if channel is None or not select.select([channel], [], [], 10)[0]:
                steps.append({"call": "get_cm_event", "ret": -1,
                              "errno": errno.ETIMEDOUT if channel else errno.EINVAL})
                continue
            ev = channel.get_event(0)
            steps.append({"call": "get_cm_event", "ret": 0, "errno": 0,
                          "event": "RDMA_CM_EVENT_" + ev.event.name, "status": ev.status})
            if step == "wait":
                ev.ack()
        elif step == "info":
            info = cm_id.query_addr()
            sgid, dgid = cm_id.sgid, cm_id.dgid
            steps.append({
                "call": "info",
                "local": text_of(info.src),
                "peer": text_of(cm_id.get_peer_addr()),
                "src_port": cm_id.get_src_port(),
                "dst_port": cm_id.get_dst_port(),
                "device": info.device.name if info.device is not None else None,
                "port_num": info.port_num,
                "pkey": info.pkey,
                "sgid": gid_text(sgid),
                "dgid": gid_text(dgid),
                "num_paths": len(cm_id.query_path()) if cm_id.state is State.ROUTE_RESOLVED else 0,
            })
        elif step == "destroy":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call("destroy_id", cm_id.destroy)
            ids[cur] = None
            if caught:  # e.g. UnackedEventsWarning, where librdmacm would block
                steps[-1]["warning"] = caught[0].category.__name__
        else:
            sys.exit("pyrdmacm_case: unknown step %r" % step)
    print(json.dumps({"impl": "pyrdmacm", "steps": steps}))


if __name__ == "__main__":
    main(sys.argv[1:])
