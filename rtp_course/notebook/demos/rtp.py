"""Notebook 06: Rotated Tensor Parallelism (the student's `flyweight` module, E5) at work.

Workers (run with `launch` / `run_demo`):
* ``layer_demo``: one layer wrapped in FlyweightWrapper, each rank feeding its own batch;
  shard shapes, errors against the serial layer and the DDP-averaged gradient, the
  point-to-point traffic, and the most received bytes held at once.
* ``layer_timeline``: compute, weight and accumulator rotations of one large wrapped
  Linear, forward and backward, recorded by torch.profiler (rtp_course.notebook.trace).
* ``train_against_ddp``: the same model trained with RotatedTensorParallel and with
  PyTorch's DistributedDataParallel on the same batches; losses, and the gathered
  full_state_dict against DDP's weights.
``compare_strategies`` runs rtp_course.training.bench (DDP, FSDP, RTP, ...) from the notebook.
"""
import argparse
import contextlib
import copy

import torch
import torch.distributed as dist
from torch import nn

from rtp_course.runtime import commlog
from rtp_course.training import strategies
from rtp_course.course.todo import needs_exercises
from rtp_course.course.impl import current
from rtp_course.models import TINY_CONFIGS
from rtp_course.notebook.trace import Trace, recording_rotations
from rtp_course.training.train import DEFAULT_CONFIGS, Task, make_optimizer, to_device, train_step

LAYERS = {  # kind -> (serial layer, this rank's input)
    "linear": (lambda: nn.Linear(8, 10), lambda g: torch.randn(4, 8, generator=g)),
    "attention": (lambda: nn.MultiheadAttention(12, 6, batch_first=True),
                  lambda g: torch.randn(2, 5, 12, generator=g)),
}


def _serial(kind, device):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LAYERS[kind][0]().to(device)


def _input(kind, rank, device):
    return LAYERS[kind][1](torch.Generator().manual_seed(10 + rank)).to(device)


def _call(layer, kind, x):
    return layer(x, x, x, need_weights=False)[0] if kind == "attention" else layer(x)


def _probe(y, rank):
    """A fixed dL/dy per rank: loss = sum(y * probe)."""
    return torch.randn(y.shape, generator=torch.Generator().manual_seed(20 + rank)).to(y.device)


@needs_exercises
def layer_demo(rank, world_size, kind="linear"):
    """FlyweightWrapper on one layer; every rank its own input. Returns shapes, errors,
    p2p counts per phase and the peak received bytes held at once per phase."""
    fly = current("flyweight")
    commlog.install()
    dev = strategies.default_device()
    serial = _serial(kind, dev)
    x = _input(kind, rank, dev)
    # DDP's gradient: the mean over ranks of the serial layer's gradient on each rank's batch.
    ddp_grads = {}
    for q in range(world_size):
        serial.zero_grad()
        xq = _input(kind, q, dev)
        y = _call(serial, kind, xq)
        (y * _probe(y, q)).sum().backward()
        for name, p in serial.named_parameters():
            ddp_grads[name] = ddp_grads.get(name, 0) + p.grad / world_size
    expected = _call(serial, kind, x).detach()

    commlog.reset("construction")
    wrapper = fly.FlyweightWrapper(copy.deepcopy(serial))
    comm, peaks = {}, {}
    commlog.reset("forward")
    base = commlog.STATE.live_recv                # received buffers still alive from before
    y = _call(wrapper, kind, x)
    comm["forward"], peaks["forward"] = commlog.events(), commlog.STATE.peak_recv.get("forward", base) - base
    commlog.reset("backward")
    (y * _probe(y, rank)).sum().backward()
    comm["backward"], peaks["backward"] = commlog.events(), commlog.STATE.peak_recv.get("backward", base) - base

    errors = {"output": (y.detach() - expected).abs().max().item()}
    shapes = {}
    for key, (dim, spans) in wrapper.shard_ranges(rank).items():
        shard = wrapper.module.get_parameter(key)
        full = ddp_grads[key]
        want = torch.cat([full.narrow(dim, a, b - a) for a, b in spans], dim) if spans \
            else full.narrow(dim, 0, 0)
        shapes[key] = (list(shard.shape), list(full.shape), spans)
        errors[f"grad {key}"] = (shard.grad - want).abs().max().item() if want.numel() else 0.0
    kinds = {phase: _count(events) for phase, events in comm.items()}
    return {"shapes": shapes, "errors": errors, "comm": kinds, "peak_recv": peaks,
            "shard_bytes": sum(p.numel() * p.element_size() for p in wrapper.parameters())}


