"""What the flyweight checks share: the RTP check's run and structure, overlap and memory.

`RTPCheck` runs one model wrapped in RotatedTensorParallel on every rank, each with its own
batch, and records what the verdict compares (outputs, gradients, shards, weights after
steps, the full state dict) and what the rules judge (layout, communication per phase,
overlap from commlog's trace and `ComputeMarks`, the storages a rank keeps alive).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from rtp_course.runtime import commlog
from rtp_course.training import memory
from rtp_course.checker.common import make_optimizer, owned_module
from rtp_course.checker.public.flyweight_layout import (expected_rank, rtp_comm_rules,
                                                         rtp_groups, sharded_layers, upstream,
                                                         zero_upstream)
from rtp_course.checker.registry import Check

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
    "deadlock": "ranks wait for each other: every rank must make the same calls in the same "
                "order, whatever its data (a rank whose gradient is zero all-reduces and rotates "
                "it all the same): the same rotations (N-1 per layer in forward, clockwise; in "
                "backward N-1 of the weights and N of the accumulators, counterclockwise), "
                "wait() on each handle once, and the replicated parameters' all-reduces",
    "forward/output": "forward step i computes with shard s = (r - i) % N (shards arrive "
                      "CLOCKWISE, from rank r-1) and its part of the output belongs at units "
                      "[start[s], start[s] + sizes[s]); attention sums the heads' parts and adds "
                      "out_proj.bias once",
    "backward/compute while": "rule 'Overlap': no overlap in backward: every receive was "
                              "waited on before any of the step's work (a product, a "
                              "convolution or a lookup with the shard in hand, not any op). "
                              "Start rotating the weight shard in hand (rotate_async) "
                              "BEFORE computing with it, and wait only when the next step needs "
                              "the shard that arrives",
    "forward/compute while": "rule 'Overlap': no overlap: a shard's receive was waited on "
                             "before the step's work (\"a product: a matmul, a linear, "
                             "attention, a convolution; or a lookup: embedding, indexing\", "
                             "not any op). Start the rotation (rotate_async) of the shard in "
                             "hand, compute with it, and only then wait() for the next one",
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
                                        "of a shard kept for backward, as a tensor or a storage "
                                        "(full.untyped_storage()), in an attribute, a dict, "
                                        "a closure or a cache) and drop every received shard "
                                        "once used: backward rotates the weights again",
    "memory/bytes held besides": "rule 'Memory': the model keeps a tensor of weights besides "
                                 "its parameters (a full copy or received shards in an "
                                 "attribute, a dict, a list or a closure, as a tensor or a "
                                 "storage: full.untyped_storage()): keep only your shard, as the "
                                 "module's parameter, and drop what arrives once used",
    "(frozen)": "rule 'Frozen and unused': a parameter that does not require grad stays so in "
                "its shard and gets no gradient: a fresh nn.Parameter(shard) requires grad "
                "whatever the full parameter did (pass requires_grad=full.requires_grad), and "
                "the gradient that comes home is given only to shards that require it",
    "structure/frozen": "rule 'Frozen and unused': nn.Parameter(shard) requires grad whatever "
                        "the full parameter did: pass requires_grad=full.requires_grad",
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


# rule 'Overlap': what hides a transfer is the step's work with the shard (or block) in hand,
# the operations that carry a layer's FLOPs or its lookups: a product (mm, bmm, addmm, linear,
# matmul, einsum, attention), a convolution, an embedding lookup or indexing (and their
# backward kernels). Any other op (a torch.zeros(1).add_(1) between posting and waiting, a
# norm, an elementwise op) computes too, but is not the step's work: it hides nothing.
WORK = ("mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "_addmm_activation", "matmul",
        "dot", "vdot", "mv", "einsum", "tensordot", "linear", "_scaled_dot_product",
        "scaled_dot_product", "_efficient_attention", "_flash_attention",
        "_native_multi_head_attention", "convolution", "_convolution", "conv", "cudnn_conv",
        "mkldnn_convolution", "_slow_conv", "slow_conv", "thnn_conv", "embedding",
        "_embedding_bag", "index", "_unsafe_index", "index_select", "index_add", "index_put",
        "_index_put_impl", "gather", "take", "scatter_add")


NOT_WORK = ("index_fill", "index_copy", "index_reduce", "mvlgamma")   # elementwise or moves


def is_work(entry) -> bool:
    """A trace entry that is the step's work (WORK): ("compute", "aten.mm.default")."""
    if entry[0] != "compute":
        return False
    name = str(entry[1])
    op = name.split(".")[1] if "." in name else name
    return op.startswith(WORK) and not op.startswith(NOT_WORK)


