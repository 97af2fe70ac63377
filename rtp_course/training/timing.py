"""Step times that hold on a shared, noisy machine: strategies interleaved step by step.

Timing one strategy's steps, then the next one's, lets a burst of load from
elsewhere land on one strategy only: on a shared 2-core machine the same code
gave RTP/DDP ratios from 1.2 to 1.9 between runs. Here every strategy's model
is alive at once and the timed steps go round-robin (step k: each strategy
once, the order rotated every step), so a burst slows the strategies of that
round alike, and the ratio of two strategies is taken within each round
(paired), then the median of those ratios is reported with its spread.

    times = interleaved(["ddp", "rtp"], build, batch, steps=10, device=dev)   # in every rank
    stats = paired(per_rank_times)                                             # in the parent
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(names, build, step, batch, warmup: int, steps: int, device) -> dict:
    """{name: [seconds of timed step k]} on this rank.

    build(name) -> state (model, optimizer ...) built once per name; step(name, state, batch)
    runs one training step; batch(name, k) is step k's batch. Every name is warmed up
    `warmup` steps first; a barrier starts each timed step on every rank together."""
    states = {}
    for name in names:
        states[name] = build(name)
        for k in range(warmup):
            step(name, states[name], batch(name, k))
    times = {name: [] for name in names}
    for k in range(steps):
        shift = k % len(names)
        for name in names[shift:] + names[:shift]:     # no strategy always first after a barrier
            b = batch(name, warmup + k)
            dist.barrier()
            _sync(device)
            start = time.perf_counter()
            step(name, states[name], b)
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def paired(per_rank: list[dict], base: str = "ddp", bases: dict | None = None) -> dict:
    """From every rank's {name: [seconds]}: per name, the step time of the group (the slowest
    rank at each step), its median, and the median and range of its ratios to its base taken
    step by step: bases[name] where given (None: no ratio), else `base`.
    {name: {"median_s", "steps_s", "ratio", "ratio_low", "ratio_high"}}."""
    names = per_rank[0].keys() if per_rank else []
    slowest = {n: [max(r[n][k] for r in per_rank) for k in range(len(per_rank[0][n]))] for n in names}
    out = {}
    for n, ts in slowest.items():
        row = {"median_s": statistics.median(ts), "steps_s": ts}
        own = (bases or {}).get(n, base)
        if own in slowest and slowest[own]:
            ratios = [t / b for t, b in zip(ts, slowest[own])]
            row.update(ratio=statistics.median(ratios), ratio_low=min(ratios), ratio_high=max(ratios))
        out[n] = row
    return out
