#!/usr/bin/env python3
"""Encode/decode cost of the hot structs: pyrdmacm's derived codecs vs construct vs a
hand-written struct.Struct of the same layout (the floor). Host only, no kernel.

    tools/bench_codec.py [--json]
    tools/bench_codec.py --commands [--n 1000] [--json]
    tools/bench_codec.py --direct [--n 10000] [--json]
    tools/bench_codec.py --direct-connections [--n 2000] [--json]

Ratios are codec / hand-written; the target is at most 1.5x.

``--commands`` times the per-command Python cost of the benchmark's phases (tools/bench:
create N ids, resolve_addr all then collect the events, resolve_route likewise, destroy
all) without a kernel, six ways, per id and phase:

* ``pyrdmacm`` over :class:`EchoKernel`, a transport that answers each command as rdma_cm
  would, as cheaply as Python can (the reply written at the command's response address);
* ``bare``, the floor: a hand-written driver (struct.pack, one write per command, reply
  buffers reused, no checks) over the same transport;
* ``batch``: pyrdmacm's calls for many ids (create_ids, get_events(ack=True), destroy_ids);
* ``aio-many`` and ``aio``: the asyncio adapter over the same transport, with one future
  per phase (``await resolve_addr_many``) and with a future per id (``start_resolve_addr``)
  and ``asyncio.gather``;
* ``fake``: pyrdmacm over pyrdmacm.testing.FakeKernel, which decodes and validates every
  command (its own cost dominates: a regression guard for the fake, not the core).

``pyrdmacm / bare`` is the Python overhead the library adds per command; on a real kernel
the syscalls come on top, equally for both.

``--direct`` runs the code path the lab takes (the channel writing through the kernel
device's own ``write``) with /dev/null as the device: every command is a
real system call that does nothing, and each event is put into the reply buffer before its
GET_EVENT. Events are timed apart from the commands that cause them, so the table says, in
ns per id, what each step of the API costs above the hand-written floor.

``--direct-connections`` does the same for a client connection's calls (create,
resolve_addr, ADDR_RESOLVED, resolve_route, ROUTE_RESOLVED, connect, CONNECT_RESPONSE,
establish, disconnect, DISCONNECTED, destroy) against tools/bench's hand-written
connection client: ns per connection and step.
"""

import ctypes
import json
import os
import struct
import sys
import time
import timeit
from collections import deque

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyrdmacm import _structs, abi  # noqa: E402
from pyrdmacm._codec import CODECS  # noqa: E402
from pyrdmacm._device import KernelDevice  # noqa: E402

# Hand-written layouts: what a careful programmer would write without construct.
HAND = {
    "rdma_ucm_create_id": ("<QQHB5s", "pack", (1, 0x7F0000001000, 0x106, 2, b"")),
    "rdma_ucm_resolve_addr": ("<IIHHI128s128s", "pack", (1, 2000, 0, 16, 0, b"", b"\x02\x00" + bytes(14))),
    "rdma_ucm_resolve_route": ("<II", "pack", (1, 2000)),
    "rdma_ucm_query": ("<QII", "pack", (0x7F0000001000, 1, 0)),
    "rdma_ucm_destroy_id": ("<QII", "pack", (0x7F0000001000, 1, 0)),
    "rdma_ucm_get_event": ("<Q", "pack", (0x7F0000001000,)),
    "rdma_ucm_event_resp": ("<QIII304sIII", "unpack", None),
    "rdma_ucm_query_addr_resp": (">Q", "unpack_be", None),
    "rdma_ucm_create_id_resp": ("<I", "unpack", None),
}


def bench(fn, number=200000):
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


