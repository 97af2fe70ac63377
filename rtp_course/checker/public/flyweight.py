"""Public checks for E5 `flyweight`: Rotated Tensor Parallelism as a drop-in for DDP.

Every rank wraps the same kind of model (rank 0's weights must win: the other
ranks start from different ones on purpose) and feeds its OWN batch. The
parent trains the serial model with DDP semantics (the gradient is the mean of
the ranks' gradients) and says what each rank must see: its output, its
input's gradient, the documented slice (stub docstring) of each averaged
gradient, the weights after SGD and Adam steps, the full state dict.

Structure is measured, not assumed: the shard layout; the communication per
phase (no collective carries weights; shard receives per layer and their bytes;
the ring neighbour they come from); the received buffers alive at the peak and
after each phase (commlog); the overlap (commlog's trace with the compute ops
of a dispatch mode: in forward every receive posted is followed by some compute
before it is waited on, in backward at least one is); the per-rank parameter,
gradient and optimizer bytes.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from rtp_course.runtime import commlog
from rtp_course.training import memory
from rtp_course.checker.common import make_optimizer, manual_seed, owned_module, randint, randn
from rtp_course.checker.public.flyweight_layout import (expected_rank, rtp_comm_rules,
                                                         rtp_groups, sharded_layers, upstream)
from rtp_course.checker.registry import Check, CommRule
from rtp_course.models import MnistCNN, build_model

HINTS = {
    "structure/": "shard_layout() must follow the documented split: U units (Linear/Conv2d "
                  "outputs, Embedding columns, attention heads) cut like torch.tensor_split, "
                  "sizes[s] = U // N + (1 if s < U % N else 0); shard r's slices are in the table "
                  "of the module docstring",
    "structure/replicated parameters": "wrap every Linear, Conv2d, Embedding and "
        "MultiheadAttention (not the Linear inside a MultiheadAttention); every other "
        "parameter stays whole, under its serial name below 'module.'",
    "out_proj.bias slices": "out_proj.bias belongs to shard 0 only, on every other shard it is "
                            "empty: the heads' partial outputs are SUMMED, so a bias in every "
                            "shard would be added N times",
    "init/": "every rank must start from rank 0's weights: broadcast each FULL parameter from "
             "group rank 0 (global rank dist.get_global_rank(group, 0)) before cutting out the "
             "shard; replicated parameters and buffers too",
    "full_state_dict": "full_state_dict(): rotate your shard N-1 times (receiving with the "
                       "incoming shard's shape, recv_shape), put each shard's slices where "
                       "shard_ranges(index) says; replicated entries as they are; the keys of "
                       "the serial model's state_dict",
    "error/forward": "forward step i holds shard s = (r - i) % N, which came CLOCKWISE from rank "
                     "r-1: receive the next one, shard (s - 1) % N, into a buffer of THAT shard's "
                     "shape (recv_shape: with uneven shards it differs from yours)",
    "error/backward": "backward step k holds shard s = (r + k) % N (weights now come "
                      "COUNTERCLOCKWISE, from rank r+1): receive each weight shard and gradient "
                      "accumulator with the shape of the shard it belongs to (recv_shape)",
    "error/full_state_dict": "full_state_dict(): after k clockwise rotations you hold shard "
                             "(r - k) % N: receive it with THAT shard's shape (recv_shape) and "
                             "put its slices where shard_ranges(index) says",
    "error": "an exception here usually means a shard is not the one you think: forward step i "
             "holds shard (r - i) % N, which came CLOCKWISE from rank r-1; backward step k holds "
             "shard (r + k) % N, from rank r+1 (COUNTERCLOCKWISE); receive each shard or "
             "accumulator into a buffer of THAT shard's shape (recv_shape: with uneven shards it "
             "differs from yours)",
    "deadlock": "ranks wait for each other inside a rotation: every rank must make the same "
                "rotations in the same order (N-1 per layer in forward, clockwise; in backward N-1 "
                "of the weights and N of the accumulators, counterclockwise), and wait() on each "
                "handle once",
    "forward/output": "forward step i computes with shard s = (r - i) % N (shards arrive "
                      "CLOCKWISE, from rank r-1) and its part of the output belongs at units "
                      "[start[s], start[s] + sizes[s]); attention sums the heads' parts and adds "
                      "out_proj.bias once",
    "backward/compute while": "no overlap in backward: every receive was waited on before any "
                              "compute. Start rotating the weight shard in hand (rotate_async) "
                              "BEFORE computing with it, and wait only when the next step needs "
                              "the shard that arrives",
    "forward/compute while": "no overlap: a shard's receive was waited on before any compute. "
                             "Start the rotation (rotate_async) of the shard in hand, compute "
                             "with it, and only then wait() for the next one",
    "forward/received bytes": "a rank may hold its own shard plus, per layer, the received "
                              "shard in hand and the one arriving: drop each received shard as "
                              "soon as it is used (never keep them in a list, on the module or "
                              "in the autograd context: backward rotates the weights again)",
    "backward/received bytes": "backward holds at most the weight shard in hand and the one "
                               "arriving, and the accumulator arriving and the one being added "
                               "to; drop each as soon as it is used: none may be left after "
                               "backward",
    "backward/grad input": "dL/dx is the SUM over the N shards of each shard's contribution: "
                           "backward step k holds shard (r + k) % N (weights now come "
                           "COUNTERCLOCKWISE); recompute THAT shard's part from the saved input "
                           "and use THAT shard's slice of dL/dy",
    "backward/grad": "shard r's .grad must be the slice of the DDP gradient, the MEAN over "
                     "ranks: the accumulator of shard s travels COUNTERCLOCKWISE with the "
                     "weights, each rank adds its own batch's gradient, and after N moves (one "
                     "more than the weights) it is back on rank s: divide it by N",
    "(replicated parameter)": "a replicated parameter's .grad must be the mean over the ranks "
                              "of `group`, like DDP: all_reduce it over the group "
                              "(group=...) and divide by the group's size (e.g. from "
                              "register_post_accumulate_grad_hook)",
    "step": "outputs and gradients were right but the weights after the optimizer steps are "
            "not: the shards must be the nn.Parameters the optimizer sees (rtp.parameters()) "
            "and get their .grad from backward",
    "forward/bytes held after forward": "rule 'Memory': after forward the rank holds tensors "
                                        "besides its parameters and what autograd saved: keep "
                                        "only your shard (no full copy of the weights, no copy "
                                        "of a shard kept for backward, in an attribute, a dict, "
                                        "a closure or a cache) and drop every received shard "
                                        "once used: backward rotates the weights again",
    "memory/bytes held besides": "rule 'Memory': the model keeps a tensor of weights besides "
                                 "its parameters (a full copy or received shards in an "
                                 "attribute, a dict or a list): keep only your shard, as the "
                                 "module's parameter, and drop what arrives once used",
    "memory/": "each rank stores only its shard of every wrapped weight (so 1/N of the "
               "gradients and optimizer state) plus the replicated parameters: replace the full "
               "parameters by nn.Parameter(shard) and keep no full copy",
}


class ComputeMarks(TorchDispatchMode):
    """Adds ("compute", op) to commlog's trace for every aten op that computes on data: any op
    but views, allocations, fills and copies (moving bytes is not computing), whatever API the
    code chose (a matmul, F.embedding or indexing a shard, a convolution...). A dispatch mode,
    unlike a torch-function mode, also sees the ops of a backward pass."""
    NOT_COMPUTE = ("empty", "zeros", "ones", "full", "fill", "copy", "clone", "detach", "alias",
                   "rand", "normal", "uniform", "bernoulli", "arange", "linspace",
                   "lift", "resize", "set_", "new_", "scalar_tensor", "_local_scalar_dense",
                   "record_stream", "_to_copy", "contiguous", "split", "chunk", "unbind",
                   "narrow", "_unsafe_view")
    _math = {}     # op -> its name if it computes, else None (str(op) is slow)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func not in self._math:
            name = str(func).lower()                       # "aten.masked_fill.scalar"
            op = name.split(".")[1] if name.count(".") >= 1 else name
            self._math[func] = None if (getattr(func, "namespace", "aten") != "aten"
                                        or getattr(func, "is_view", False)
                                        or op.startswith(self.NOT_COMPUTE)) else name
        if commlog.STATE.trace is not None and self._math[func] is not None:
            commlog.STATE.trace.append(("compute", self._math[func]))
        return func(*args, **(kwargs or {}))


def some_overlap(trace) -> bool:
    """No receive at all, or at least one receive followed by some compute before its first
    wait(): the backward's weight shards travel while the shard in hand is used (its
    accumulators may be waited at once; the rule is about starting before computing)."""
    posted = [i for i, (kind, _) in enumerate(trace) if kind in ("irecv", "recv")]
    for i in posted:
        if trace[i][0] == "recv":
            continue
        for later in trace[i + 1:]:
            if later[0] == "compute":
                return True
            if later == ("wait", trace[i][1]):
                break
    return not posted


def overlapped(trace) -> bool:
    """Every receive posted was followed by some compute before its first wait()."""
    for i, (kind, index) in enumerate(trace):
        if kind == "recv":      # a blocking receive waits at once
            return False
        if kind != "irecv":
            continue
        for later in trace[i + 1:]:
            if later[0] == "compute":
                break
            if later == ("wait", index):
                return False
    return True


class RTPCheck(Check):
    """Train RotatedTensorParallel(build()) on every rank's own batch; judge every rank.

    A subclass gives `build()` (from the global RNG), `inputs(step, rank)` (a tuple of
    CPU tensors) and optionally `call(model, xs)`.
    """
    exercise = "flyweight"
    task = "E5.2"       # RotatedTensorParallel; its layers are FlyweightWrapper's (E5.1)
    hints = HINTS
    opt_steps = (("sgd", 2), ("adam", 2))   # optimizers in turn, on the same model
    owned = ("build",)                       # each rank builds the model from its own key
    record_init = True                       # False for big models: fewer bytes to judge
    adam_eps = 1e-6  # 1e-8 would turn ~1e-17 noise on zero-gradient entries into O(lr) steps
    timeout = 40.0

    def build(self) -> nn.Module:
        raise NotImplementedError

    def inputs(self, step, rank) -> tuple:
        """Global rank `rank`'s inputs at `step`: drawn with owner=rank (checker.inputs)."""
        raise NotImplementedError

    def call(self, model, xs):
        return model(*xs)

    def members(self, world_size):
        """The RTP groups as lists of global ranks, or None for one group of the whole world."""
        return None

    def group(self, ctx):
        """This rank's RTP group (None: this rank sits out). Every rank makes every group."""
        if self.members(ctx.world_size) is None:
            return ctx.group
        groups = [(m, ctx.new_group(m)) for m in self.members(ctx.world_size)]
        return next((g for m, g in groups if ctx.rank in m), None)

    # ---------------------------------------------------------------- worker side
    def run(self, ctx):
        group = self.group(ctx)
        if group is None:
            return
        rank = ctx.rank   # global: whose key draws its weights (group rank 0's must win) and data
        before = memory.live_storages()   # the harness's and torch's own, before the model
        model = owned_module(self, "build", 0, rank, torch.float32).to(device=ctx.device,
                                                                        dtype=ctx.dtype)
        self._memory_base = (before, list(model.buffers()))
        layers, state_keys = sharded_layers(model), list(model.state_dict())
        serial_buffers = list(model.buffers())   # the model's own (running statistics ...)
        with ctx.phase("init"):
            rtp = ctx.impl.flyweight.RotatedTensorParallel(model, group=group)
        with ctx.phase("structure"):
            layout = rtp.shard_layout()
        shards, replicated = record_structure(ctx, rtp, layout, layers)
        if self.record_init:
            record_params(ctx, "init", shards, replicated)
            with ctx.phase("full_state_dict"):
                full = rtp.full_state_dict()
            for k in state_keys:
                ctx.record(f"full_state_dict/{k}", full.get(k))
            del full
        step = 0
        for opt_name, count in self.opt_steps:
            opt = make_optimizer(opt_name, rtp.parameters(), eps=self.adam_eps)
            for _ in range(count):
                step += 1
                if not self.train_step(ctx, rtp, opt, opt_name, step, rank, shards, replicated):
                    return
            record_params(ctx, f"step{step} {opt_name}", shards, replicated)
        ctx.record_value("memory/bytes held besides parameters and buffers",
                         held_besides(before, rtp, opt, ctx, serial_buffers))
        ctx.record_value("memory/parameter bytes", memory.param_bytes(rtp))
        ctx.record_value("memory/gradient bytes", memory.grad_bytes(rtp))
        ctx.record_value("memory/optimizer state bytes", memory.optimizer_state_bytes(opt))
        with ctx.phase("full_state_dict after the steps"):
            full = rtp.full_state_dict()
        for k in state_keys:
            ctx.record(f"full_state_dict after the steps/{k}", full.get(k))

    def train_step(self, ctx, rtp, opt, opt_name, step, rank, shards, replicated) -> bool:
        first = step == 1
        fwd, bwd = ("forward", "backward") if first else (f"step{step} forward",
                                                          f"step{step} backward")
        xs = [ctx.to(x) for x in self.inputs(step, rank)]
        xs = [x.clone().requires_grad_(x.is_floating_point()) for x in xs]
        opt.zero_grad()
        base = commlog.STATE.live_recv
        trace = commlog.STATE.trace = [] if first else None
        saved: dict = {}     # what autograd saved for backward (activations: allowed)
        try:
            with ctx.phase(fwd), (ComputeMarks() if first else contextlib.nullcontext()), \
                    (_saving(saved) if first else contextlib.nullcontext()):
                out = self.call(rtp, xs)
        finally:
            commlog.STATE.trace = None
        ctx.record(f"{fwd}/output", out if isinstance(out, torch.Tensor) else None)
        if first:
            ctx.record_value("forward/compute while the next shard is in flight", overlapped(trace))
            before, buffers = self._memory_base
            ctx.record_value("forward/bytes held after forward besides activations",
                             held_besides(before, rtp, opt, ctx, buffers,
                                          also=[xs, out, saved]))
        record_held(ctx, fwd, base)  # every step: some designs only prefetch once warmed up
        if not isinstance(out, torch.Tensor):
            return False  # the verdict reports the output; backward would only add noise
        grad_out = ctx.to(upstream(step, rank, out.shape, torch.float64))
        trace = commlog.STATE.trace = [] if first else None
        try:
            with ctx.phase(bwd), (ComputeMarks() if first else contextlib.nullcontext()):
                (out * grad_out).sum().backward()
        finally:
            commlog.STATE.trace = None
        del out
        record_held(ctx, bwd, base)
        if first:
            ctx.record_value("backward/compute while a shard is in flight", some_overlap(trace))
            for i, x in enumerate(xs):
                if x.is_floating_point():
                    ctx.record(f"backward/grad input {i}", x.grad)
            for name, p in shards.items():
                ctx.record(f"backward/grad {name} shard", None if p is None else p.grad)
            for name, p in replicated.items():
                ctx.record(f"backward/grad {name} (replicated parameter)", p.grad)
        with ctx.phase(f"step{step} {opt_name}"):
            opt.step()
        return True

    # ---------------------------------------------------------------- parent side
    def expected(self, world_size):
        exp = {r: {} for r in range(world_size)}
        for members in rtp_groups(self, world_size):
            exp.update({r: expected_rank(self, members, g) for g, r in enumerate(members)})
        return exp

    def comm_rules(self, world_size):
        return rtp_comm_rules(self, world_size)


