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
KEPT = "forward/output after the next call"   # an output buffer reused by later calls shows
KEPT_HINT = ("rule 'Results': the first output changed when the module was called again: "
             "each call returns a tensor of its own, never a buffer kept (on the module, in a "
             "global) and written again by the next call")
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


def frozen(serial: nn.Module) -> set:
    """The serial parameters that do not require grad (a frozen, pretrained table)."""
    return {n for n, p in serial.named_parameters() if not p.requires_grad}


def frozen_names(pieces, frozen_sources) -> list:
    return sorted(p.name for p in pieces if p.source in frozen_sources)


def record_grads(ctx, prefix, pieces, model, frozen_sources) -> None:
    """Each TP parameter's .grad; a frozen one's only as "has none" (rule 'Frozen and unused')."""
    for p in pieces:
        g = model.get_parameter(p.name).grad
        if p.source in frozen_sources:
            ctx.record_value(f"{prefix}{p.name} (frozen): no gradient", g is None)
        else:
            ctx.record(f"{prefix}{p.name}", g)


def expected_grads(pieces, grads, frozen_sources, rank, world, prefix) -> dict:
    return {f"{prefix}{p.name} (frozen): no gradient" if p.source in frozen_sources
            else prefix + p.name: True if p.source in frozen_sources else p.cut(grads, rank, world)
            for p in pieces}


def record_structure(ctx, model, pieces, init, rank, world, phase="structure",
                     frozen_sources=()) -> bool:
    """Record the parameter names, which are frozen, and the shards; False when nothing further
    is comparable."""
    names = sorted(n for n, _ in model.named_parameters())
    ctx.record_value(f"{phase}/parameters", names)
    if names != sorted(p.name for p in pieces):
        return False
    ctx.record_value(f"{phase}/frozen parameters (requires_grad=False)",
                     sorted(n for n, q in model.named_parameters() if not q.requires_grad))
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
    two_forwards = True    # the first step calls the module twice before one backward
    comm: dict = {}
    comm_hint = ""

    @property
    def calls_before_backward(self) -> int:
        """The module's calls in the first step's forward (each phase's rules count them)."""
        return 2 if self.two_forwards else 1

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
        (f"step{k} {opt}", model) after every step; and the first output again (KEPT) right
        after the next call (the first step's second call, or the second step's), which must
        not have changed it. build() makes a fresh model per optimizer;
        phase(name) is a context; to(t) converts inputs. The consumer may stop early."""
        kept = None
        for i, opt_name in enumerate(OPTIMIZERS):
            model = build()
            if i == 0:
                yield "init", model
            opt = make_optimizer(opt_name, model.parameters(), eps=self.adam_eps)
            for k in range(1, self.steps + 1):
                first, tag = i == 0 and k == 1, f"step{k} {opt_name}"
                opt.zero_grad()
                again = first and self.two_forwards     # a second call before one backward
                with phase("forward" if first else tag):
                    x, y, target = self.call(model, k, rank, world, to)
                if first:
                    kept = y
                    yield "forward/output", y       # the consumer stops at a wrong shape
                if again:                           # the same phase: its rules count 2 calls
                    with phase("forward"):
                        _, y2, target2 = self.call(model, 50 + k, rank, world, to)
                if again or (i == 0 and k == 2 and not self.two_forwards):
                    yield KEPT, kept                # the consumer stops if it changed
                with phase("backward" if first else tag):
                    loss = self.loss(y, target, rank, world)
                    if again:
                        loss = loss + self.loss(y2, target2, rank, world)
                    loss.backward()
                if first:
                    yield "backward/grad input", x.grad
                    yield "backward/grads", model
                with phase(tag):
                    opt.step()
                yield tag, model

    def call(self, model, step, rank, world, to):
        """(input, output, target) of one forward on `step`'s input."""
        x, target = (to(t) for t in self.inputs(step))
        if self.split_in and world > 1:
            x = x.chunk(world, -1)[rank]
        x = x.clone().requires_grad_(x.is_floating_point())
        return x, self.forward(model, x), target

    # ---------------------------------------------------------------- worker side
    def run(self, ctx):
        self.run_on(ctx, ctx.group)

    def run_on(self, ctx, group):
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        serial = self.serial().to(device=ctx.device, dtype=ctx.dtype)
        pieces, init, still = layout(serial, self.root), tensors(serial), frozen(serial)
        buffers = {n for n, _ in serial.named_buffers()}    # the serial model's own
        shape = self.out_shape(world)

        before = memory.live_storages()

        def build():
            with ctx.phase("structure"):  # a copy: from_serial may keep a serial Parameter
                return self.parallel(ctx.impl.tensor_parallel, copy.deepcopy(serial), group)

        for what, v in self.train(build, rank, world, ctx.phase, ctx.to):
            if what == "init":
                if not record_structure(ctx, v, pieces, init, rank, world):
                    return
                # rule 'Memory': every storage the rank keeps alive (an attribute, a buffer of
                # its own, a module-level dict, a parameter viewing the full weight), less its
                # parameters' and the serial model's buffers' own bytes and the check's records
                ctx.record_value(HELD, memory.kept_bytes(before, [
                    list(v.parameters()), [b for n, b in v.named_buffers() if n in buffers],
                    ctx.records, ctx.values], roots=[v]))
            elif what == "forward/output":
                ctx.record(what, v)
                if not torch.is_tensor(v) or tuple(v.shape) != shape:
                    return  # the verdict reports the shape; backward would only add noise
                first_output = v.detach().clone()
            elif what == "backward/grad input":
                ctx.record(what, v)   # None for token ids: not compared
            elif what == "backward/grads":
                record_grads(ctx, "backward/grad ", pieces, v, still)
            elif what == KEPT:
                ctx.record(what, v)
                if not torch.equal(v.detach(), first_output):
                    return  # the verdict names the reused buffer; what follows would only crash
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
            serial = self.serial()
            tr = {"pieces": layout(serial, self.root), "frozen": frozen(serial)}
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
        exp = {"structure/parameters": sorted(p.name for p in pieces),
               "structure/frozen parameters (requires_grad=False)":
                   frozen_names(pieces, tr["frozen"])}
        exp.update(cut_all(pieces, tr["init"], rank, world, "structure/"))
        serial_bytes = sum(memory.tensor_bytes(t) for t in tr["init"].values())
        exp[HELD] = Bound(high=0.1 * serial_bytes + 4096, what="small caches at most; the "
                          f"serial layer's parameters are {serial_bytes} bytes")
        exp["forward/output"] = last(tr["forward/output"], self.split_out)
        if self.two_forwards:                       # yielded where the verdict looks first
            exp[KEPT] = exp["forward/output"]
        if tr["backward/grad input"] is not None:
            exp["backward/grad input"] = last(tr["backward/grad input"], self.split_in)
        exp.update(expected_grads(pieces, tr["backward/grads"], tr["frozen"], rank, world,
                                  "backward/grad "))
        for opt_name in OPTIMIZERS:
            for k in range(1, self.steps + 1):
                if k == 2 and opt_name == OPTIMIZERS[0] and not self.two_forwards:
                    exp[KEPT] = exp["forward/output"]
                tag = f"step{k} {opt_name}"
                exp.update(cut_all(pieces, tr[tag], rank, world, tag + "/"))
        return exp

    def expected(self, world_size):
        return {r: self.expected_rank(r, world_size) for r in range(world_size)}

    def comm_rules(self, world_size):
        if world_size == 1:
            return []
        rules, calls = [], self.calls_before_backward
        for phase in ("forward", "backward"):   # per kind first: the clearest message
            want = {"all_reduce": 0, "all_gather": 0,
                    **{k: calls * n for k, n in self.comm.get(phase, {}).items()}}
            rules += [CommRule(phase, GATHER if kind == "all_gather" else kind, n, self.comm_hint)
                      for kind, n in want.items()]
            rules.append(CommRule(phase, "*", sum(want.values()), self.comm_hint))
        return rules


