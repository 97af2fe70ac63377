"""Notebook 09: ZeRO-1 and FSDP by hand (the student's `sharding` module, E7) at work.

Workers (run with `launch` / `run_demo`):
* ``zero_against_ddp``: the same MLP trained with PyTorch's DDP + Adam and with your
  ShardedOptimizer around Adam, from the same weights on the same batches; losses, the
  largest weight difference, each one's optimizer state bytes, and ZeRO-1's collectives.
* ``fsdp_one_step``: one training step of an MLP wrapped in your FullyShardedDataParallel:
  the shard sizes, the collectives of each phase, the most gathered bytes alive at once,
  and the errors against serial training (DDP semantics).
* ``fsdp_timeline``: forward and backward of larger Linear layers under torch.profiler, every
  all-gather and reduce-scatter your FSDP makes timed (rtp_course.notebook.trace).
``compare_strategies`` runs rtp_course.training.bench from the notebook (demos.rtp's), except
while nbgrader autogrades, where it would grade nothing and cost every submission its time.
"""
import copy
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from rtp_course.course.impl import current
from rtp_course.course.todo import needs_exercises
from rtp_course.notebook.demos import SKIPPED
from rtp_course.notebook.demos import rtp as _rtp
from rtp_course.notebook.trace import Trace, recording_collectives
from rtp_course.runtime import commlog
from rtp_course.training import memory, strategies


