"""Round trips through the checker's relay (runtime/relay), per operation, on 2 ranks.

    python scripts/bench_relay.py [--repeat 300]

Each rank asks the parent for its own data (an owned randn), all-reduces 4 floats, and
makes one rotation (a batch_isend_irecv of a send and a receive), `--repeat` times each;
prints the mean time of each in microseconds, per rank. What the relay costs a check
(DESIGN.md, "The relay"; docs/PERFORMANCE.md).
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rtp_course.checker import common, inputs
from rtp_course.checker.registry import Check
from rtp_course.runtime.relay import group, server


class _Timed(Check):
    exercise, name = "comm", "bench_relay"


def _rank(rank: int, world: int, socks, repeat: int, out) -> None:
    for r, sock in enumerate(socks):
        if r != rank:
            sock.close()
    group.connect(socks[rank], rank)
    dist.init_process_group("relay", store=dist.HashStore(), rank=rank, world_size=world)
    inputs.enter_relay_rank(rank, group.ask_input)
    group.mark(0, "bench")
    x, got = torch.zeros(4), torch.empty(4)

    def per_op(fn) -> int:
        start = time.perf_counter()
        for k in range(repeat):
            fn(k)
        return round((time.perf_counter() - start) / repeat * 1e6)

    def rotation(_):
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % world),
                                         dist.P2POp(dist.irecv, got, (rank - 1) % world)]):
            w.wait()
    out.put((rank, per_op(lambda k: common.randn(k, 3, 5, owner=rank)),
             per_op(lambda _: dist.all_reduce(x)), per_op(rotation)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    world = 2
    relay = server.Relay(world, inputs.Provider(world, [_Timed()], None), checks=1).start()
    ctx = mp.get_context("forkserver")
    out = ctx.SimpleQueue()
    ranks = [ctx.Process(target=_rank, args=(r, world, relay.rank_ends(), args.repeat, out))
             for r in range(world)]
    for p in ranks:
        p.start()
    relay.close_rank_ends()
    print("rank  owned randn  all_reduce  rotation   (us per operation)")
    for rank, owned, reduce, rotate in sorted(out.get() for _ in range(world)):
        print(f"{rank:>4}  {owned:>11}  {reduce:>10}  {rotate:>8}")
    for p in ranks:
        p.join()
    relay.stop()


if __name__ == "__main__":
    main()