class EchoKernel:
    """The device's three operations, answering CREATE_ID, RESOLVE_ADDR, RESOLVE_ROUTE,
    GET_EVENT and DESTROY_ID with the real reply bytes and nothing else (no checks).
    The handle of an id is its uid, so events can be made without a table."""

    legacy = False

    def __init__(self):
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.events = deque()
        self._hdr = struct.Struct("<IHH")
        self._q2 = struct.Struct("<QQ")
        self._ev = struct.Struct("<QIIi")

    def fileno(self):
        return self._r

    def identify_device(self, index, node_guid):
        return None, index

    def close(self):
        for fd in (self._r, self._w):
            os.close(fd)

    def write(self, data):
        cmd = data[0]
        if cmd == 0:  # CREATE_ID: uid, response -> handle = uid
            uid, resp = self._q2.unpack_from(data, 8)
            ctypes.memmove(resp, uid.to_bytes(4, "little"), 4)
        elif cmd == 21 or cmd == 4:  # RESOLVE_ADDR, RESOLVE_ROUTE: id first
            h = int.from_bytes(data[8:12], "little")
            if not self.events:
                os.write(self._w, b"e")  # the fd is readable while events are queued
            self.events.append(self._ev.pack(h, h, 0 if cmd == 21 else 2, 0))
        elif cmd == 12:  # GET_EVENT: response
            if not self.events:
                raise BlockingIOError(11, "no event")
            ctypes.memmove(int.from_bytes(data[8:16], "little"), self.events.popleft(), 20)
            if not self.events:
                os.read(self._r, 1)
        elif cmd == 1:  # DESTROY_ID: response, id -> events_reported 0
            ctypes.memmove(int.from_bytes(data[8:16], "little"), b"\0\0\0\0", 4)
        else:
            raise OSError(38, "EchoKernel: command %d not modelled" % cmd)
        return len(data)


PHASES = ("create", "resolve_addr", "resolve_route", "destroy")


def phases_pyrdmacm(transport, n, dst):
    from pyrdmacm import EventChannel

    ch = EventChannel(transport)
    get = ch.get_event
    t = [time.perf_counter()]
    ids = [ch.create_id() for _ in range(n)]
    t.append(time.perf_counter())
    for i in ids:
        i.resolve_addr(dst, timeout_ms=2000)
    for _ in range(n):
        get(None).ack()
    t.append(time.perf_counter())
    for i in ids:
        i.resolve_route(2000)
    for _ in range(n):
        get(None).ack()
    t.append(time.perf_counter())
    for i in ids:
        i.destroy()
    t.append(time.perf_counter())
    ch.close()
    return t


def phases_batch(transport, n, dst):
    """The blocking API's calls for many ids (tools/bench's ``batch``)."""
    from pyrdmacm import EventChannel

    ch = EventChannel(transport)
    get = ch.get_events
    t = [time.perf_counter()]
    ids = ch.create_ids(n)
    t.append(time.perf_counter())
    for i in ids:
        i.resolve_addr(dst, timeout_ms=2000)
    got = 0
    while got < n:
        got += len(get(64, None, ack=True))
    t.append(time.perf_counter())
    for i in ids:
        i.resolve_route(2000)
    got = 0
    while got < n:
        got += len(get(64, None, ack=True))
    t.append(time.perf_counter())
    ch.destroy_ids(ids)
    t.append(time.perf_counter())
    ch.close()
    return t


def phases_aio(transport, n, dst, many):
    """The asyncio adapter: one batch future per phase (many) or a future per id
    (``start_resolve_*``, no Task per id) + gather."""
    import asyncio

    from pyrdmacm import EventChannel
    from pyrdmacm.aio import AsyncChannel

    async def main():
        async with AsyncChannel(EventChannel(transport)) as ach:
            t = [time.perf_counter()]
            ids = [ach.channel.create_id() for _ in range(n)]
            t.append(time.perf_counter())
            if many:
                await ach.resolve_addr_many(ids, dst, timeout_ms=2000)
            else:
                await asyncio.gather(*(ach.start_resolve_addr(i, dst, timeout_ms=2000) for i in ids))
            t.append(time.perf_counter())
            if many:
                await ach.resolve_route_many(ids, 2000)
            else:
                await asyncio.gather(*(ach.start_resolve_route(i, 2000) for i in ids))
            t.append(time.perf_counter())
            for i in ids:
                i.destroy()
            t.append(time.perf_counter())
            return t

    return asyncio.run(main())


