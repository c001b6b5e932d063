#!/usr/bin/env python3
"""Reproducer of conformance.KNOWN_BUGS["set_ib_path_without_handler_lock"], for a kernel
developer: SET_OPTION IB_PATH on an id, racing MIGRATE_ID of that id to a second fd.

ucma_set_ib_path() hands its ROUTE_RESOLVED to ucma_event_handler() without the id's handler
lock; ucma_migrate_id() changes ctx->file under that lock.  The event handler locks
ctx->file->mut and unlocks ctx->file->mut, reading ctx->file each time: when the migration
lands in between, the old file's mutex stays locked, and the next MIGRATE_ID (or any command
that takes it, or the fd's release) blocks for good.

Usage (root, a kernel with rdma_cm and an RDMA device whose netdev has ADDRESS, e.g. rxe;
two CPUs, and preempt=full where the kernel allows it, make it come within seconds):

    PYTHONPATH=. python3 tools/repro/set_ib_path_vs_migrate.py ADDRESS [TRIES]

The racing runs in a child process: when a try does not finish within 10 s the parent prints
the child's kernel stacks and the kernel log's last lines, says so and exits 1, leaving the
child blocked in the kernel (it cannot be killed).  Exit 0: TRIES tries, no hang.
"""

import os
import select
import sys
import threading
import time

from pyrdmacm.addr import parse_address
from pyrdmacm.conformance import Raw
from pyrdmacm.core.device import ReplyBuffer

GMP_PRIMARY_BIDIRECTIONAL = 0x2B  # IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL
ENTRY_SIZE = 72  # struct ib_path_rec_data: flags, reserved, path_rec[16] (__u32 each)


def child(address: str, tries: int, progress: int) -> None:
    a = Raw()
    b = Raw.beside(a)
    optval = ReplyBuffer(ENTRY_SIZE)
    optval.view[:4] = GMP_PRIMARY_BIDIRECTIONAL.to_bytes(4, "little")  # a zero record: the kernel takes it
    migrated = ReplyBuffer(8)
    dst = parse_address(address)
    for i in range(tries):
        h = a.create()
        if a.resolve(h, dst) or not select.select([a.dev.fileno()], [], [], 5)[0] or a.get_event():
            sys.exit("RESOLVE_ADDR of %s gave no ADDR_RESOLVED: give the address of an RDMA netdev" % address)
        gate = threading.Barrier(2)

        def set_path() -> None:
            gate.wait()
            a.cmd(14, "rdma_ucm_set_option", {"optval": optval.address, "id": h, "level": 1, "optname": 1,
                                              "optlen": ENTRY_SIZE})

        def migrate() -> None:
            gate.wait()
            b.cmd(18, "rdma_ucm_migrate_id", {"response": migrated.address, "id": h, "fd": a.dev.fileno()},
                  out=4)

        threads = [threading.Thread(target=set_path), threading.Thread(target=migrate)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        while select.select([b.dev.fileno()], [], [], 0)[0] and not b.get_event():
            pass
        while select.select([a.dev.fileno()], [], [], 0)[0] and not a.get_event():
            pass
        b.destroy(h) and a.destroy(h)
        os.write(progress, b".")
    os.write(progress, b"!")
    os._exit(0)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    address, tries = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(address, tries, w)
    os.close(w)
    done, start = 0, time.monotonic()
    while True:
        if not select.select([r], [], [], 10)[0]:
            print("try %d did not finish in 10 s: the kernel holds the child (pid %d)" % (done + 1, pid))
            for tid in sorted(os.listdir("/proc/%d/task" % pid)):
                with open("/proc/%d/task/%s/stack" % (pid, tid)) as f:
                    print("thread %s:\n%s" % (tid, f.read()))
            os.system("dmesg | tail -n 30")
            return 1
        got = os.read(r, 64)
        if not got or got.endswith(b"!"):
            done += len(got.rstrip(b"!"))
            print("%d tries in %.0f s, no hang" % (done, time.monotonic() - start))
            return 0 if got else 1
        done += len(got)


if __name__ == "__main__":
    sys.exit(main())
