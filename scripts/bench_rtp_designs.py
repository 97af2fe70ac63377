"""The two RTP designs against DDP, their steps interleaved: what notebook 06 section 7 quotes.

    python scripts/bench_rtp_designs.py                  # default LM, 2 CPU ranks, 30 rounds
    python scripts/bench_rtp_designs.py --world-size 4 --steps 20

"simple" is the design the stub describes (every shard's part recomputed in backward, each
layer's last accumulator waited before moving on): solutions/flyweight.py up to its faster
design; "fast" is solutions/flyweight.py, the reference. Both train the `rtp-course bench` model
on the same batches as DDP; round k times one step of each, in a rotated order
(rtp_course.training.timing), and the report gives each one's median step and the median
(and quartiles) of its step-by-step ratio to DDP's, from the slowest rank of each step.
"""
from __future__ import annotations

import argparse
import types
import statistics
import sys
from pathlib import Path

import torch.distributed as dist

from rtp_course.runtime import launcher
from rtp_course.training import strategies, timing
from rtp_course.training.train import (DEFAULT_CONFIGS, Task, make_optimizer, to_device,
                                       train_step)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "flyweight.py"
DESIGNS = ("simple", "fast")
FASTER = "\n# ===== THE FASTER DESIGN"   # the line where the reference's faster design begins


def _flyweight(design: str):
    """The design as a module of the `solutions` package (its rotation.py): the whole
    reference, or, for "simple", the stub's design it starts with."""
    source = REFERENCE.read_text()
    if design == "simple":
        source = source[:source.index(FASTER)]
    module = types.ModuleType(f"solutions.flyweight_{design}")
    module.__package__, module.__file__ = "solutions", str(REFERENCE)
    sys.modules[module.__name__] = module
    exec(compile(source, str(REFERENCE), "exec"), module.__dict__)
    return module


def _worker(rank, world_size, task, warmup, steps):
    sys.path.insert(0, str(ROOT))  # the `solutions` package
    designs = {d: _flyweight(d) for d in DESIGNS}
    device = strategies.default_device()

    def build(name):
        model = task.build().to(device)
        wrapped = (strategies.wrap(model, "ddp", device=device) if name == "ddp"
                   else designs[name].RotatedTensorParallel(model))
        return wrapped, make_optimizer(wrapped.parameters())

    times = timing.interleaved(
        ["ddp", *designs], build, lambda name, st, b: train_step(st[0], st[1], task, b),
        lambda name, k: to_device(strategies.local_batch("ddp", task.batch(k)), device),
        warmup, steps, device)
    dist.barrier()
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=30, help="timed rounds (default 30)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8, help="per rank (default 8)")
    args = p.parse_args(argv)
    task = Task("lm", dict(DEFAULT_CONFIGS["lm"]), args.batch_size * args.world_size, seed=0)
    per_rank = launcher.launch(_worker, args.world_size, (task, args.warmup, args.steps),
                               timeout=3600)
    stats = timing.paired(per_rank)
    print(f"lm {task.config}, {args.world_size} ranks, batch {args.batch_size} per rank, "
          f"{args.steps} interleaved rounds")
    print(f"{'design':8s} {'step ms':>8s}  vs DDP: median (quartiles)")
    for name, row in stats.items():
        ratios = sorted(t / b for t, b in zip(row["steps_s"], stats["ddp"]["steps_s"]))
        q1, q3 = statistics.quantiles(ratios, n=4)[::2] if len(ratios) > 1 else (ratios[0],) * 2
        print(f"{name:8s} {row['median_s'] * 1000:8.1f}  {row['ratio']:.2f} ({q1:.2f}-{q3:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
