#!/usr/bin/env python3
"""What asyncio itself costs per awaited outcome, with no pyrdmacm in it: N futures made,
gathered, each given its result, the gather awaited. The floor under any asyncio API that
hands out a future per id (pyrdmacm.aio.AsyncChannel.resolve_addr + asyncio.gather).

    tools/bench_asyncio.py [--n 1000,10000] [--runs 5]
    tools/lab run --kernel bookworm -- build/venv/bin/python tools/bench_asyncio.py   # in the lab
"""

import argparse
import asyncio
import statistics
import time


async def per_future(n: int) -> float:
    loop = asyncio.get_running_loop()
    t = time.perf_counter()
    futures = [loop.create_future() for _ in range(n)]
    gathered = asyncio.gather(*futures)
    for f in futures:
        f.set_result(None)
    await gathered
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1000,10000", help="future counts, comma-separated")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    for n in (int(x) for x in args.n.split(",")):
        runs = [asyncio.run(per_future(n)) for _ in range(args.runs)]
        print("N=%d: %.2f us per future (median of %d; fastest %.2f): create + gather + set_result + callback"
              % (n, statistics.median(runs), len(runs), min(runs)))


if __name__ == "__main__":
    main()
