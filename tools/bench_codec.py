#!/usr/bin/env python3
"""Encode/decode cost of the hot structs: pyrdmacm's derived codecs vs construct vs a
hand-written struct.Struct of the same layout (the floor). Host only, no kernel.

    tools/bench_codec.py [--json]

Ratios are codec / hand-written; the target is at most 1.5x.
"""

import json
import os
import struct
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyrdmacm import abi  # noqa: E402
from pyrdmacm._codec import CODECS  # noqa: E402

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


def main():
    rows = []
    for name, (fmt, kind, args) in HAND.items():
        codec = CODECS[name]
        con = abi.STRUCTS[name]
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