def phases_bare(transport, n, dst):
    """The floor: what a careful hand-written driver of the same commands costs."""
    write = transport.write
    u32 = struct.Struct("<I")
    reply = ctypes.create_string_buffer(336)
    addr = ctypes.addressof(reply)
    view = memoryview(reply).cast("B")
    h_create = struct.pack("<IHH", 0, 24, 4)
    create = struct.Struct("<QQHB5x")
    h_addr = struct.pack("<IHH", 21, 272, 0)
    resolve = struct.Struct("<IIHHI128s128s")
    storage = dst.pack_storage()
    h_route = struct.pack("<IHH", 4, 8, 0)
    route = struct.Struct("<II")
    get_event = struct.pack("<IHH", 12, 8, 336) + struct.pack("<Q", addr)
    ev = struct.Struct("<QIIi")
    h_destroy = struct.pack("<IHH", 1, 16, 4)
    destroy = struct.Struct("<QII")
    t = [time.perf_counter()]
    handles = {}
    for uid in range(1, n + 1):
        write(h_create + create.pack(uid, addr, 0x106, 2))
        handles[uid] = u32.unpack_from(view)[0]
    t.append(time.perf_counter())
    for h in handles.values():
        write(h_addr + resolve.pack(h, 2000, 0, 16, 0, b"", storage))
    for _ in range(n):
        write(get_event)
        uid, h, e, st = ev.unpack_from(view)
    t.append(time.perf_counter())
    for h in handles.values():
        write(h_route + route.pack(h, 2000))
    for _ in range(n):
        write(get_event)
        uid, h, e, st = ev.unpack_from(view)
    t.append(time.perf_counter())
    for h in handles.values():
        write(h_destroy + destroy.pack(addr, h, 0))
        u32.unpack_from(view)
    t.append(time.perf_counter())
    return t


def fake_transport():
    from pyrdmacm.testing import FakeKernel, FakeNet

    return FakeKernel(FakeNet())


def commands(n, runs=5):
    from pyrdmacm import parse_address

    results = {}
    for name, make, fn, dst in (("bare", EchoKernel, phases_bare, "10.0.0.2"),
                                ("pyrdmacm", EchoKernel, phases_pyrdmacm, "10.0.0.2"),
                                ("batch", EchoKernel, phases_batch, "10.0.0.2"),
                                ("aio-many", EchoKernel, lambda t, n, d: phases_aio(t, n, d, True), "10.0.0.2"),
                                ("aio", EchoKernel, lambda t, n, d: phases_aio(t, n, d, False), "10.0.0.2"),
                                ("fake", fake_transport, phases_pyrdmacm, "10.0.0.2")):
        best = None
        for _ in range(runs if name != "fake" else 2):
            tr = make()
            t = fn(tr, n, parse_address(dst))
            if name == "bare":
                tr.close()  # pyrdmacm's channels close theirs
            per = [(t[i + 1] - t[i]) / n * 1e6 for i in range(4)]
            best = per if best is None else [min(a, b) for a, b in zip(best, per)]
        results[name] = dict(zip(PHASES, best), total=sum(best))
    return results


def _n_arg(default):
    return int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else default


def _json_out(obj):
    """With --json: print ``obj`` as JSON and say so (the caller then prints no table)."""
    if "--json" not in sys.argv:
        return False
    json.dump(obj, sys.stdout, indent=1)
    print()
    return True


def main_commands():
    n = _n_arg(1000)
    res = commands(n)
    if _json_out({"n": n, "per_id_us": res}):
        return
    print("per-id us, N=%d, best of 5 (host, no kernel); pyrdmacm/bare = the library's overhead, "
          "many/py and aio/py = the asyncio adapter's batch and per-id futures against the blocking API" % n)
    cols = ("bare", "pyrdmacm", "batch", "aio-many", "aio", "fake")
    print("%-14s" % "phase" + "".join("%10s" % c for c in cols) + "%14s%9s%9s" % ("pyrdmacm/bare", "many/py", "aio/py"))
    for p in PHASES + ("total",):
        py = res["pyrdmacm"][p]
        print("%-14s" % p + "".join("%10.2f" % res[c][p] for c in cols)
              + "%14.2f%9.2f%9.2f" % (py / res["bare"][p], res["aio-many"][p] / py, res["aio"][p] / py))


class NullDevice(KernelDevice):
    """The kernel device's own code (its write, with the count of calls in flight, and its
    close) on /dev/null: every command is a real, cheap system call, as on rdma_cm. No
    reply is written: the caller puts each event into the reply buffer."""

    legacy = False

    def _open(self):
        self.fd = self._fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._slot.append(self._fd)
        st = os.fstat(self._fd)
        self._ident = (st.st_dev, st.st_ino, st.st_rdev)

    def identify_device(self, index, node_guid):
        return None, index


DIRECT_PHASES = ("create", "resolve_addr", "addr_events", "resolve_route", "route_events", "destroy")
_HEAD = struct.Struct("<QIII")  # uid, id, event, status: what the caller puts in for each event