def record_structure(ctx, rtp, layout, layers):
    """Record what shard_layout() says; return {serial name: shard parameter}, {name: param}."""
    shards, named = {}, dict(rtp.named_parameters())
    for mod, keys in layers.items():
        info = layout.get(mod) if isinstance(layout, dict) else None
        seen = None if info is None else (info.get("kind"), info.get("index"),
                                          info.get("num_shards"),
                                          tuple(int(u) for u in info.get("units", ())))
        ctx.record_value(f"structure/{mod or '(the model itself)'} shard", seen)
        for key in keys:
            full = f"{mod}.{key}" if mod else key
            piece = (info or {}).get("params", {}).get(key)
            ctx.record_value(f"structure/{full} slices", None if piece is None else (
                piece["dim"], tuple((int(a), int(b)) for a, b in piece["ranges"])))
            shards[full] = named.get(piece["name"]) if piece else None
    taken = {id(p) for p in shards.values() if p is not None}
    replicated = {n[len("module."):] if n.startswith("module.") else n: p
                  for n, p in named.items() if id(p) not in taken}
    ctx.record_value("structure/replicated parameters", sorted(replicated))
    return shards, replicated


def record_params(ctx, phase, shards, replicated):
    for name, p in shards.items():
        ctx.record(f"{phase}/{name} shard", p)
    for name, p in replicated.items():
        ctx.record(f"{phase}/{name} (replicated parameter)", p)