def some_overlap(trace) -> bool:
    """No receive at all, or at least one receive followed by some of the step's work
    (`is_work`: a product, a convolution, a lookup) before its first wait(): the backward's
    weight shards travel while the shard in hand is used (its accumulators may be waited at
    once; the rule is about starting before computing)."""
    posted = [i for i, (kind, _) in enumerate(trace) if kind in ("irecv", "recv")]
    for i in posted:
        if trace[i][0] == "recv":
            continue
        for later in trace[i + 1:]:
            if is_work(later):
                return True
            if later == ("wait", trace[i][1]):
                break
    return not posted


def overlapped(trace) -> bool:
    """Every receive posted was followed by some of the step's work (`is_work`: a product, a
    convolution, a lookup; not any op) before its first wait()."""
    for i, (kind, index) in enumerate(trace):
        if kind == "recv":      # a blocking receive waits at once
            return False
        if kind != "irecv":
            continue
        for later in trace[i + 1:]:
            if is_work(later):
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
    cpu_budget = 60.0
    zero_last_rank = False   # the group's last rank has a zero upstream at step 1

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
        self._frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        self._place = next(m for m in rtp_groups(self, ctx.world_size) if ctx.rank in m)
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
        grad_out = ctx.to(upstream(step, rank, out.shape, torch.float64, zero_upstream(
            self, step, self._place.index(rank), len(self._place))))
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
                if name in self._frozen:    # rule 'Frozen and unused'
                    ctx.record_value(f"backward/grad {name} shard (frozen): no gradient",
                                     p is not None and p.grad is None)
                else:
                    ctx.record(f"backward/grad {name} shard", _shard_grad(p))
            for name, p in replicated.items():
                if name in self._frozen:
                    ctx.record_value(f"backward/grad {name} (replicated parameter, frozen): "
                                     f"no gradient", p.grad is None)
                else:
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
    replicated = {_serial_name(n, layers): p for n, p in named.items() if id(p) not in taken}
    ctx.record_value("structure/replicated parameters", sorted(replicated))
    ctx.record_value("structure/frozen parameters (requires_grad=False)", sorted(
        n for n, p in {**shards, **replicated}.items() if p is not None and not p.requires_grad))
    return shards, replicated


def _serial_name(name, layers):
    """A replicated parameter's name in the serial model: below 'module.', and below a wrapped
    layer's own 'module.' (an MoE's router: 'moe.module.router.weight' is 'moe.router.weight')."""
    name = name[len("module."):] if name.startswith("module.") else name
    for mod in layers:
        inner = f"{mod}.module." if mod else "module."
        if name.startswith(inner):
            return (f"{mod}." if mod else "") + name[len(inner):]
    return name


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
    gradients and optimizer state, each by the bytes it spans: a shard that views the full
    weight leaves the rest of it counted) and what the check itself keeps (its records): a
    copy of the weights counts wherever the code keeps it (an attribute, a buffer of its
    own, a global dict, a closure), not only where a walk of the model finds it; and whatever
    holds it: a tensor or a storage object alone (full.untyped_storage()), found by the
    garbage collector and by a walk from the model and the optimizer."""
    params = list(rtp.parameters())
    return memory.kept_bytes(before, [params, serial_buffers, [p.grad for p in params],
                                      opt.state, ctx.records, ctx.values, list(also)],
                             roots=[rtp, opt])


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


def _shard_grad(p):
    """A shard's .grad as the checks compare it: an empty shard (another shard's expert, the
    bias only shard 0 holds) may keep None, which an optimizer steps exactly as an empty
    gradient."""
    if p is None or p.grad is not None or p.numel():
        return None if p is None else p.grad
    return p.detach().clone()