def _read_events(ch, ids, want, t):
    """Each id's ``want`` event put into the reply buffer and read with get_event + ack (the
    timed event loop of both direct runs); the time after it appended to ``t``."""
    view, put, get, code = ch._r_event.view, _HEAD.pack_into, ch.get_event, int(want)
    for i in ids:
        put(view, 0, i.uid, i.handle, code, 0)
        ev = get()
        if ev.event is not want or ev.status:
            raise SystemExit("bench_codec: pyrdmacm decoded %r" % (ev,))
        ev.ack()
    t.append(time.perf_counter())


def direct_pyrdmacm(n, dst):
    from pyrdmacm import EventChannel
    from pyrdmacm.abi import CmEventType as E

    ch = EventChannel(NullDevice())
    t = [time.perf_counter()]
    ids = [ch.create_id() for _ in range(n)]
    t.append(time.perf_counter())
    for i in ids:
        i.resolve_addr(dst, timeout_ms=2000)
    t.append(time.perf_counter())
    for want in (E.ADDR_RESOLVED, E.ROUTE_RESOLVED):
        _read_events(ch, ids, want, t)
        if want is E.ADDR_RESOLVED:
            for i in ids:
                i.resolve_route(2000)
            t.append(time.perf_counter())
    for i in ids:
        i.destroy()
    t.append(time.perf_counter())
    ch.close()
    return t


def floor_kit(dst):
    """What the hand-written floor drives the commands with (tools/bench's floor worker on
    rdma_cm and ``direct_bare`` here): a ``struct.Struct`` per command from the codecs'
    formats, each command's rdma_ucm_cmd_hdr (from pyrdmacm.abi's command table, not from
    the library's internals), the event reply's head, one reply buffer reused, GET_EVENT
    packed once."""
    from types import SimpleNamespace

    cmd = abi.UserCmCmd

    def header(c):  # rdma_ucm_cmd_hdr: cmd, in (body size), out (reply size)
        body, reply = _structs.COMMANDS[c]
        return struct.pack("<IHH", int(c), body.sizeof(), reply.sizeof() if reply is not None else 0)

    reply = ctypes.create_string_buffer(CODECS["rdma_ucm_event_resp"].size)
    addr = ctypes.addressof(reply)
    return SimpleNamespace(
        h_create=header(cmd.CREATE_ID), h_destroy=header(cmd.DESTROY_ID),
        h_resolve_addr=header(cmd.RESOLVE_ADDR), h_resolve_route=header(cmd.RESOLVE_ROUTE),
        h_connect=header(cmd.CONNECT), h_accept=header(cmd.ACCEPT), h_disconnect=header(cmd.DISCONNECT),
        connect=struct.Struct(CODECS["rdma_ucm_connect"].format),
        accept=struct.Struct(CODECS["rdma_ucm_accept"].format),
        disconnect=struct.Struct(CODECS["rdma_ucm_disconnect"].format),
        create=struct.Struct(CODECS["rdma_ucm_create_id"].format),
        destroy=struct.Struct(CODECS["rdma_ucm_destroy_id"].format),
        resolve=struct.Struct(CODECS["rdma_ucm_resolve_addr"].format),
        route=struct.Struct(CODECS["rdma_ucm_resolve_route"].format),
        head=struct.Struct("<QIIi"),  # uid, id, event, status: the head of rdma_ucm_event_resp
        u32=struct.Struct("<I"),
        storage=dst.pack_storage(), size=dst.size,
        reply=reply, view=memoryview(reply).cast("B"), addr=addr,
        get_event=header(cmd.GET_EVENT) + struct.pack("<Q", addr),
    )


