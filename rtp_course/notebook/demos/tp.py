"""Notebook 04: Megatron tensor parallelism (the student's `tensor_parallel` module, E3) at work.

Workers (run with `launch` / `run_demo`):
* ``layer_demo``: one layer (column, row, MLP, embedding, attention) sharded from a serial
  one; this rank's shard shapes, its errors against the serial layer (output, input
  gradient, shard gradients) and the collectives it called in forward and backward.
* ``train``: the BERT-like classifier trained on synthetic token data, tensor parallel
  (every rank feeds the same batch) or, with parallel=False, serially in the caller.
* ``param_bytes``: per-rank parameter bytes of the TP classifier for group sizes 1..N,
  split into sharded and replicated parameters.
Every rank builds the serial module from the same seed, so it can compare by itself.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from rtp_course.runtime import commlog
from rtp_course.training.data import classification_tokens
from rtp_course.course.todo import needs_exercises
from rtp_course.course.impl import current
from rtp_course.models import FeedForward, SelfAttention, build_model
from rtp_course.runtime.launcher import rank_device

HIDDEN, FFN, HEADS, VOCAB, BATCH, SEQ = 48, 96, 12, 96, 4, 6
TRAIN_CONFIG = dict(num_classes=2)      # on top of the tiny BERT (48 wide, 12 heads, 2 blocks)
MEMORY_CONFIG = dict(vocab_size=1200, hidden_dim=96, num_layers=2, num_heads=12, num_classes=4,
                     max_seq_len=24, ffn_mult=4)


def _device():
    """This rank's device: its GPU under NCCL (mapped onto the visible ones), else the CPU."""
    return rank_device()