@contextlib.contextmanager
def _saving(saved: dict):
    """Collect the tensors autograd saves for backward while the block runs."""
    def pack(t):
        saved[id(t)] = t
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield


def held_besides(before: dict, rtp, opt, ctx, serial_buffers, also=()) -> int:
    """Bytes of every tensor storage alive in this rank that was not before the model was
    built, less what the rank is meant to hold (its parameters, the serial model's buffers,
    gradients and optimizer state) and what the check itself keeps (its records): a copy of
    the weights counts wherever the code keeps it (an attribute, a buffer of its own, a global
    dict, a closure), not only where a walk of the model finds it."""
    allowed = memory.storages_of([list(rtp.parameters()), serial_buffers,
                                  [p.grad for p in rtp.parameters()], opt.state,
                                  ctx.records, ctx.values, list(also)])
    return sum(n for ptr, n in memory.live_storages().items()
               if ptr not in before and ptr not in allowed)


def record_held(ctx, phase, base):
    """Received bytes alive at this phase's peak and at its end, beyond those alive before."""
    ctx.record_value(f"{phase}/received bytes held at peak",
                     commlog.STATE.peak_recv.get(phase, base) - base)
    ctx.record_value(f"{phase}/received bytes still held after {phase.split()[-1]}",
                     commlog.STATE.live_recv - base)