def mlp(features=(10, 30, 30, 30, 5), seed=0):
    """Linear layers with Tanh between them: (10, 30): 330 elements, (30, 30): 930, (30, 5):
    155; none a multiple of 4, so 4 ranks pad every layer."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers = []
        for a, b in zip(features[:-1], features[1:]):
            layers += [nn.Linear(a, b), nn.Tanh()]
        return nn.Sequential(*layers[:-1])


def batch(step, rank, rows=4, features=(10, 5)):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(rows, features[0], generator=g), torch.randn(rows, features[-1], generator=g)


def compare_strategies(model, world_size=2, strategies_=("ddp", "fsdp", "rtp"), **kwargs):
    """demos.rtp.compare_strategies: (bench rows, run info); ([], {}) while autograding."""
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        print(f"{SKIPPED} the benchmark is not re-run while autograding: it grades nothing "
              f"(your own run's output is in the notebook you submitted)")
        return [], {}
    return _rtp.compare_strategies(model, world_size, strategies_, **kwargs)


def _count(events) -> dict:
    counts = {}
    for e in events:
        counts[e.family] = counts.get(e.family, 0) + 1
    return counts


def _bytes(events, family) -> int:
    return sum(e.nbytes for e in events if e.family == family)


@needs_exercises
def zero_against_ddp(rank, world_size, steps=5, lr=1e-2):
    """Train mlp() with DDP + Adam and with ShardedOptimizer(Adam); every rank its own batch.
    Returns the global losses of both, the largest weight difference at the end, the
    optimizer state bytes of each on this rank, and ZeRO-1's collectives in one training step
    (backward and step(): gradient hooks may start the reduce-scatters)."""
    sharding = current("sharding")
    commlog.install()
    dev = strategies.default_device()
    out = {"losses": {"DDP": [], "ZeRO-1 (yours)": []}}
    models = {}
    for name in ("DDP", "ZeRO-1 (yours)"):
        model = mlp().to(dev)
        if name == "DDP":
            net = strategies.wrap(model, "ddp", device=dev)
            opt = torch.optim.Adam(net.parameters(), lr=lr)
        else:
            net = model
            opt = sharding.ShardedOptimizer(net.parameters(), torch.optim.Adam, lr=lr)
        for step in range(steps):
            x, y = (t.to(dev) for t in batch(step, rank))
            commlog.reset(f"{name} step")     # backward too: hooks may reduce-scatter there
            opt.zero_grad()
            loss = F.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            if name != "DDP":
                events = commlog.events()
                out["zero step"] = {"calls": _count(events),
                                    "reduce_scatter bytes": _bytes(events, "reduce_scatter"),
                                    "all_gather bytes": _bytes(events, "all_gather")}
            out["losses"][name].append(strategies.global_loss("ddp", loss))
        out[f"{name} optimizer bytes"] = memory.optimizer_state_bytes(
            getattr(opt, "optimizer", opt))
        models[name] = getattr(net, "module", net)
    out["max weight difference"] = max(
        (a - b).abs().max().item() for a, b in zip(models["DDP"].parameters(),
                                                   models["ZeRO-1 (yours)"].parameters()))
    out["parameter bytes"] = memory.param_bytes(models["DDP"])
    return out


@needs_exercises
def fsdp_one_step(rank, world_size, lr=1e-2):
    """One Adam step of mlp() wrapped in FullyShardedDataParallel, each rank its own batch.
    Returns the shard elements, the collectives and bytes of forward, backward and the step,
    the most gathered bytes alive at once, and the errors against serial training."""
    sharding = current("sharding")
    commlog.install()
    dev = strategies.default_device()
    serial = mlp().to(dev)
    fsdp = sharding.FullyShardedDataParallel(copy.deepcopy(serial))
    opt = torch.optim.Adam(fsdp.parameters(), lr=lr)
    probe = strategies.CommunicationProbe("fsdp_yours", fsdp)
    x, y = (t.to(dev) for t in batch(0, rank))
    phases = {}
    with probe, torch.autograd.graph.saved_tensors_hooks(lambda t: (probe.sample(), t)[1],
                                                         lambda t: (probe.sample(), t)[1]):
        commlog.reset("forward")
        pred = fsdp(x)
        phases["forward"] = commlog.events()
        commlog.reset("backward")
        F.mse_loss(pred, y).backward()
        phases["backward"] = commlog.events()
    commlog.reset("step")
    opt.step()
    phases["step"] = commlog.events()
    state = fsdp.full_state_dict()
    # serial training with DDP semantics: the mean over ranks of each rank's loss
    sopt = torch.optim.Adam(serial.parameters(), lr=lr)
    expected = serial(x).detach()
    loss = sum(F.mse_loss(serial(xq.to(dev)), yq.to(dev))
               for xq, yq in (batch(0, q) for q in range(world_size))) / world_size
    loss.backward()
    sopt.step()
    return {"shard elements": [p.numel() for p in fsdp.parameters()],
            "serial elements": [sum(p.numel() for p in m.parameters())
                                for m in serial if any(True for _ in m.parameters())],
            "calls": {k: _count(v) for k, v in phases.items()},
            "all_gather bytes": {k: _bytes(v, "all_gather") for k, v in phases.items()},
            "reduce_scatter bytes": _bytes(phases["backward"], "reduce_scatter"),
            "gathered peak": probe.peak_bytes(),
            "shard bytes": memory.param_bytes(fsdp), "serial bytes": memory.param_bytes(serial),
            "output error": (pred.detach() - expected).abs().max().item(),
            "weight error": max((state[k] - v).abs().max().item()
                                for k, v in serial.state_dict().items())}


def describe_fsdp(results) -> str:
    """fsdp_one_step's results, a few lines."""
    r0 = results[0]
    lines = [f"units (layers): {len(r0['serial elements'])}, elements "
             f"{r0['serial elements']}; each rank's shards: {r0['shard elements']} "
             f"(S = ceil(P / {len(results)}))",
             f"parameters per rank: {r0['shard bytes']} bytes (serial model: {r0['serial bytes']})"]
    for phase in ("forward", "backward", "step"):
        calls = ", ".join(f"{n} x {k}" for k, n in r0["calls"][phase].items()) or "none"
        lines.append(f"rank 0, {phase}: {calls}; all-gathered {r0['all_gather bytes'][phase]} bytes"
                     + (f", reduce-scattered {r0['reduce_scatter bytes']} bytes"
                        if phase == "backward" else ""))
    elsize = r0["shard bytes"] // sum(r0["shard elements"])
    largest = elsize * len(results) * max(r0["shard elements"])
    lines.append(f"most gathered bytes alive at once on rank 0 (units and full gradients): "
                 f"{r0['gathered peak']}; the largest unit gathered is {largest} bytes")
    lines.append("largest error against serial training: output "
                 + ", ".join(f"{r['output error']:.1e}" for r in results) + "; weights after "
                 "one Adam step " + ", ".join(f"{r['weight error']:.1e}" for r in results))
    return "\n".join(lines)


@needs_exercises
def fsdp_timeline(rank, world_size, features=1024, layers=4, batch_size=256):
    """Forward and backward of `layers` Linear(features, features) layers (ReLU between) in
    FullyShardedDataParallel under torch.profiler, every all-gather and reduce-scatter timed.
    Returns {"forward": intervals, "backward": intervals, "events": the trace events}."""
    sharding = current("sharding")
    dev = strategies.default_device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        parts = []
        for _ in range(layers):
            parts += [nn.Linear(features, features), nn.ReLU()]
        model = nn.Sequential(*parts[:-1]).to(dev)
    fsdp = sharding.FullyShardedDataParallel(model)
    x = torch.randn(batch_size, features, generator=torch.Generator().manual_seed(rank)).to(dev)
    fsdp(x).sum().backward()                       # warm-up
    fsdp.zero_grad()
    with Trace() as tr:
        dist.barrier()
        tr.restart()
        with recording_collectives(tr, "forward"):
            y = fsdp(x)
        start = tr.now()
        with recording_collectives(tr, "backward"):
            y.sum().backward()
    out = tr.intervals()
    return {"forward": [i for i in out if i.start < start],
            "backward": [i for i in out if i.start >= start], "events": tr.events()}