@needs_exercises
def moe_demo(rank, world_size, experts=8):
    """RotatedTensorParallel on the course's MoE layer (top-2 of `experts`); every rank its
    own tokens. Returns the experts this rank holds, the largest errors against serial DDP
    (output, aux loss, router and expert gradients) and the experts' bytes per rank."""
    from rtp_course.models.moe import MoE
    fly = current("flyweight")
    dev = strategies.default_device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        serial = MoE(dim=6, hidden=16, num_experts=experts, top_k=2).to(device=dev)

    def tokens(q):
        return torch.randn(16, 6, generator=torch.Generator().manual_seed(10 + q)).to(dev)

    ddp = {}   # the mean over ranks of the serial gradients (loss: sum(y * probe) + aux)
    for q in range(world_size):
        serial.zero_grad()
        y, aux = serial(tokens(q))
        ((y * _probe(y, q)).sum() + aux).backward()
        for name, p in serial.named_parameters():
            ddp[name] = ddp.get(name, 0) + p.grad / world_size
    want_y, want_aux = (t.detach() for t in serial(tokens(rank)))
    rtp = fly.RotatedTensorParallel(copy.deepcopy(serial))
    y, aux = rtp(tokens(rank))
    ((y * _probe(y, rank)).sum() + aux).backward()
    layout = rtp.shard_layout()[""]
    params = dict(rtp.named_parameters())
    errors = {"output y": (y - want_y).abs().max().item(), "aux loss": (aux - want_aux).abs().item(),
              "grad router.weight": max((p.grad - ddp["router.weight"]).abs().max().item()
                                        for n, p in params.items() if n.endswith("router.weight"))}
    worst = 0.0
    for key, info in layout["params"].items():
        if info["ranges"]:
            worst = max(worst, (params[info["name"]].grad - ddp[key]).abs().max().item())
    errors["grad of its experts"] = worst
    size = sum(p.numel() * p.element_size() for n, p in serial.named_parameters()
               if n.startswith("experts."))
    held = sum(params[i["name"]].numel() * params[i["name"]].element_size()
               for i in layout["params"].values())
    return {"experts": layout["units"], "errors": errors, "expert bytes": held,
            "serial expert bytes": size}


def _count(events):
    counts = {}
    for e in events:
        counts[e.kind] = counts.get(e.kind, 0) + 1
    return counts


def describe(results) -> str:
    """layer_demo's per-rank results as a few readable lines."""
    lines = []
    for r, res in enumerate(results):
        held = ", ".join(f"{k} {s} of {f} (slices {spans})" for k, (s, f, spans) in res["shapes"].items())
        lines.append(f"rank {r} holds: {held}")
    lines.append("largest error: output vs serial on this rank's batch; gradients vs the same "
                 "slice of the DDP-averaged gradient")
    lines.append(f"{'':>26}" + "".join(f"{f'rank {r}':>10}" for r in range(len(results))))
    for name in results[0]["errors"]:
        lines.append(f"{name:>26}" + "".join(f"{res['errors'][name]:10.1e}" for res in results))
    for phase in ("forward", "backward"):
        calls = ", ".join(f"{n} x {k}" for k, n in results[0]["comm"][phase].items()) or "none"
        lines.append(f"rank 0, {phase}: {calls}; at most {results[0]['peak_recv'].get(phase, 0)} "
                     f"received bytes held at once (own shard: {results[0]['shard_bytes']} bytes)")
    return "\n".join(lines)