def _serial(kind, device):
    """The seeded serial layer and an input for it (the same on every rank)."""
    gen = torch.Generator().manual_seed(1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = {"column": lambda: nn.Linear(HIDDEN, FFN), "column_gather": lambda: nn.Linear(HIDDEN, FFN),
                 "row": lambda: nn.Linear(FFN, HIDDEN), "mlp": lambda: FeedForward(HIDDEN, FFN),
                 "embedding": lambda: nn.Embedding(VOCAB, HIDDEN),
                 "attention": lambda: SelfAttention(HIDDEN, HEADS)}[kind]().to(device)
    if kind == "embedding":
        x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    else:
        width = FFN if kind == "row" else HIDDEN
        x = torch.randn(BATCH, SEQ, width, generator=gen)
    return layer, x.to(device)


def _serial_output_shape(kind):
    return (BATCH, SEQ, FFN if kind.startswith("column") else HIDDEN)


def _parallel(tp, kind, serial):
    return {"column": lambda: tp.ColumnParallelLinear.from_serial(serial),
            "column_gather": lambda: tp.ColumnParallelLinear.from_serial(serial, gather_output=True),
            "row": lambda: tp.RowParallelLinear.from_serial(serial, input_is_parallel=False),
            "mlp": lambda: tp.ParallelMLP.from_serial(serial),
            "embedding": lambda: tp.ParallelEmbedding.from_serial(serial),
            "attention": lambda: tp.ParallelSelfAttention.from_serial(serial)}[kind]()


def _slice_like(full, shard):
    """The slice of serial tensor `full` that `shard` should be, by comparing shapes
    (a split dim is the one whose size differs): used to compare gradients."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for dim, (a, b) in enumerate(zip(full.shape, shard.shape)):
        if a != b:
            return full.chunk(world, dim)[rank]
    return full


@needs_exercises
def layer_demo(rank, world_size, kind):
    """Shard a serial layer, run forward and backward with the same input on every rank.

    Returns {"shapes": {param: (shard shape, serial shape)}, "errors": {what: max abs error},
    "comm": {phase: [collective names]}}. The loss is sum(y * probe) with a fixed probe.
    """
    tp = current("tensor_parallel")
    commlog.install()
    dev = _device()
    serial, x = _serial(kind, dev)
    parallel = _parallel(tp, kind, serial)
    probe = torch.randn(_serial_output_shape(kind), generator=torch.Generator().manual_seed(2)).to(dev)
    errors, comm, outs = {}, {}, {}
    for name, module in (("serial", serial), ("parallel", parallel)):
        xin = x if kind == "embedding" else x.clone().requires_grad_(True)
        commlog.reset("forward")
        y = module(xin)
        comm[name + " forward"] = [e.kind for e in commlog.events()]
        commlog.reset("backward")
        # A column layer without gather returns this rank's slice of y: weigh it by the same slice.
        (y * _slice_like(probe, y)).sum().backward()
        comm[name + " backward"] = [e.kind for e in commlog.events()]
        outs[name] = (y.detach(), None if kind == "embedding" else xin.grad)
    (y_serial, dx_serial), (y_par, dx_par) = outs["serial"], outs["parallel"]
    errors["output"] = (y_par - _slice_like(y_serial, y_par)).abs().max().item()
    if kind != "embedding":
        errors["grad input"] = (dx_par - dx_serial).abs().max().item()
    full = dict(serial.named_parameters())       # the TP layers keep the serial names
    shapes = {}
    for name, p in parallel.named_parameters():
        ref = full.get(name)
        if ref is None:
            continue
        shapes[name] = (tuple(p.shape), tuple(ref.shape))
        errors[f"grad {name}"] = (p.grad - _slice_like(ref.grad, p.grad)).abs().max().item()
    return {"shapes": shapes, "errors": errors,
            "comm": {k: v for k, v in comm.items() if k.startswith("parallel")}}


def describe(results) -> str:
    """layer_demo's per-rank results as a few readable lines."""
    lines = []
    for r, res in enumerate(results):
        held = ", ".join(f"{n} {list(s)} (serial {list(f)})" for n, (s, f) in res["shapes"].items())
        lines.append(f"rank {r} holds: {held}")
    lines.append("largest |parallel - serial| (gradients: against the matching slice of the serial one)")
    lines.append(f"{'':>24}" + "".join(f"{f'rank {r}':>10}" for r in range(len(results))))
    for name in results[0]["errors"]:
        lines.append(f"{name:>24}" + "".join(f"{res['errors'][name]:10.1e}" for res in results))
    for phase, calls in results[0]["comm"].items():
        lines.append(f"rank 0, {phase.replace('parallel ', '')}: "
                     f"{', '.join(calls) if calls else 'no communication'}")
    return "\n".join(lines)


def _tokens(steps, batch, seed=0):
    cfg = build_model("bert", tiny=True, **TRAIN_CONFIG).config
    return classification_tokens(steps * batch, cfg["max_seq_len"], cfg["vocab_size"], seed=seed,
                                 num_classes=cfg["num_classes"])


@needs_exercises
def train(rank, world_size, steps=30, batch=32, lr=2e-3, seed=0, parallel=True):
    """Adam on the tiny BertClassifier; the SAME batch on every rank. Returns rank's losses.

    parallel=False trains the serial model in the calling process (call it as
    train(0, 1, ..., parallel=False)): the reference curve.
    """
    dev = _device() if parallel else torch.device("cpu")
    model = build_model("bert", seed=seed, tiny=True, **TRAIN_CONFIG).to(dev)
    if parallel:
        model = current("tensor_parallel").parallelize_transformer(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    tokens, labels = _tokens(steps, batch, seed)
    losses = []
    for step in range(steps):
        x = tokens[step * batch:(step + 1) * batch].to(dev)
        y = labels[step * batch:(step + 1) * batch].to(dev)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses}


def _sharded_parameters(tp, model) -> set:
    """ids of the parameters that are shards: column layers' and embeddings' weights and
    biases, row layers' weights (a row layer's bias is replicated)."""
    found = set()
    for m in model.modules():
        if isinstance(m, (tp.ColumnParallelLinear, tp.ParallelEmbedding)):
            found |= {id(p) for p in m.parameters(recurse=False)}
        elif isinstance(m, tp.RowParallelLinear):
            found.add(id(m.weight))
    return found


@needs_exercises
def param_bytes(rank, world_size):
    """For every group size k = 1..world_size (ranks 0..k-1): this rank's parameter bytes
    of the tensor-parallel classifier (MEMORY_CONFIG), sharded and replicated apart.

    Returns {k: {"sharded": bytes, "replicated": bytes}} for the sizes this rank is in,
    and the serial model's bytes under "serial".
    """
    tp = current("tensor_parallel")
    out = {"serial": sum(p.numel() * p.element_size()
                         for p in build_model("bert", seed=0, **MEMORY_CONFIG).parameters())}
    for k in range(1, world_size + 1):
        group = dist.new_group(list(range(k)))       # every rank creates every group
        if rank >= k:
            continue
        model = tp.parallelize_transformer(
            build_model("bert", seed=0, **MEMORY_CONFIG).to(_device()), group)
        sharded = _sharded_parameters(tp, model)
        sizes = {"sharded": 0, "replicated": 0}
        for p in model.parameters():   # by role, not by shape: at N = 1 a shard is whole
            sizes["sharded" if id(p) in sharded else "replicated"] += p.numel() * p.element_size()
        out[k] = sizes
    return out
