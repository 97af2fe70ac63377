"""The machinery of the tensor-parallel checks (E3, and E6's 2D training), shared by their
public and hidden checks.

`layout(serial)` says which slice of which serial tensor every TP parameter is,
from the serial parameter names (the sharding the stub documents), so single
layers and whole models share one code path. `TPCheck` trains the TP module on
every rank and its serial twin in the parent the same way (same seeds, same
inputs on every rank, 2 SGD and 2 Adam steps) and expects, per rank, the
rank's slice of every serial quantity.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from rtp_course.checker.common import make_optimizer, randn
from rtp_course.checker.registry import Bound, Check, CommRule
from rtp_course.training import memory

OPTIMIZERS = ("sgd", "adam")
HELD = "memory/bytes held besides parameters and buffers"  # a hidden full copy shows here
COLUMN = ("q_proj", "k_proj", "v_proj", "fc1", "linear1")   # weight rows and bias split
ROW = ("out_proj", "fc2", "linear2")                        # weight columns split, bias whole
EMBEDDING = ("tok_emb", "pos_emb", "embedding")             # table columns split
GATHER = "all_gather|all_gather_into_tensor"


@dataclass(frozen=True)
class Piece:
    """One TP parameter: the serial tensor it is cut from, and how."""
    name: str                 # path in the TP module: "weight", "fc1.bias", "q_proj.weight"
    source: str               # path in the serial module
    part: int | None = None   # q/k/v third of nn.MultiheadAttention's packed in_proj
    dim: int | None = None    # split dim; None: replicated (the whole tensor on every rank)

    def cut(self, tensors: dict, rank: int, world: int):
        t = tensors[self.source]
        t = t if self.part is None else t.chunk(3)[self.part]
        return t if self.dim is None else t.chunk(world, self.dim)[rank]


def layout(serial: nn.Module, root: str = "") -> list[Piece]:
    """The documented sharding of `serial`; `root` is the role of a bare layer ("fc1")."""
    pieces = []
    for src, _ in serial.named_parameters():
        path, _, leaf = src.rpartition(".")
        owner = path.rpartition(".")[2] if path else root
        if leaf.startswith("in_proj_"):     # packed q/k/v -> q_proj/k_proj/v_proj
            pre = path + "." if path else ""
            pieces += [Piece(f"{pre}{q}_proj.{leaf[8:]}", src, i, 0) for i, q in enumerate("qkv")]
            continue
        dim = (0 if owner in COLUMN else 1 if owner in EMBEDDING
               else 1 if owner in ROW and leaf == "weight" else None)
        pieces.append(Piece(src, src, None, dim))
    return pieces


def tensors(model: nn.Module, what: str = "value") -> dict:
    """{parameter name: detached copy of its value (or its .grad)}."""
    get = (lambda p: p.grad) if what == "grad" else (lambda p: p)
    return {n: None if get(p) is None else get(p).detach().clone()
            for n, p in model.named_parameters()}


def cut_all(pieces, values: dict, rank: int, world: int, prefix: str) -> dict:
    """{prefix + TP name: this rank's slice of the serial tensor}."""
    return {prefix + p.name: p.cut(values, rank, world) for p in pieces}


def record_structure(ctx, model, pieces, init, rank, world, phase="structure") -> bool:
    """Record the parameter names and the shards; False when nothing further is comparable."""
    names = sorted(n for n, _ in model.named_parameters())
    ctx.record_value(f"{phase}/parameters", names)
    if names != sorted(p.name for p in pieces):
        return False
    ok = True
    for p in pieces:
        shard = model.get_parameter(p.name)
        ctx.record(f"{phase}/{p.name}", shard)
        ok &= tuple(shard.shape) == tuple(p.cut(init, rank, world).shape)
    return ok


def raises(fn) -> tuple[str, str]:
    """(name of the exception fn() raises or "nothing", its message); NotImplementedError
    passes through (a stub)."""
    try:
        fn()
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - its type is what is checked
        return type(e).__name__, str(e)
    return "nothing", ""


class TPCheck(Check):
    """Train a TP module on every rank and its serial twin in the parent; compare per rank.

    A subclass gives `serial()` (seeded, float64), `parallel(tp, serial, group)`,
    `inputs(step)` (full input and target, the same on every rank) and `comm`
    ({"forward": {"all_reduce": 1}, ...}: the only collectives allowed when N > 1).
    `split_in` / `split_out`: the TP input / output is the rank's slice of the last
    dim (a row layer's parallel input / a column layer's output without gather).
    """
    exercise = "tensor_parallel"
    root, split_in, split_out, seed = "", False, False, 0
    batch, seq, in_dim, out_dim, steps = 2, 4, 48, 48, 2
    adam_eps = 1e-8   # float32 checks raise it: Adam turns rounding noise on zero gradients
                      # (an attention key bias has none) into O(lr) steps
    comm: dict = {}
    comm_hint = ""

    def serial(self) -> nn.Module:
        raise NotImplementedError

    def parallel(self, tp, serial, group):
        raise NotImplementedError

    def inputs(self, step):
        """(x, target): the serial input, and the upstream gradient dL/dy as the target."""
        return (randn(100 * self.seed + step, self.batch, self.seq, self.in_dim),
                randn(7 + step, self.batch, self.seq, self.out_dim))

    def forward(self, module, x):
        return module(x)

    def out_shape(self, world):
        """The output shape each rank must produce."""
        return (self.batch, self.seq, self.out_dim // world if self.split_out else self.out_dim)

    def loss(self, y, target, rank=0, world=1):
        if world > 1 and self.split_out:
            target = target.chunk(world, -1)[rank]
        return (y * target).sum()

    def train(self, build, rank, world, phase, to):
        """The loop both halves run; yields what to compare as it goes: ("init", model) for the
        first model, "forward/output", "backward/grad input", ("backward/grads", model), then
        (f"step{k} {opt}", model) after every step. build() makes a fresh model per optimizer;
        phase(name) is a context; to(t) converts inputs. The consumer may stop early."""
        for i, opt_name in enumerate(OPTIMIZERS):
            model = build()
            if i == 0:
                yield "init", model
            opt = make_optimizer(opt_name, model.parameters(), eps=self.adam_eps)
            for k in range(1, self.steps + 1):
                first, tag = i == 0 and k == 1, f"step{k} {opt_name}"
                x, target = (to(t) for t in self.inputs(k))
                if self.split_in and world > 1:
                    x = x.chunk(world, -1)[rank]
                x = x.clone().requires_grad_(x.is_floating_point())
                opt.zero_grad()
                with phase("forward" if first else tag):
                    y = self.forward(model, x)
                if first:
                    yield "forward/output", y
                with phase("backward" if first else tag):
                    self.loss(y, target, rank, world).backward()
                if first:
                    yield "backward/grad input", x.grad
                    yield "backward/grads", model
                with phase(tag):
                    opt.step()
                yield tag, model

    # ---------------------------------------------------------------- worker side
    def run(self, ctx):
        self.run_on(ctx, ctx.group)

    def run_on(self, ctx, group):
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        serial = self.serial().to(device=ctx.device, dtype=ctx.dtype)
        pieces, init = layout(serial, self.root), tensors(serial)
        shape = self.out_shape(world)

        def build():
            with ctx.phase("structure"):  # a copy: from_serial may keep a serial Parameter
                return self.parallel(ctx.impl.tensor_parallel, copy.deepcopy(serial), group)

        for what, v in self.train(build, rank, world, ctx.phase, ctx.to):
            if what == "init":
                if not record_structure(ctx, v, pieces, init, rank, world):
                    return
                ctx.record_value(HELD, memory.held_bytes(v) - memory.held_bytes(
                    [*v.parameters(), *v.buffers()]))
            elif what == "forward/output":
                ctx.record(what, v)
                if not torch.is_tensor(v) or tuple(v.shape) != shape:
                    return  # the verdict reports the shape; backward would only add noise
            elif what == "backward/grad input":
                ctx.record(what, v)   # None for token ids: not compared
            elif what == "backward/grads":
                for p in pieces:
                    ctx.record(f"backward/grad {p.name}", v.get_parameter(p.name).grad)
            else:
                for p in pieces:
                    ctx.record(f"{what}/{p.name}", v.get_parameter(p.name))

    # ---------------------------------------------------------------- parent side
    def serial_trace(self) -> dict:
        """Serial training: init, first output and gradients, weights after every step."""
        key = (self.id, self.dtype)
        if key not in _TRACES:
            dtype = getattr(torch, self.dtype)
            to = lambda t: t.to(dtype) if t.is_floating_point() else t  # noqa: E731
            tr = {"pieces": layout(self.serial(), self.root)}
            for what, v in self.train(lambda: self.serial().to(dtype), 0, 1,
                                      lambda name: contextlib.nullcontext(), to):
                if isinstance(v, nn.Module):
                    tr[what] = tensors(v, "grad" if what == "backward/grads" else "value")
                else:
                    tr[what] = None if v is None else v.detach()
            _TRACES[key] = tr
        return _TRACES[key]

    def expected_rank(self, rank, world) -> dict:
        tr = self.serial_trace()
        pieces, last = tr["pieces"], lambda t, on: t.chunk(world, -1)[rank] if on else t
        exp = {"structure/parameters": sorted(p.name for p in pieces)}
        exp.update(cut_all(pieces, tr["init"], rank, world, "structure/"))
        serial_bytes = sum(memory.tensor_bytes(t) for t in tr["init"].values())
        exp[HELD] = Bound(high=0.1 * serial_bytes + 4096, what="small caches at most; the "
                          f"serial layer's parameters are {serial_bytes} bytes")
        exp["forward/output"] = last(tr["forward/output"], self.split_out)
        if tr["backward/grad input"] is not None:
            exp["backward/grad input"] = last(tr["backward/grad input"], self.split_in)
        exp.update(cut_all(pieces, tr["backward/grads"], rank, world, "backward/grad "))
        for opt_name in OPTIMIZERS:
            for k in range(1, self.steps + 1):
                tag = f"step{k} {opt_name}"
                exp.update(cut_all(pieces, tr[tag], rank, world, tag + "/"))
        return exp

    def expected(self, world_size):
        return {r: self.expected_rank(r, world_size) for r in range(world_size)}

    def comm_rules(self, world_size):
        if world_size == 1:
            return []
        rules = []
        for phase in ("forward", "backward"):   # per kind first: the clearest message
            want = {"all_reduce": 0, "all_gather": 0, **self.comm.get(phase, {})}
            rules += [CommRule(phase, GATHER if kind == "all_gather" else kind, n, self.comm_hint)
                      for kind, n in want.items()]
            rules.append(CommRule(phase, "*", sum(want.values()), self.comm_hint))
        return rules


class OnSubgroup:
    """Mixin for a TPCheck: run it on the group of ranks 1..W-1 (rank 0 sits out)."""

    def run(self, ctx):
        group = ctx.new_group(list(range(1, ctx.world_size)))
        if ctx.rank > 0:
            self.run_on(ctx, group)

    def expected(self, world_size):
        return {0: {}, **{r: self.expected_rank(r - 1, world_size - 1)
                          for r in range(1, world_size)}}

    def comm_rules(self, world_size):
        return []


_TRACES: dict = {}
