#!/usr/bin/env python3
"""Reproducer of conformance.KNOWN_BUGS["set_ib_path_without_handler_lock"], for a kernel
developer: SET_OPTION IB_PATH on an id, racing MIGRATE_ID of that id to a second fd.

ucma_set_ib_path() hands its ROUTE_RESOLVED to ucma_event_handler() without the id's handler
lock; ucma_migrate_id() changes ctx->file under that lock.  The event handler locks
ctx->file->mut and unlocks ctx->file->mut, reading ctx->file each time: when the migration
lands in between, the old file's mutex stays locked, and the next MIGRATE_ID (or any command
that takes it, or the fd's release) blocks for good.

Usage (root, a kernel with rdma_cm and an RDMA device whose netdev has ADDRESS, e.g. rxe;
the lab's 6.1 guest with two CPUs and preempt=full hung after about 300 and 500 tries of this
very loop; a variant that read the events without waiting ran thousands of tries without
hanging: the window is narrow, and what widens it is not known):

    PYTHONPATH=. python3 tools/repro/set_ib_path_vs_migrate.py ADDRESS [TRIES]

When a try does not finish within 10 s a watchdog thread prints the kernel stacks of the
process's threads and the kernel log's last lines, and exits 1 -- which the process cannot
finish while its writer is blocked (reboot).  Exit 0: TRIES tries, no hang.
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


def drain(raw: Raw) -> None:
    """Read the fd's events until none comes within 20 ms (the loop that hung, measured)."""
    while select.select([raw.dev.fileno()], [], [], 0.02)[0] and not raw.get_event():
        pass


def tries_loop(address: str, tries: int, progress: int) -> None:
    a = Raw()
    b = Raw.beside(a)
    optval = ReplyBuffer(ENTRY_SIZE)
    optval.view[:4] = GMP_PRIMARY_BIDIRECTIONAL.to_bytes(4, "little")  # a zero record: the kernel takes it
    dst = parse_address(address)
    for _ in range(tries):
        h = a.create()
        if a.resolve(h, dst) or not select.select([a.dev.fileno()], [], [], 5)[0] or a.get_event():
            sys.exit("RESOLVE_ADDR of %s gave no ADDR_RESOLVED: give the address of an RDMA netdev" % address)
        gate = threading.Barrier(2)
        answers = {}

        def set_path() -> None:
            gate.wait()
            answers["set"] = a.cmd(14, "rdma_ucm_set_option", {"optval": optval.address, "id": h, "level": 1,
                                                               "optname": 1, "optlen": ENTRY_SIZE})

        def migrate() -> None:
            reply = ReplyBuffer(8)
            gate.wait()
            answers["migrate"] = b.cmd(18, "rdma_ucm_migrate_id", {"response": reply.address, "id": h,
                                                                   "fd": a.dev.fileno()}, out=4)

        threads = [threading.Thread(target=set_path), threading.Thread(target=migrate)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        drain(a)
        drain(b)
        (b if answers["migrate"] == 0 else a).destroy(h)
        os.write(progress, b".")
    os.write(progress, b"!")
    time.sleep(60)  # the watchdog reports and exits


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    address, tries = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    r, w = os.pipe()
    done = [0]

    def watchdog() -> None:  # the tries run in this process: the watchdog reports a hang
        start = time.monotonic()
        while True:
            if not select.select([r], [], [], 10)[0]:
                print("try %d did not finish in 10 s: the kernel holds a writer" % (done[0] + 1), flush=True)
                for tid in sorted(os.listdir("/proc/self/task")):
                    with open("/proc/self/task/%s/stack" % tid) as f:
                        print("thread %s:\n%s" % (tid, f.read()), flush=True)
                os.system("dmesg | tail -n 30")
                print("(this process cannot exit while that thread is blocked)", flush=True)
                os._exit(1)
            got = os.read(r, 64)
            done[0] += len(got.rstrip(b"!"))
            if got.endswith(b"!"):
                print("%d tries in %.0f s, no hang" % (done[0], time.monotonic() - start), flush=True)
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    tries_loop(address, tries, w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
