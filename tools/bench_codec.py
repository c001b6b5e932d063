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

from pyrdmacm.abi import structs as _structs  # noqa: E402
from pyrdmacm.abi.codec import CODECS  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_direct, beside it

from bench_direct import CONN_PHASES, DIRECT_PHASES, direct  # noqa: E402

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
