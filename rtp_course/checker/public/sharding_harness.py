"""What the sharding checks share: the models and batches, the shard layout, the serial runs
(DDP semantics) the parent compares with, and the measures of memory and overlap.

SHARDS (the stub's rule): a flat vector of P elements padded with zeros at its end to N * S,
S = ceil(P / N); shard r = elements [r * S, (r + 1) * S). ZeRO-1 cuts each parameter, FSDP
each unit (a layer: the concatenation of its parameters).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rtp_course.checker.common import randn, seeded
from rtp_course.checker.public.flyweight_harness import ComputeMarks  # noqa: F401 - checks'
from rtp_course.runtime import commlog
from rtp_course.training import memory

ROWS = 3                                  # samples per rank and step
ZERO_OPTIMIZERS = {"sgd": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),   # = make_optimizer's
                   "adam": (torch.optim.Adam, dict(lr=0.01))}
PAIRS = ([0, 2], [1, 3])                  # two groups of ranks that are not consecutive


def pieces(numel: int, world: int) -> int:
    """S: the elements of one shard of a flat vector of `numel` elements."""
    return (numel + world - 1) // world


def cut(flat: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Shard `rank` of the flat vector `flat`, padded with zeros as the rule says."""
    size = pieces(flat.numel(), world)
    whole = torch.zeros(size * world, dtype=flat.dtype)
    whole[:flat.numel()] = flat
    return whole[rank * size:(rank + 1) * size]


def flat_of(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def unit_names(model: nn.Module, prefix: str = "") -> list:
    """[(unit name, [its parameters' names in the model])]: the stub's units."""
    found = []
    for name, child in model.named_children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            found += unit_names(child, f"{prefix}{name}.")
        elif any(True for _ in child.parameters()):
            found.append((prefix + name, [f"{prefix}{name}.{n}" for n, _ in child.named_parameters()]))
    return found


def own_batch(check, step: int, owner: int):
    """Rank `owner`'s (global) batch of `step`, drawn from its own key: check.batch's, or ROWS
    samples of check.in_features and targets of check.out_features."""
    if hasattr(check, "batch"):
        return check.batch(step, owner)
    return (randn(check.data_seed + 10 * step, ROWS, check.in_features, owner=owner),
            randn(check.data_seed + 10 * step + 1, ROWS, check.out_features, owner=owner))


def global_batch(check, step: int, members):
    """Parent only: the concatenation, in group order, of the members' batches."""
    parts = [own_batch(check, step, q) for q in members]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def loss_of(check, out, target):
    """The check's loss (the mean over this rank's samples): MSE unless it says otherwise."""
    return check.loss(out, target) if hasattr(check, "loss") else F.mse_loss(out, target)


def element_size(check) -> int:
    return torch.empty(0, dtype=getattr(torch, check.dtype)).element_size()


def cast(exp: dict, dtype: str) -> dict:
    """Expected tensors in the check's dtype (computed in float64)."""
    want = getattr(torch, dtype)
    return {k: v.to(want) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in exp.items()}


# ------------------------------------------------------------------ the serial runs (parent)
_RUNS: dict = {}


def _cached(key, compute):
    if key not in _RUNS:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)       # tiny ops: a second thread only waits for a busy core
        try:
            _RUNS[key] = compute()
        finally:
            torch.set_num_threads(threads)
    return _RUNS[key]


def _start(check, members) -> nn.Module:
    """The serial model, from the initial weights of the group's rank 0 (what a rank builds
    with owned_module for global rank members[0])."""
    return seeded(check.build, check.seed, owner=members[0])


def _mean_loss_backward(model, check, step, members):
    x, y = global_batch(check, step, members)
    loss_of(check, model(x), y).backward()


def zero_optimizers(check) -> dict:
    """{name: (optimizer class, kwargs)} the ZeRO-1 check trains with: Adam's eps the check's
    (None: Adam's default, not passed)."""
    eps = getattr(check, "adam_eps", None)
    return {name: (cls, {**kwargs, **({"eps": eps} if name == "adam" and eps is not None else {})})
            for name, (cls, kwargs) in ZERO_OPTIMIZERS.items()}