# ---------------------------------------------------------------- the checks
def _plain(ranges):
    """shard_ranges' answer as plain lists (tuples and lists alike), or its repr."""
    try:
        return {str(i): {str(k): [int(dim), [[int(a), int(b)] for a, b in pieces]]
                         for k, (dim, pieces) in sorted(one.items())}
                for i, one in sorted(ranges.items())}
    except Exception:  # noqa: BLE001 - anything else is reported as it is
        return repr(ranges)[:200]


def _units(units: int, n: int) -> list:
    """[(start, stop)] of every shard: torch.tensor_split's sizes."""
    sizes = [units // n + (1 if s < units % n else 0) for s in range(n)]
    starts = [sum(sizes[:s]) for s in range(n)]
    return [(a, a + z) for a, z in zip(starts, sizes)]


class FlyweightWrapperLinear(Check):
    """E5.1 alone: FlyweightWrapper around one nn.Linear(5, 10) (uneven shards at 3 and 4
    ranks), each rank its own batch: shard_ranges, the shard it keeps, its output, the input's
    gradient and its shard's gradient (the slice of the DDP-averaged one), full_state_dict.
    Runs before the model checks, which wrap every layer with it."""
    exercise, name = "flyweight", "FlyweightWrapper"
    task = "E5.1"
    hints = dict(HINTS, **{
        "structure/shard_ranges": "shard_ranges(index) of a Linear: {'weight': (0, [(a, b)]), "
                                  "'bias': (0, [(a, b)])} with [a, b) shard index's units, cut "
                                  "like torch.tensor_split (the module docstring's table)",
        "init/own": "the wrapper keeps only its own shard, as the module's parameters: "
                    "weight[a:b] and bias[a:b] of rank 0's full weights (broadcast first)"})
    U, IN = 10, 5

    owned = ("layer",)

    def layer(self):
        return nn.Linear(self.IN, self.U)

    def run(self, ctx):
        r, n = ctx.rank, ctx.world_size
        # each rank its own weights: rank 0's must win
        layer = owned_module(self, "layer", 0, r, torch.float32).to(device=ctx.device,
                                                                    dtype=ctx.dtype)
        with ctx.phase("init"):
            w = ctx.impl.flyweight.FlyweightWrapper(layer, group=ctx.group)
        with ctx.phase("structure"):
            ranges = {i: w.shard_ranges(i) for i in range(n)}
        ctx.record_value("structure/shard_ranges", _plain(ranges))
        ctx.record("init/own weight shard", w.module.weight)
        ctx.record("init/own bias shard", w.module.bias)
        x = ctx.to(randn(300, 3, self.IN, owner=r)).requires_grad_(True)
        with ctx.phase("forward"):
            y = w(x)
        ctx.record("forward/output", y)
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != (3, self.U):
            return
        with ctx.phase("backward"):
            (y * ctx.to(randn(400, 3, self.U, owner=r))).sum().backward()
        ctx.record("backward/grad input", x.grad)
        ctx.record("backward/grad weight shard", w.module.weight.grad)
        ctx.record("backward/grad bias shard", w.module.bias.grad)
        with ctx.phase("full_state_dict"):
            full = w.full_state_dict()
        for k in ("weight", "bias"):
            ctx.record(f"full_state_dict/{k}", full.get(k) if isinstance(full, dict) else None)

    def expected(self, world_size):
        manual_seed(0, owner=0)
        serial = nn.Linear(self.IN, self.U).double()
        pieces = _units(self.U, world_size)
        grads, outs, ins = [], [], []
        for r in range(world_size):
            serial.zero_grad()
            x = randn(300, 3, self.IN, owner=r).requires_grad_(True)
            y = serial(x)
            (y * randn(400, 3, self.U, owner=r)).sum().backward()
            outs.append(y.detach())
            ins.append(x.grad)
            grads.append((serial.weight.grad.clone(), serial.bias.grad.clone()))
        mean_w = sum(g[0] for g in grads) / world_size
        mean_b = sum(g[1] for g in grads) / world_size
        ranges = {str(i): None for i in range(world_size)}
        for i, (a, b) in enumerate(pieces):
            ranges[str(i)] = {"bias": [0, [[a, b]]], "weight": [0, [[a, b]]]}
        exp = {}
        for r in range(world_size):
            a, b = pieces[r]
            exp[r] = {"structure/shard_ranges": {k: v for k, v in ranges.items()},
                      "init/own weight shard": serial.weight.detach()[a:b],
                      "init/own bias shard": serial.bias.detach()[a:b],
                      "forward/output": outs[r], "backward/grad input": ins[r],
                      "backward/grad weight shard": mean_w[a:b],
                      "backward/grad bias shard": mean_b[a:b],
                      "full_state_dict/weight": serial.weight.detach(),
                      "full_state_dict/bias": serial.bias.detach()}
        return exp

    def comm_rules(self, world_size):
        quiet = "rule 'Rotation only': the shards travel point-to-point (rotate_async)"
        rules = [CommRule(p, "collective", 0, quiet)
                 for p in ("forward", "backward", "full_state_dict")]
        rules.append(CommRule("structure", "*", 0, "shard_ranges only computes: no communication"))
        return rules


class RTPLinear(RTPCheck):
    """nn.Linear(5, 12): even shards for every N (a wrong shard order shows as wrong values,
    not as a size mismatch), a 3-D input. The other layers have uneven shards."""
    name = "Linear"

    def build(self):
        return nn.Linear(5, 12)

    def inputs(self, step, rank):
        return (randn(1000 * step, 3, 2, 5, owner=rank),)


CONV = ("a wrapped Conv2d computes as the module does, with the shard's output channels: "
        "the module's stride, padding, dilation, groups and padding_mode "
        "(module._conv_forward(x, weight, bias) applies them all)")


class RTPConv2d(RTPCheck):
    """nn.Conv2d(2, 5, 3, stride=(2, 1), padding=1, bias=False): 5 channels, no bias, a
    stride (a layer's own settings must be applied to each shard)."""
    name = "Conv2d"
    hints = dict(HINTS, **{"forward/output": CONV + "; " + HINTS["forward/output"],
                           "error/forward": CONV + "; " + HINTS["error/forward"]})

    def build(self):
        return nn.Conv2d(2, 5, 3, stride=(2, 1), padding=1, bias=False)

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 2, 6, 6, owner=rank),)


