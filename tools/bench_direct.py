"""The direct write path's micro-benchmark (``tools/bench_codec.py --direct`` and
``--direct-connections``): the code path the lab takes, the channel writing through the
kernel device's own ``write``, with /dev/null as the device (every command a real system
call that does nothing, each event put into the reply buffer before its GET_EVENT), for
pyrdmacm and the hand-written floor, per id (or connection) and step.  ``floor_kit`` is the
floor's own kit, which tools/bench's lab benchmarks run too."""

import ctypes
import os
import struct
import sys
import time

# this checkout's package, unless one is importable already (tools/bench_instructions.py puts
# another revision's first, to measure it on the same path)
try:
    import pyrdmacm  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyrdmacm import abi  # noqa: E402
try:
    from pyrdmacm.abi import structs as _structs  # noqa: E402
    from pyrdmacm.abi.codec import CODECS  # noqa: E402
    from pyrdmacm.core.device import KernelDevice  # noqa: E402
except ImportError:  # a revision before the floor plan (#36), measured as a baseline
    from pyrdmacm import _structs  # type: ignore  # noqa: E402
    from pyrdmacm._codec import CODECS  # type: ignore  # noqa: E402
    from pyrdmacm._device import KernelDevice  # type: ignore  # noqa: E402


class NullDevice(KernelDevice):
    """The kernel device's own code (its write, with the count of calls in flight, and its
    close) on /dev/null: every command is a real, cheap system call, as on rdma_cm. No
    reply is written: the caller puts each event into the reply buffer."""

    legacy = False

    def _open(self):
        fd = self.fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        st = os.fstat(fd)
        if hasattr(self, "_own"):
            self._own(fd, st)
            return
        # an older revision's device (a baseline): its own bookkeeping
        self._fd = fd
        if hasattr(self, "_slot"):
            self._slot.append(fd)
        else:
            self._number = fd
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


def direct_bare(n, dst, batch=False):
    """The floor over the same device: tools/bench's hand-written driver.  ``batch``: the
    floor of the batch runs, its events read from the event source the library's batch
    reads (and a ``setup`` phase, not counted, that prepares it)."""
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
    if batch:
        heads = list(zip(range(1, n + 1), handles))
        t.append(time.perf_counter())  # the end of setup (not counted)
    for h in handles:
        write(fd, h_resolve_addr + resolve.pack(h, 2000, 0, size, 0, b"", storage))
    t.append(time.perf_counter())
    for code in (int(E.ADDR_RESOLVED), int(E.ROUTE_RESOLVED)):
        if batch:
            source = event_source(view, heads, code)
            for _ in range(n):
                source(get_event)
                if head.unpack_from(view)[2:] != (code, 0):
                    bad += 1
        else:
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
    if bad:
        raise SystemExit("bench_direct: the floor read %d wrong events" % bad)
    return t


BATCH_PHASES = ("create", "setup", "resolve_addr", "addr_events", "resolve_route", "route_events", "destroy")


def event_source(view, heads, code):
    """A write that puts the next of ``heads`` (uid, handle) into the reply ``view`` as event
    ``code`` for each GET_EVENT (no system call), and once they ran out says what an empty
    queue says (EAGAIN): what the batch runs read their events from, floor and library alike
    (a burst's GET_EVENTs follow each other with no caller between them)."""
    it = iter(heads)
    put = _HEAD.pack_into

    def write(data):
        for uid, handle in it:
            put(view, 0, uid, handle, code, 0)
            return 0
        raise BlockingIOError

    return write


def direct_batch_pyrdmacm(n, dst):
    """The calls for many ids: create_ids, resolve_addrs, get_batch, resolve_routes,
    destroy_ids."""
    from pyrdmacm import EventChannel
    from pyrdmacm.abi import CmEventType as E

    ch = EventChannel(NullDevice())
    get_batch = getattr(ch, "get_batch", None)
    if get_batch is None or not hasattr(ch, "_write"):
        raise SystemExit("bench_direct: this revision has no get_batch, or its channel no _write to read "
                         "events through: the batch run measures this tree's")
    t = [time.perf_counter()]
    ids = ch.create_ids(n)
    t.append(time.perf_counter())
    heads = [(i.uid, i.handle) for i in ids]
    view, device_write = ch._r_event.view, ch._write
    t.append(time.perf_counter())  # the end of setup (not counted)
    ch.resolve_addrs(ids, dst, timeout_ms=2000)
    t.append(time.perf_counter())
    for want in (E.ADDR_RESOLVED, E.ROUTE_RESOLVED):
        ch._write = event_source(view, heads, int(want))  # the event phase's GET_EVENTs
        got = bad = 0
        while got < n:
            b = get_batch(64, 0)
            if not b.events:
                break  # the source ran out: fewer than n came
            got += len(b.events)
            bad += len(b.events) - b.events.count(want) + any(b.statuses)  # C-level checks, as the floor's compare
        if bad or got != n:
            raise SystemExit("bench_direct: the batch read %d events, %d of them wrong" % (got, bad))
        ch._write = device_write
        t.append(time.perf_counter())
        if want is E.ADDR_RESOLVED:
            ch.resolve_routes(ids, 2000)
            t.append(time.perf_counter())
    ch.destroy_ids(ids)
    t.append(time.perf_counter())
    ch.close()
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