def zero_serial(check, members) -> dict:
    """{opt: {"grads": [per step {name: grad}], "params": [per step {name: param}]},
    "init": {name: param}}: a fresh model per optimizer, as the ZeRO-1 check trains."""
    def compute():
        out = {"init": {n: p.detach().clone() for n, p in _start(check, members).named_parameters()}}
        for opt_name, (cls, kwargs) in zero_optimizers(check).items():
            model = _start(check, members)
            opt = cls(model.parameters(), **kwargs)
            grads, params = [], []
            for step in range(1, check.steps + 1):
                opt.zero_grad()
                _mean_loss_backward(model, check, step, members)
                grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
                opt.step()
                params.append({n: p.detach().clone() for n, p in model.named_parameters()})
            out[opt_name] = {"grads": grads, "params": params}
        return out
    return _cached(("zero", check.id, tuple(members)), compute)


def zero_shard(tensors: dict, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s ZeRO-1 shard of {name: tensor}: shard `rank` of each, in order."""
    return torch.cat([cut(t.reshape(-1), rank, world) for t in tensors.values()])


def fsdp_serial(check, members) -> dict:
    """Serial training of check.build() with DDP semantics: the first step's outputs, input
    gradients and activations per rank, its gradients, and the parameters after each of
    check.opt_steps (optimizers in turn on one model)."""
    def compute():
        from rtp_course.checker.common import make_optimizer
        model = _start(check, members)
        out = {"init": {n: p.detach().clone() for n, p in model.named_parameters()},
               "state0": {k: v.detach().clone() for k, v in model.state_dict().items()},
               "units": unit_names(model), "outputs": {}, "input grads": {}, "activations": {}}
        world = len(members)
        scale = element_size(check) / 8          # activations as the check's dtype holds them
        for q in members:               # step 1 on each rank's own batch: what it sees
            x, y = own_batch(check, 1, q)
            x = x.clone().requires_grad_(x.is_floating_point())
            saved = {}
            with torch.autograd.graph.saved_tensors_hooks(_keep_activation(saved), lambda t: t):
                pred = model(x)
            out["outputs"][q] = pred.detach().clone()
            out["activations"][q] = int(scale * sum(saved.values()))
            if x.requires_grad:
                out["input grads"][q] = torch.autograd.grad(loss_of(check, pred, y), x)[0]
            model.zero_grad()
        model.zero_grad()
        _mean_loss_backward(model, check, 1, members)
        out["grads"] = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        step = 0
        for opt_name, count in check.opt_steps:
            opt = make_optimizer(opt_name, model.parameters(), eps=check.adam_eps)
            for _ in range(count):
                step += 1
                opt.zero_grad()
                _mean_loss_backward(model, check, step, members)
                opt.step()
            out[("params", step, opt_name)] = {n: p.detach().clone()
                                               for n, p in model.named_parameters()}
        out["final"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model, step = _start(check, members), 0     # a known mistake: full.grad never reset
        for opt_name, count in check.opt_steps:
            opt = make_optimizer(opt_name, model.parameters(), eps=check.adam_eps)
            for _ in range(count):
                step += 1
                _mean_loss_backward(model, check, step, members)    # no zero_grad: it adds up
                opt.step()
            out[("stale", step, opt_name)] = {n: p.detach().clone()
                                              for n, p in model.named_parameters()}
        assert world == len(members)
        return out
    return _cached(("fsdp", check.id, tuple(members)), compute)


def _keep_activation(saved: dict):
    """A pack hook counting the storages autograd saves that are not parameters (leaves that
    require grad, or views of them): the activations a rank holds after forward."""
    def pack(t):
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    return pack


def fsdp_shard(values: dict, units, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s FSDP shard of {name: tensor}: shard `rank` of each unit's flat vector,
    one unit after another."""
    return torch.cat([cut(flat_of(values[n] for n in names), rank, world) for _, names in units])


def unit_sizes(units, values) -> list:
    """Elements of each unit's flat vector."""
    return [sum(values[n].numel() for n in names) for _, names in units]


# ------------------------------------------------------------------ in the ranks
def shards_of(parameters) -> torch.Tensor | None:
    """The concatenation of `parameters` (flattened), or None if there are none."""
    ps = list(parameters)
    return flat_of(ps) if ps else None


def grads_of(parameters) -> torch.Tensor | None:
    """The concatenation of the parameters' gradients; None if one has none."""
    ps = list(parameters)
    if not ps or any(p.grad is None for p in ps):
        return None
    return flat_of(p.grad for p in ps)


def inner_parameters(opt) -> list:
    """The parameters of a ShardedOptimizer's `self.optimizer` (the stub's contract)."""
    inner = getattr(opt, "optimizer", None)
    groups = getattr(inner, "param_groups", None)
    if not isinstance(groups, list):
        return []
    return [p for g in groups if isinstance(g, dict) for p in g.get("params", [])
            if isinstance(p, torch.Tensor)]


def overlapped_gathers(trace) -> int:
    """All-gathers (posted with a handle) followed by some compute before their first wait()."""
    count = 0
    for i, (kind, index) in enumerate(trace):
        if kind != "all_gather":
            continue
        try:
            end = trace.index(("wait", index), i + 1)
        except ValueError:
            continue                     # a blocking call (or never waited): no overlap
        if any(entry[0] == "compute" for entry in trace[i + 1:end]):
            count += 1
    return count


def held(before: dict, *allowed) -> int:
    """Bytes of the storages alive now, not before, beyond what `allowed` spans."""
    return memory.kept_bytes(before, list(allowed))


def traced():
    """Start commlog's trace (calls and waits, in order) for a phase: the list it fills."""
    commlog.STATE.trace = []
    return commlog.STATE.trace


def untraced():
    commlog.STATE.trace = None


# ------------------------------------------------------------------ hints
NO_ALL_REDUCE = ("rule 'Communication': no all-reduce: the gradients are REDUCE-SCATTERED, "
                 "so that each rank receives only its shard of the sum (an all-reduce sends "
                 "every rank the whole sum, and slicing it afterwards does not undo that)")
GATHER_ONCE = ("rule 'Communication': gather each unit once per pass: one all-gather of its "
               "shard (all_gather_into_tensor, or all_gather into a list) in forward, one "
               "in backward; nothing else in forward")
LAYOUT = ("rule 'Layout': rank r's shard is elements [r * S, (r + 1) * S) of the flat vector "
          "padded with zeros at its END to N * S, S = ceil(P / N), r the GROUP rank; ")
# Where every storage alive in a rank is counted (a scan of the garbage collector's objects,
# ~0.1 s a rank): a memory bug shows at any world size, and this one has uneven shards.
MEMORY_SIZES = (2, 3)
PAD = ("S = ceil(P / N) = (P + N - 1) // N, and the vector is padded with zeros at its END to "
       "N * S elements before it is cut (P = 10, N = 4: S = 3, shard 3 holds element 9 and two "
       "zeros): every shard has S elements, which all_gather_into_tensor and "
       "reduce_scatter_tensor require")


ZERO_HINTS = {
    "init/": "every rank starts from group rank 0's parameters: broadcast each one from "
             "dist.get_global_rank(group, 0) in the constructor",
    "memory/optimizer state": "rule 'Memory': self.optimizer must be built on this rank's "
                              "shards only (S elements of each parameter), so that its state "
                              "is 1/N of a full optimizer's: optimizer_cls(shards, **kwargs), "
                              "never optimizer_cls(params)",
    "memory/bytes held": "rule 'Memory': across steps a rank keeps the model's parameters and "
                         "gradients, its shards, their gradients and self.optimizer's state, "
                         "and nothing else: drop the padded buffers of a step when it ends",
    "gradient shard": "after step() each shard's .grad is ITS piece of the DDP gradient: "
                      "reduce-scatter the padded gradient (sum over ranks: rank r receives "
                      "piece r), then divide by the world size. " + LAYOUT + PAD,
    "/shard": LAYOUT + "self.optimizer's parameters, concatenated in order, are that shard of "
                       "every parameter, and step() updates them. " + PAD,
    "step": "the shards were right but the parameters after step() are not: all-gather every "
            "updated shard (N * S elements) and copy its first numel elements into the "
            "parameter, in place (p.copy_(...)), on every rank",
    "error": "an exception here often means a shard size that is not S = ceil(numel / N) on "
             "every rank: " + PAD,
}


FSDP_HINTS = {
    "init/": "every rank starts from group rank 0's weights: broadcast each parameter and "
             "buffer from dist.get_global_rank(group, 0) before cutting the shards",
    "structure/": LAYOUT + "each unit's flat vector is its parameters, flattened and "
                  "concatenated in unit.named_parameters() order, and fsdp.parameters() yields "
                  "the shards only, one unit after another. " + PAD,
    "full_state_dict": "full_state_dict(): all-gather each unit's shard (N * S elements), "
                       "drop the padding, cut the flat vector back into the unit's parameters "
                       "(their shapes, in named_parameters() order) under the serial keys "
                       "('unit.name'), buffers as they are",
    "forward/output": "the output is the wrapped module's on this rank's own batch: before a "
                      "unit computes, its parameters must be the FULL ones (all-gather the "
                      "shards, unflatten into views of the gathered vector)",
    "backward/grad input": "dL/dx is the serial one on this rank's batch: backward computes "
                           "with the unit gathered again (the same values in the same storage)",
    "backward/gradient shard": "each shard's .grad is its piece of the DDP gradient: "
                               "reduce-scatter the unit's full gradient (full.grad, N * S "
                               "elements), divide by the world size, add it to the shard's "
                               ".grad. " + LAYOUT,
    "step": "the first step's gradients were right but the shards after the optimizer steps "
            "are not: the optimizer must step the shards (fsdp.parameters()), and forward must "
            "gather the updated shards each time (never keep a gathered unit from an earlier "
            "step)",
    "forward/units gathered": "rule 'Overlap': prefetch: in a unit's forward pre-hook, post "
                              "the NEXT unit's all-gather with async_op=True, and wait() for it "
                              "only in that unit's pre-hook, so that it travels while this unit "
                              "computes",
    "backward/units gathered": "rule 'Overlap': in backward, post the PREVIOUS unit's "
                               "all-gather (async_op=True) in a unit's backward pre-hook, before "
                               "its backward computes; wait() for it when that unit's backward "
                               "starts",
    "forward/bytes held": "rule 'Memory': after forward the rank holds gathered units: free "
                          "each unit's gathered storage in its forward hook "
                          "(full.untyped_storage().resize_(0): autograd holds views of it, "
                          "so dropping your references frees nothing) and gather it AGAIN in "
                          "backward (a full backward pre-hook), never keeping it from forward "
                          "to backward",
    "memory/bytes held": "rule 'Memory': besides its shards, their gradients and optimizer "
                         "state, the rank keeps no tensor of the weights (no full copy, no "
                         "gathered unit, no full gradient), wherever it would be kept: once a "
                         "unit's gradient is reduce-scattered, set full.grad = None and free "
                         "its gathered storage",
    "memory/": "rule 'Memory': a rank stores its shards only (1/N of the parameters, and so of "
               "the gradients and the optimizer state): remove the units' own parameters",
    "error/init": "an exception at construction: " + PAD,
    "error/backward": "an exception in backward: the views autograd saved in forward point to "
                      "the unit's gathered storage, which forward freed: gather it AGAIN into "
                      "the same storage (resize_ it back, all-gather into full.data) in a full "
                      "backward pre-hook, before the unit's backward runs",
    "error": "an exception here often means a shard or gathered size that is not what the rule "
             "says: " + PAD,
}
DATA_TRAP = ("an exception in a forward after the first step: autograd saw `full` written in "
             "place. The pieces of `full` (full[:P].split(sizes)) are views autograd made, and "
             "gathering into `full` itself modifies them in place (torch: \"Output 0 of Split "
             "is a view and is being modified inplace\"): all-gather into full.data, a write "
             "autograd does not see")
FSDP_HINTS.update({f"error/step{i} forward": DATA_TRAP for i in range(2, 9)})
STALE_GRAD = "a gradient kept from the previous step (full.grad, or a buffer the shard's .grad is): this step's was added to it"
STALE_HINT = ("a gradient kept from the previous step had this step's added to it: set "
              "full.grad = None once it is reduce-scattered (rule 'Memory': \"after the "
              "optimizer steps, no gathered unit and no full gradient\"; autograd ADDS to a "
              "full.grad it finds), and accumulate into the shard's .grad itself, which "
              "zero_grad() resets, never into a buffer of your own that outlives it")
GROUP_SRC = ("rule 'Group': \"Global rank 0 is not part of group\": a broadcast's src is a "
             "GLOBAL rank, the group's rank 0 is dist.get_global_rank(group, 0) (global rank 1 "
             "for the group {1, 3}); shard index and count are the GROUP rank and size")