class RTPEmbedding(RTPCheck):
    """nn.Embedding(13, 7, padding_idx=0): columns split, integer input, no input gradient."""
    name = "Embedding"

    def build(self):
        return nn.Embedding(13, 7, padding_idx=0)

    def inputs(self, step, rank):
        return (randint(1000 * step, 13, 2, 5, owner=rank),)


ATTENTION_CONTRACT = (
    "the wrapped attention takes what nn.MultiheadAttention takes (the stub's ATTENTION "
    "paragraph): inputs [L, B, E] unless the module says batch_first=True ([B, L, E]); key and "
    "value of another length S than the query's; key_padding_mask [B, S] and attn_mask [L, S] or "
    "[B*H, L, S] (rows b*H + h), bool (True = masked) or float")


class RTPMultiheadAttention(RTPCheck):
    """nn.MultiheadAttention(10, 5): 5 heads (uneven), sequence first, cross-attention,
    a key padding mask and a per-head float mask."""
    name = "MultiheadAttention"
    hints = dict(HINTS, **{"error/forward": ATTENTION_CONTRACT, "forward": ATTENTION_CONTRACT})

    def build(self):
        return nn.MultiheadAttention(10, 5)

    def inputs(self, step, rank):
        s = 1000 * step
        return (randn(s, 4, 2, 10, owner=rank), randn(s + 1, 5, 2, 10, owner=rank),
                randn(s + 2, 5, 2, 10, owner=rank))

    def call(self, model, xs):
        padding = torch.zeros(2, 5, dtype=xs[0].dtype, device=xs[0].device)
        padding[0, 4] = float("-inf")
        bias = randn(7, 2 * 5, 4, 5).to(device=xs[0].device, dtype=xs[0].dtype)
        return model(*xs, key_padding_mask=padding, attn_mask=bias, need_weights=False)[0]