@needs_exercises
def layer_timeline(rank, world_size, features=1024, batch=256):
    """Forward and backward of one wrapped Linear(features, features) under torch.profiler,
    every rotation timed and named by what it carries (a weight shard or an accumulator).
    Returns {"forward": intervals, "backward": intervals, "events": the trace events}."""
    fly, rot = current("flyweight"), current("rotation")
    dev = strategies.default_device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        linear = nn.Linear(features, features).to(dev)
    weights = torch.cat([p.detach().flatten() for p in linear.parameters()]).sort().values
    layer = fly.FlyweightWrapper(linear)
    x = torch.randn(batch, features, generator=torch.Generator().manual_seed(rank)).to(dev)
    layer(x).sum().backward()                    # warm-up
    layer.zero_grad()

    def kind_of(tensor):          # a weight shard holds the layer's own values, bit for bit
        probe = tensor.detach().flatten()[:16].to(weights.device, weights.dtype)
        at = torch.searchsorted(weights, probe).clamp(max=weights.numel() - 1)
        return "weight rotation" if bool((weights[at] == probe).all()) else "accumulator rotation"

    with Trace() as tr:
        dist.barrier()
        tr.restart()
        with recording_rotations(rot, tr, "forward", kind_of):
            y = layer(x)
        start = tr.now()
        with recording_rotations(rot, tr, "backward", kind_of):
            y.sum().backward()
    out = tr.intervals()
    return {"forward": [i for i in out if i.start < start],
            "backward": [i for i in out if i.start >= start], "events": tr.events()}


@contextlib.contextmanager
def without_tf32():
    """Full fp32 products: on Ampere and later GPUs cuDNN's convolutions (and matmuls where
    enabled) use TF32 by default, whose 10-bit mantissa puts two correct implementations
    about 1e-3 apart, where fp32 puts them about 1e-5 apart. Nothing changes on a CPU."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = matmul.allow_tf32, cudnn.allow_tf32
    matmul.allow_tf32 = cudnn.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved


@needs_exercises
def train_against_ddp(rank, world_size, model="cnn", steps=8, batch=8, lr=1e-3, tiny=True):
    """Train `model` with RTP and with torch DDP from the same weights on the same batches
    (`batch` samples per rank; the checkers' tiny shapes unless tiny=False), TF32 off (see
    without_tf32). Returns the per-step global losses of both, the largest difference between
    RTP's gathered full_state_dict and DDP's weights, and the TF32 settings it ran with."""
    with without_tf32():
        out = _train_both(model, steps, batch, lr, tiny, world_size)
        out["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                       "cudnn": torch.backends.cudnn.allow_tf32}
    return out


def _train_both(model, steps, batch, lr, tiny, world_size) -> dict:
    config = dict((TINY_CONFIGS if tiny else DEFAULT_CONFIGS)[model])
    task = Task(model, config, batch * world_size, seed=0)
    dev = strategies.default_device()
    out = {}
    for strategy in ("ddp", "rtp"):
        net = strategies.wrap(task.build(), strategy, device=dev)
        optimizer = make_optimizer(net.parameters(), "adam", lr)
        losses = []
        for step in range(steps):
            local = to_device(strategies.local_batch(strategy, task.batch(step)), dev)
            losses.append(strategies.global_loss(strategy, train_step(net, optimizer, task, local)))
        out[strategy] = {"losses": losses,
                         "state": net.full_state_dict() if strategy == "rtp" else
                         {k: v.detach().clone() for k, v in net.module.state_dict().items()}}
    rtp_state, ddp_state = out["rtp"].pop("state"), out["ddp"].pop("state")
    out["max weight difference"] = max((rtp_state[k] - v).abs().max().item() for k, v in ddp_state.items())
    out["same keys"] = sorted(rtp_state) == sorted(ddp_state)
    return out


def compare_strategies(model, world_size=2, strategies_=("ddp", "fsdp", "rtp"), steps=2, warmup=1,
                       batch_size=8, timeout=300, **flags):
    """rtp_course.training.bench on `model` ("cnn", "lm", "bert"): (rows, info). flags: model sizes
    (ninp=..., nhid=...) or tiny=True. Runs the strategies one after another on one launch."""
    from rtp_course.training import bench
    argv = ["--model", model, "--world-size", str(world_size), "--strategies", *strategies_,
            "--steps", str(steps), "--warmup", str(warmup), "--batch-size", str(batch_size),
            "--timeout", str(timeout)]
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}"] if value is True else [f"--{key.replace('_', '-')}", str(value)]
    args = bench.add_bench_arguments(argparse.ArgumentParser()).parse_args(argv)
    return bench.run_bench(args)