def direct_bare(n, dst):
    """The floor over the same device: tools/bench's hand-written driver."""
    from pyrdmacm.abi import CmEventType as E

    k = floor_kit(dst)
    h_create, h_destroy, h_resolve_addr, h_resolve_route = k.h_create, k.h_destroy, k.h_resolve_addr, k.h_resolve_route
    create, destroy, resolve, route, head, u32 = k.create, k.destroy, k.resolve, k.route, k.head, k.u32
    storage, size, view, addr, get_event = k.storage, k.size, k.view, k.addr, k.get_event
    put, write = _HEAD.pack_into, os.write
    dev = NullDevice()
    fd = dev.fd
    bad = 0
    t = [time.perf_counter()]
    handles = []
    for uid in range(1, n + 1):
        write(fd, h_create + create.pack(uid, addr, 0x106, 2, b""))
        handles.append(u32.unpack_from(view)[0])
    t.append(time.perf_counter())
    for h in handles:
        write(fd, h_resolve_addr + resolve.pack(h, 2000, 0, size, 0, b"", storage))
    t.append(time.perf_counter())
    for code in (int(E.ADDR_RESOLVED), int(E.ROUTE_RESOLVED)):
        for uid in range(1, n + 1):
            put(view, 0, uid, uid, code, 0)
            write(fd, get_event)
            if head.unpack_from(view)[2:] != (code, 0):
                bad += 1
        t.append(time.perf_counter())
        if code == int(E.ADDR_RESOLVED):
            for h in handles:
                write(fd, h_resolve_route + route.pack(h, 2000))
            t.append(time.perf_counter())
    for h in handles:
        write(fd, h_destroy + destroy.pack(addr, h, 0))
    t.append(time.perf_counter())
    dev.close()
    return t


CONN_PHASES = ("create", "resolve_addr", "addr_events", "resolve_route", "route_events", "connect",
               "response_events", "establish", "disconnect", "disconnected_events", "destroy")
_CONN_EVENTS = ("ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECT_RESPONSE", "DISCONNECTED")


def direct_connections_pyrdmacm(n, dst):
    """One client connection's calls, each step over all ``n`` ids (so each is timed apart):
    what tools/bench's pipelined client calls, the events read one by one and acked."""
    from pyrdmacm import CmId, EventChannel
    from pyrdmacm.abi import CmEventType as E

    ch = EventChannel(NullDevice())
    t = [time.perf_counter()]

    def events(name):
        _read_events(ch, ids, E[name], t)

    ids = [CmId(ch) for _ in range(n)]
    t.append(time.perf_counter())
    for i in ids:
        i.resolve_addr(dst, timeout_ms=2000)
    t.append(time.perf_counter())
    events("ADDR_RESOLVED")
    for i in ids:
        i.resolve_route(2000)
    t.append(time.perf_counter())
    events("ROUTE_RESOLVED")
    for i in ids:
        i.connect(qp_num=None)
    t.append(time.perf_counter())
    events("CONNECT_RESPONSE")
    for i in ids:
        i.establish()
    t.append(time.perf_counter())
    for i in ids:
        i.disconnect()
    t.append(time.perf_counter())
    events("DISCONNECTED")
    for i in ids:
        i.destroy()
    t.append(time.perf_counter())
    ch.close()
    return t


def direct_connections_bare(n, dst):
    """The floor of the same steps: tools/bench's hand-written connection client."""
    from pyrdmacm.abi import CmEventType as E

    k = floor_kit(dst)
    write, view, put, head, u32 = os.write, k.view, _HEAD.pack_into, k.head.unpack_from, k.u32.unpack_from
    dev = NullDevice()
    fd = dev.fd
    handles = {}
    t = [time.perf_counter()]

    def events(name, answer=None):
        code = int(E[name])
        for uid in handles:
            put(view, 0, uid, uid, code, 0)
            write(fd, k.get_event)
            u, h, e, st = head(view)
            if e != code or st:
                raise SystemExit("bench_codec: the floor read %r" % ((u, e, st),))
            if answer is not None:
                write(fd, answer(h))
        t.append(time.perf_counter())

    for uid in range(1, n + 1):
        write(fd, k.h_create + k.create.pack(uid, k.addr, 0x106, 2, b""))
        handles[uid] = u32(view)[0]
    t.append(time.perf_counter())
    for h in handles.values():
        write(fd, k.h_resolve_addr + k.resolve.pack(h, 2000, 0, k.size, 0, b"", k.storage))
    t.append(time.perf_counter())
    events("ADDR_RESOLVED")
    for h in handles.values():
        write(fd, k.h_resolve_route + k.route.pack(h, 2000))
    t.append(time.perf_counter())
    events("ROUTE_RESOLVED")
    for q, h in enumerate(handles.values(), 0x100000):
        write(fd, k.h_connect + k.connect.pack(q, 0, b"", 0, 0, 0, 0, 0, 7, 7, 1, h, 0, 0, 0))
    t.append(time.perf_counter())
    events("CONNECT_RESPONSE")
    for h in handles.values():
        write(fd, k.h_accept + k.accept.pack(0, 0, 0, b"", 0, 0, 0, 0, 0, 0, 0, 0, h, 0, 0, 0))
    t.append(time.perf_counter())
    for h in handles.values():
        write(fd, k.h_disconnect + k.disconnect.pack(h))
    t.append(time.perf_counter())
    # DISCONNECTED answered with DISCONNECT (the DREP, should the peer's DREQ have crossed ours),
    # as pyrdmacm's channel does
    events("DISCONNECTED", lambda h: k.h_disconnect + k.disconnect.pack(h))
    for h in handles.values():
        write(fd, k.h_destroy + k.destroy.pack(k.addr, h, 0))
    t.append(time.perf_counter())
    dev.close()
    return t