class OnSubgroup:
    """Mixin for a TPCheck: run it on the group of every rank but rank 1 ({0, 2}, {0, 2, 3}),
    whose ranks are not consecutive and whose group ranks differ from the global ones: every
    collective must run on that group."""

    @staticmethod
    def members(world_size):
        return [r for r in range(world_size) if r != 1]

    def run(self, ctx):
        members = self.members(ctx.world_size)
        group = ctx.new_group(members)
        if ctx.rank in members:
            self.run_on(ctx, group)

    def expected(self, world_size):
        members = self.members(world_size)
        return {r: self.expected_rank(members.index(r), len(members)) if r in members else {}
                for r in range(world_size)}

    def comm_rules(self, world_size):
        members = tuple(self.members(world_size))
        return {r: [CommRule("*", "collective", Bound(0, 10_000), SUBGROUP_CALLS, members=members)]
                if r in members else [] for r in range(world_size)}


SUBGROUP_CALLS = ("rule 'Group': on a subgroup every collective runs on `group` (pass it to "
                  "every comm function, in every layer parallelize_transformer builds)")


class _SizesNotDivisible(Check):
    """A size N does not divide: ValueError naming the layer and the sizes, before any work.
    One check per layer, in its own task: a notebook section checks the layer it teaches."""
    exercise, world_sizes, isolated = "tensor_parallel", (3, 4), True
    layer = ""
    GOOD = "names the layer and the sizes"
    hints = {"": "rule 'Raises': check the size before creating anything and raise ValueError "
                 "naming the class, the size that does not divide and N: 'ColumnParallelLinear: "
                 "out_features=10 is not divisible by the tensor-parallel size 3; ...'"}

    def make(self, tp, group):
        raise NotImplementedError

    def run(self, ctx):
        with ctx.phase("structure"):
            raised, msg = raises(lambda: self.make(ctx.impl.tensor_parallel, ctx.group))
        ctx.record_value(f"structure/{self.layer} with size 10 raises", raised)
        if raised == "ValueError":
            named = self.layer in msg and "10" in msg and str(ctx.world_size) in msg
            ctx.record_value(f"structure/{self.layer} ValueError message",
                             self.GOOD if named else f"says {msg!r}")

    def expected(self, world_size):
        return {r: {f"structure/{self.layer} with size 10 raises": "ValueError",
                    f"structure/{self.layer} ValueError message": self.GOOD}
                for r in range(world_size)}


_TRACES: dict = {}
