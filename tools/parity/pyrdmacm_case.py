#!/usr/bin/env python3
"""One parity scenario through pyrdmacm: the twin of librdmacm_case.c.

Same step language, same JSON on stdout (see librdmacm_case.c), so that
tests/kernel/test_parity.py can run a scenario through both libraries and compare
what each wrote to rdma_cm and what each reported.  Where pyrdmacm refuses a call
before any syscall (librdmacm would let the kernel refuse it), the step records
``"refused"`` with the exception's class and its errno.

The queries librdmacm makes after every event, pyrdmacm makes when asked: here
by the ``info`` step, which asks for exactly what librdmacm_case.c prints.
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


def main(argv):
    warnings.simplefilter("ignore")
    try:
        os.write(-1, b"parity-start")
    except OSError:
        pass
    steps = []
    channel = None
    sync = False
    cm_id = None
    args = list(argv)

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

    while args:
        step = args.pop(0)
        if step == "sync":
            sync = True
        elif step == "create":
            ps = PORT_SPACES[args.pop(0)]
            if not sync and channel is None:
                channel = EventChannel()
            made = call("create_id", lambda: CmId(None if sync else channel, ps))
            cm_id = made if made is not None else cm_id
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
            if caught:  # e.g. UnackedEventsWarning, where librdmacm would block
                steps[-1]["warning"] = caught[0].category.__name__
        else:
            sys.exit("pyrdmacm_case: unknown step %r" % step)
    print(json.dumps({"impl": "pyrdmacm", "steps": steps}))


if __name__ == "__main__":
    main(sys.argv[1:])