class RTPMultiheadAttentionBatchFirst(RTPCheck):
    """nn.MultiheadAttention(12, 4, batch_first=True): self-attention, a bool causal mask and a
    bool key padding mask (True = masked, as the module reads them)."""
    name = "MultiheadAttention_batch_first"
    hints = dict(HINTS, **{"error/forward": ATTENTION_CONTRACT, "forward": ATTENTION_CONTRACT})

    def build(self):
        return nn.MultiheadAttention(12, 4, batch_first=True)

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 5, 12, owner=rank),)

    def call(self, model, xs):
        x = xs[0]
        causal = torch.ones(5, 5, dtype=torch.bool, device=x.device).triu(1)
        padding = torch.zeros(2, 5, dtype=torch.bool, device=x.device)
        padding[1, 3] = True
        return model(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)[0]


class RTPMnistCNN(RTPCheck):
    """The tutorial CNN's layers (dropout off), scaled down: at full size fc1 alone is 1.2M
    weights, whose records took more time to write, read and compare than all the other
    checks. 10, 14, 22 and 10 units: uneven shards for N = 3 and 4."""
    name = "MnistCNN"
    opt_steps = (("sgd", 1), ("adam", 1))

    def build(self):
        return MnistCNN(dropout1=0.0, dropout2=0.0, channels=(10, 14), hidden=22, image=14)

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 1, 14, 14, owner=rank),)


class RTPTransformerLM(RTPCheck):
    """The tiny transformer LM: embedding, attention, MLP and decoder wrapped, LayerNorms
    replicated."""
    name = "TransformerLM"
    opt_steps = (("sgd", 1), ("adam", 1))  # 8 layers x 2N-1 messages a step: the layer checks
                                           # above run two steps of each optimizer

    def build(self):
        return build_model("lm", tiny=True)

    def inputs(self, step, rank):
        return (randint(1000 * step, 96, 2, 6, owner=rank),)


GROUP = ("in a group, the shard index and the number of shards are the GROUP rank and size "
         "(dist.get_rank(group), dist.get_world_size(group)); the initial weights come from the "
         "group's rank 0 (global rank dist.get_global_rank(group, 0)); only p2p peers are global "
         "ranks (your rotation functions translate them)")


class RTPLinearSubgroup(RTPLinear):
    """The Linear check on the group of global ranks 1..N-1: group ranks are not global ranks."""
    name = "Linear_subgroup"
    world_sizes = (3,)
    hints = dict(HINTS, error=GROUP, **{"structure/": GROUP, "init/": GROUP})

    def members(self, world_size):
        return [list(range(1, world_size))]