def direct(n, runs=15, connections=False):
    """ns per id (per connection) and phase, the fastest of ``runs`` interleaved runs."""
    from pyrdmacm import parse_address

    if connections:
        dst, phases = parse_address("10.0.0.2:7099"), CONN_PHASES
        impls = (("bare", direct_connections_bare), ("pyrdmacm", direct_connections_pyrdmacm))
    else:
        dst, phases = parse_address("10.0.0.2"), DIRECT_PHASES
        impls = (("bare", direct_bare), ("pyrdmacm", direct_pyrdmacm))
    best = {}
    for r in range(runs):
        for name, fn in impls[:: 1 if r % 2 else -1]:
            t = fn(n, dst)
            per = [(b - a) / n * 1e9 for a, b in zip(t, t[1:])]
            best[name] = per if name not in best else [min(x, y) for x, y in zip(best[name], per)]
    return {name: dict(zip(phases, v), total=sum(v)) for name, v in best.items()}


def main_direct(connections=False):
    n = _n_arg(2000 if connections else 10000)
    res = direct(n, connections=connections)
    if _json_out({"n": n, "per_connection_ns" if connections else "per_id_ns": res}):
        return
    print("ns per %s, N=%d, fastest of 15 (host; writes are system calls on /dev/null)"
          % ("connection" if connections else "id", n))
    print("%-20s %9s %9s %9s" % ("phase", "bare", "pyrdmacm", "above"))
    for p in (CONN_PHASES if connections else DIRECT_PHASES) + ("total",):
        b, q = res["bare"][p], res["pyrdmacm"][p]
        print("%-20s %9.0f %9.0f %9.0f" % (p, b, q, q - b))


def main():
    if "--commands" in sys.argv:
        return main_commands()
    if "--direct-connections" in sys.argv:
        return main_direct(connections=True)
    if "--direct" in sys.argv:
        return main_direct()
    rows = []
    for name, (fmt, kind, args) in HAND.items():
        codec = CODECS[name]
        con = _structs.STRUCTS[name]
        raw = bytes(codec.size)
        if kind == "pack":
            hand = struct.Struct(fmt)
            t_hand = bench(lambda: hand.pack(*args))
            t_codec = bench(lambda: codec.pack(*args))
            parsed = con.parse(codec.pack(*args))
            t_con = bench(lambda: con.build(parsed), 2000)
            op = "encode"
        elif kind == "unpack":
            hand = struct.Struct(fmt)
            t_hand = bench(lambda: hand.unpack_from(raw))
            t_codec = bench(lambda: codec.unpack_from(raw))
            t_con = bench(lambda: con.parse(raw), 2000)
            op = "decode"
        else:
            # the hand-written decode of a struct with big-endian fields: two formats
            le = struct.Struct("<8sBBHHH128s128sII")
            be = struct.Struct(">Q")

            def hand_be():
                v = le.unpack_from(raw)
                return be.unpack(v[0])[0], v[1:]

            t_hand = bench(hand_be)
            t_codec = bench(lambda: codec.unpack_from(raw))
            t_con = bench(lambda: con.parse(raw), 2000)
            op = "decode"
        rows.append({"struct": name, "op": op, "hand_us": round(t_hand, 3), "codec_us": round(t_codec, 3),
                     "construct_us": round(t_con, 2), "ratio": round(t_codec / t_hand, 2)})
    if "--json" in sys.argv:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    print("%-28s %-6s %9s %9s %12s %6s" % ("struct", "op", "hand us", "codec us", "construct us", "ratio"))
    for r in rows:
        print("%-28s %-6s %9.3f %9.3f %12.2f %6.2f" % (r["struct"], r["op"], r["hand_us"], r["codec_us"],
                                                        r["construct_us"], r["ratio"]))


if __name__ == "__main__":
    main()
