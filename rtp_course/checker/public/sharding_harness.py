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
from rtp_course.checker.registry import Like
from rtp_course.runtime import asked, commlog
from rtp_course.training import memory

ROWS = 3                                  # samples per rank and step
ZERO_OPTIMIZERS = {"sgd": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),   # = make_optimizer's
                   "adam": (torch.optim.Adam, dict(lr=0.01))}
PAIRS = ([0, 2], [1, 3])                  # two groups of ranks that are not consecutive
# At this step the group's last rank's loss is zero, and so is every gradient it computes
# (exactly): a rank must reduce-scatter a zero gradient all the same (rule 'Communication':
# every rank makes the same collectives whatever its data), or the others wait for it.
QUIET_STEP = 2
# after a frozen parameter's name in the ZeRO-1 check's keys ('step1 sgd/2.bias (frozen: ...)')
FROZEN = " (frozen: requires_grad=False)"


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


def unit_names(model: nn.Module, prefix: str = "", nested: bool = True) -> list:
    """[(unit name, [its parameters' names in the model])]: the stub's units; with
    `nested=False`, a known mistake's: every child that holds parameters one unit, an
    nn.ModuleList or nn.Sequential too."""
    found = []
    for name, child in model.named_children():
        if nested and isinstance(child, (nn.ModuleList, nn.Sequential)):
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


def loss_weight(step: int, members, rank: int) -> float:
    """The factor of `rank`'s loss at `step` in a group of `members` (global ranks): 0 for the
    group's last rank at QUIET_STEP (its gradients are exactly zero), else 1."""
    return 0.0 if len(members) > 1 and step == QUIET_STEP and rank == members[-1] else 1.0


def members_of(check, world_size: int, rank: int) -> list:
    """The global ranks of the group `rank` is in (check.members' lists)."""
    return next(m for m in check.members(world_size) if rank in m)


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
    """DDP's gradient: the mean over the members of each one's loss (its own batch's mean),
    weighted by loss_weight (the quiet rank's is zero)."""
    loss = sum(loss_weight(step, members, q) * loss_of(check, model(x), y)
               for q, (x, y) in ((q, own_batch(check, step, q)) for q in members))
    (loss / len(members)).backward()


def zero_optimizers(check) -> dict:
    """{name: (optimizer class, kwargs)} the ZeRO-1 check trains with (check.optimizers):
    Adam's eps the check's (None: Adam's default, not passed)."""
    eps = getattr(check, "adam_eps", None)
    return {name: (cls, {**kwargs, **({"eps": eps} if name == "adam" and eps is not None else {})})
            for name, (cls, kwargs) in getattr(check, "optimizers", ZERO_OPTIMIZERS).items()}


def init_phase(index: int, opt_name: str) -> str:
    """The phase of the ZeRO-1 check's constructor for its `index`-th optimizer."""
    return "init" if index == 0 else f"init {opt_name}"


def zero_serial(check, members) -> dict:
    """{opt: {"grads": [per step {name: grad}], "params": [per step {name: param}]},
    "init": {name: param}}: a fresh model per optimizer, as the ZeRO-1 check trains."""
    def compute():
        start = _start(check, members)
        out = {"init": {n: p.detach().clone() for n, p in start.named_parameters()},
               "frozen": {n for n, p in start.named_parameters() if not p.requires_grad}}
        for opt_name, (cls, kwargs) in zero_optimizers(check).items():
            model = _start(check, members)
            opt = cls(model.parameters(), **kwargs)
            grads, params = [], []
            for step in range(1, check.steps + 1):
                opt.zero_grad()
                _mean_loss_backward(model, check, step, members)
                grads.append({n: p.grad.detach().clone() if p.grad is not None else
                              torch.zeros_like(p) for n, p in model.named_parameters()})
                opt.step()
                params.append({n: p.detach().clone() for n, p in model.named_parameters()})
            out[opt_name] = {"grads": grads, "params": params}
        return out
    return _cached(("zero", check.id, tuple(members)), compute)


def zero_shard(tensors: dict, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s ZeRO-1 shard of {name: tensor}: shard `rank` of each, in order."""
    return torch.cat([cut(t.reshape(-1), rank, world) for t in tensors.values()])


def frozen_zeroed(flat, params, frozen, world: int):
    """A ZeRO-1 shard (`flat`, the shard of every parameter in order) with zeros where the
    frozen parameters' shards lie (the stub lets one flat shard step a frozen part with gradient
    0, which weight decay moves, if nothing goes back into the parameter); as it is if its size
    is not the layout's."""
    sizes = [pieces(p.numel(), world) for p in params]
    if flat is None or flat.numel() != sum(sizes):
        return flat
    keep = torch.cat([torch.full((n,), not f, dtype=torch.bool) for n, f in zip(sizes, frozen)])
    return flat.masked_fill(~keep.to(flat.device), 0)


def zero_expected(tensors: dict, rank: int, world: int, dtype: str) -> Like:
    """Rank `rank`'s ZeRO-1 shard of {name: tensor} in `dtype`, with what a known mistake
    gives: shard `rank` of ONE flat vector of all the tensors (FSDP's cut of a unit)."""
    want = getattr(torch, dtype)
    return Like(zero_shard(tensors, rank, world).to(want),
                ((cut(flat_of(tensors.values()), rank, world).to(want), FLAT_ALL, FLAT_ALL_HINT),))


FLAT_ALL = "one flat vector of ALL the parameters cut in N (FSDP's cut of a unit)"
FLAT_ALL_HINT = ("rule 'Layout': ZeRO-1 cuts EACH parameter on its own, not one flat vector of "
                 "all of them: rank r's shard is shard r of every parameter (p.reshape(-1) padded "
                 "with zeros to N * S, S = ceil(p.numel() / N) for that parameter), concatenated "
                 "in the order of the parameters (the stub: \"ZeRO-1 cuts each PARAMETER p ... "
                 "Rank r's shard is the concatenation, in the order of the parameters, of shard r "
                 "of each\"); one flat shard per rank is fine if it is laid out so (rank r's "
                 "pieces of every parameter together)")


def fsdp_serial(check, members) -> dict:
    """Serial training of check.build() with DDP semantics: the first step's outputs, input
    gradients and activations per rank, its gradients, and the parameters after each of
    check.opt_steps (optimizers in turn on one model)."""
    def compute():
        from rtp_course.checker.common import make_optimizer
        model = _start(check, members)
        out = {"init": {n: p.detach().clone() for n, p in model.named_parameters()},
               "state0": {k: v.detach().clone() for k, v in model.state_dict().items()},
               "buffers": [n for n, _ in model.named_buffers()],
               "units": unit_names(model), "whole units": unit_names(model, nested=False),
               "kinds": {n: type(m).__name__ for n, m in model.named_modules()},
               "outputs": {}, "input grads": {}, "activations": {}}
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
            ptr, nbytes = asked.storage_span(t)
            saved[ptr] = nbytes
        return t
    return pack


def fsdp_shard(values: dict, units, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s FSDP shard of {name: tensor}: shard `rank` of each unit's flat vector,
    one unit after another."""
    return torch.cat([cut(flat_of(values[n] for n in names), rank, world) for _, names in units])


def fsdp_structure(serial: dict, rank: int, world: int, dtype: str):
    """Rank `rank`'s shard of every unit after construction in `dtype`, with what a known
    mistake gives where the model has an nn.ModuleList or nn.Sequential child: that child
    taken as ONE unit (found K units where the rule finds M)."""
    want = getattr(torch, dtype)
    right = fsdp_shard(serial["init"], serial["units"], rank, world).to(want)
    units, whole = serial["units"], serial["whole units"]
    if [u for u, _ in whole] == [u for u, _ in units]:
        return right
    names = lambda found: ", ".join(repr(u) for u, _ in found)   # noqa: E731
    containers = ", ".join(f"'{u}' (an nn.{serial['kinds'][u]})" for u, _ in whole
                           if u not in dict(units))
    cause = f"cutting {len(whole)} units ({names(whole)}: {containers} taken as ONE unit)"
    hint = (f"found {len(whole)} units, expected {len(units)} ({names(units)}): the units are "
            f"the children that hold parameters, and an nn.ModuleList or nn.Sequential child "
            f"counts by ITS children, each a unit (look into such a child recursively): it is "
            f"never called (its parent loops over it), so hooks on it never fire")
    return Like(right, ((fsdp_shard(serial["init"], whole, rank, world).to(want), cause, hint),))


def unit_sizes(units, values) -> list:
    """Elements of each unit's flat vector."""
    return [sum(values[n].numel() for n in names) for _, names in units]


# ------------------------------------------------------------------ in the ranks
def shards_of(parameters) -> torch.Tensor | None:
    """The concatenation of `parameters` (flattened), or None if there are none."""
    ps = list(parameters)
    return flat_of(ps) if ps else None


def grads_of(parameters, none_is_zero: bool = False) -> torch.Tensor | None:
    """The concatenation of the parameters' gradients; None if one has none (or, with
    `none_is_zero`, zeros for it: a frozen parameter's shard may have none or a zero one)."""
    ps = list(parameters)
    if not ps or (not none_is_zero and any(p.grad is None for p in ps)):
        return None
    return flat_of(p.grad if p.grad is not None else torch.zeros_like(p) for p in ps)


def record_state(ctx, phase: str, keys, state) -> None:
    """Record `state` (what full_state_dict() returned) under `phase`/<key> for each serial
    key; a key the dict lacks is said to be missing (the verdict shows the value given in
    place of its tensor), with the keys it has."""
    for k in keys:
        if isinstance(state, dict) and k not in state:
            has = [repr(x)[:60] for x in list(state)[:4]]
            more = f", ... {len(state)} keys" if len(state) > len(has) else ""
            ctx.record_value(f"{phase}/{k}", f"is missing: the dict full_state_dict() returned "
                                             f"has no such key (it has {', '.join(has)}{more})"
                             if has else "is missing: full_state_dict() returned an empty dict")
        else:
            ctx.record(f"{phase}/{k}", state.get(k) if isinstance(state, dict) else None)


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


def gathered_bytes(phase: str) -> int:
    """Bytes this rank gave to the all-gathers of `phase` (its shards), as commlog logged them."""
    return sum(e.nbytes for e in commlog.events() if e.phase == phase and e.family == "all_gather")


def held(before: dict, *allowed, roots=()) -> int:
    """Bytes of the storages alive now, not before, beyond what `allowed` spans; the tensors
    and storage objects reachable from `roots` (the model, the optimizer) count even where the
    garbage collector does not list them (memory.kept_bytes)."""
    return memory.kept_bytes(before, list(allowed), roots=roots)


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
          "padded with zeros at its END to N * S, S = ceil(P / N), r the GROUP rank")
# Where every storage alive in a rank is counted (a scan of the garbage collector's objects,
# ~0.1 s a rank): a memory bug shows at any world size, and this one has uneven shards.
MEMORY_SIZES = (2, 3)
PAD = ("S = ceil(P / N) = (P + N - 1) // N, and the vector is padded with zeros at its END to "
       "N * S elements before it is cut (P = 10, N = 4: S = 3, shard 3 holds element 9 and two "
       "zeros): every shard has S elements, which all_gather_into_tensor and "
       "reduce_scatter_tensor require")


ZERO_DATA = (f"rule 'Communication': every rank makes the same collectives whatever its data: "
             f"at step {QUIET_STEP} the group's last rank's loss is zero, and so is every "
             f"gradient it computes; it must reduce-scatter them all the same (the others' "
             f"shards need its zeros in the sum), never skip a parameter or a unit because its "
             f"gradient is zero on this rank (an unused ReLU branch, an embedding row no token "
             f"of this rank used): the others wait for it forever")
ZERO_HINTS = {
    "init/": "every rank starts from group rank 0's parameters: broadcast each one from "
             "dist.get_global_rank(group, 0) in the constructor",
    "memory/optimizer state": "rule 'Memory': self.optimizer must be built on this rank's "
                              "shards only (S elements of each parameter), so that its state "
                              "is 1/N of a full optimizer's: optimizer_cls(shards, **kwargs), "
                              "never optimizer_cls(params)",
    "memory/bytes held": "rule 'Memory': across steps a rank keeps the model's parameters and "
                         "gradients, its shards, their gradients and self.optimizer's state, "
                         "and nothing else: drop the padded buffers of a step when it ends (the "
                         "check trains a fresh model with each optimizer: gradient hooks whose "
                         "closures hold the ShardedOptimizer make a cycle through torch's hook "
                         "table that the garbage collector cannot break, and keep a dropped "
                         "optimizer and its model alive; let a hook hold it by "
                         "weakref.ref(self))",
    "gradient shard": "after step() each shard's .grad is ITS piece of the DDP gradient: "
                      "reduce-scatter the padded gradient (sum over ranks: rank r receives "
                      "piece r), then divide by the world size. " + LAYOUT + ". " + PAD,
    "gradient shard#scaled": "after step() each shard's .grad is ITS piece of the DDP "
                             "gradient, the MEAN over the group's ranks: reduce-scatter the "
                             "padded gradient (a SUM over the ranks), then divide by the "
                             "group's size, once",
    "/shard": LAYOUT + "; self.optimizer's parameters, concatenated in order, are that shard of "
                       "every parameter, and step() updates them. " + PAD,
    FROZEN.strip(): "rule 'Frozen and unused': a parameter whose .grad is None (frozen) is "
                    "never stepped and stays as it is: its shard gets no gradient (.grad None, "
                    "not zeros) and the inner optimizer skips it. An optimizer with weight decay "
                    "(AdamW, SGD(weight_decay=...)) moves a parameter stepped with a zero "
                    "gradient: a frozen parameter's gradient taken as zeros, reduce-scattered, "
                    "stepped and copied back changes it (one flat shard may step a frozen part "
                    "with gradient 0 only if nothing is copied back into the parameter)",
    "step": "the shards were right but the parameters after step() are not: all-gather every "
            "updated shard (N * S elements) and copy its first numel elements into the "
            "parameter, in place (p.copy_(...)), on every rank",
    "error": "an exception here often means a shard size that is not S = ceil(numel / N) on "
             "every rank: " + PAD,
    "deadlock": ZERO_DATA,
}
GROUP_SIZES = ("a size the world size times too large or too small means a collective ran on "
               "another group than the shard's (pass group=group to every call) or a shard "
               "index taken from the global rank (use dist.get_rank(group))")
ZERO_STEP_ERROR = (
    "an exception in a training step: the check's model has a FROZEN parameter "
    "(requires_grad=False), whose .grad stays None after backward: skip it (its shard gets no gradient, "
    ".grad None, and the inner optimizer skips it), never read p.grad unchecked (a gradient "
    "hook cannot be registered on it either: register hooks only where p.requires_grad); "
    "p.grad is None too inside a hook made with Tensor.register_hook, which fires BEFORE the "
    "gradient is accumulated: use p.register_post_accumulate_grad_hook; " + GROUP_SIZES +
    "; else a shard size that is not S = ceil(numel / N): " + PAD)
ZERO_HINTS.update({f"error/step{i} {o}": ZERO_STEP_ERROR for i in range(1, 5)
                   for o in ZERO_OPTIMIZERS})
# The exception's own words pick one clause (verdict.exception_form): a None, a hook torch
# refused, sizes that disagree.
ZERO_HINTS["error#none"] = (
    "an exception over a None: the check's model has a FROZEN parameter (requires_grad=False), "
    "whose .grad stays None after backward: skip it (rule 'Frozen and unused': its shard gets "
    "no gradient, .grad None, and the inner optimizer skips it), never read p.grad unchecked; "
    "p.grad is None too inside a hook made with Tensor.register_hook, which fires BEFORE the "
    "gradient is accumulated: use p.register_post_accumulate_grad_hook")
ZERO_HINTS["error#hook"] = (
    "rule 'Frozen and unused': a gradient hook can be registered only on a parameter that "
    "requires grad, and the check's model has a FROZEN parameter (requires_grad=False): "
    "register hooks only where p.requires_grad (its .grad stays None; step() skips it)")
ZERO_HINTS["error#size"] = (
    "sizes that disagree: rule 'Layout': rank r's shard of each parameter is elements "
    "[r * S, (r + 1) * S) of p.reshape(-1) padded with zeros at its END to N * S, "
    "S = ceil(numel / N) on every rank, N the GROUP's size (dist.get_world_size(group)) and r "
    "the GROUP rank (dist.get_rank(group)): a shard index taken from the global rank cuts past "
    "the padded end (an empty shard), a size other than S makes the N * S elements that "
    "reduce_scatter_tensor and all_gather_into_tensor move disagree with the parameter's "
    "numel. " + PAD)
ZERO_HINTS["error/init"] = (
    "an exception at construction: broadcast every parameter (a frozen one too) from "
    "dist.get_global_rank(group, 0); a gradient hook can be registered only on a parameter "
    "that requires grad (the check's model has a frozen one); else a shard size that is not "
    "S = ceil(numel / N): " + PAD)


HOOK_ORDER = ("register the post-accumulate-grad hook once, at construction, on the one `full` "
              "a unit keeps for its life, AFTER full.requires_grad_(True) (torch refuses a hook "
              "on a tensor that does not require grad: \"cannot register a hook on a tensor "
              "that doesn't require gradient\"); requires_grad_ goes at construction too, "
              "not in a forward pre-hook")
FSDP_HINTS = {
    "init/": "every rank starts from group rank 0's weights: broadcast each parameter and "
             "buffer from dist.get_global_rank(group, 0) before cutting the shards",
    "structure/": LAYOUT + "; each unit's flat vector is its parameters, flattened and "
                  "concatenated in unit.named_parameters() order, and fsdp.parameters() yields "
                  "the shards only, one unit after another. The units are the children that "
                  "hold parameters, and an nn.ModuleList or nn.Sequential child counts by ITS "
                  "children: the check's model has `layers`, an nn.ModuleList of three blocks, "
                  "which are three units ('layers.0', 'layers.1', 'layers.2'), never one (look "
                  "into such a child recursively). " + PAD,
    "full_state_dict": "full_state_dict(): all-gather each unit's shard (N * S elements), "
                       "drop the padding, cut the flat vector back into the unit's parameters "
                       "(their shapes, in named_parameters() order) under the serial keys: the "
                       "unit's path, then the parameter's name INSIDE the unit, its whole "
                       "qualified name ('layers.0' + '.' + 'fc.weight'; the leaf 'weight' alone "
                       "loses the submodule, and two leaves of one unit collide), the keys of "
                       "module.state_dict(); buffers as they are",
    "init/buffer": "every rank starts from group rank 0's buffers too: the check's blocks have "
                   "a buffer (`scale`) each rank draws itself; broadcast every buffer "
                   "(module.buffers()) from dist.get_global_rank(group, 0) at construction, as "
                   "the parameters",
    "deadlock": ZERO_DATA,
    "forward/output": "the output is the wrapped module's on this rank's own batch: before a "
                      "unit computes, its parameters must be the FULL ones (all-gather the "
                      "shards, unflatten into views of the gathered vector)",
    "backward/grad input": "dL/dx is the serial one on this rank's batch: backward computes "
                           "with the unit gathered again (the same values in the same storage)",
    "backward/gradient shard": "each shard's .grad is its piece of the DDP gradient: "
                               "reduce-scatter the unit's full gradient (full.grad, N * S "
                               "elements), divide by the world size, add it to the shard's "
                               ".grad. " + LAYOUT + ".",
    "backward/gradient shard#scaled": "each shard's .grad is its piece of the DDP gradient, "
                                      "the MEAN over the group's ranks: reduce-scatter the "
                                      "unit's full gradient (a SUM over the ranks), divide by "
                                      "the group's size once, and ADD it to the shard's .grad "
                                      "(several backwards before a step accumulate)",
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
    "backward/bytes of this rank's shards all-gathered again": (
        "rule 'Memory': after forward a rank holds at most two gathered units, so backward "
        "gathers the others AGAIN; a unit backward did not gather stayed gathered from "
        "forward: free each unit's gathered storage in its forward hook "
        "(full.untyped_storage().resize_(0): autograd holds views of it, so dropping your "
        "references frees nothing) and gather it again in its full backward pre-hook, into "
        "the same storage (a unit never freed is never gathered again, and nothing is "
        "prefetched either)"),
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
    "error/init": "an exception at construction: " + HOOK_ORDER + "; or a size that is not "
                  "what the rule says: " + PAD,
    "error/forward": "an exception in forward: if a module has no attribute 'weight', a "
                     "unit's parameters were removed and never put back because its forward "
                     "pre-hook never ran. Hooks fire only on modules that are CALLED: an "
                     "nn.ModuleList is never called (its parent loops over it), so an "
                     "nn.ModuleList or nn.Sequential child counts by ITS children, each a unit "
                     "('layers.0', 'layers.1', ...: look into such a child recursively). "
                     "Else " + GROUP_SIZES + "; or a shard or gathered size that is not what "
                     "the rule says: " + PAD,
    "error/backward": "an exception in backward: the views autograd saved in forward point to "
                      "the unit's gathered storage, which forward freed: gather it AGAIN into "
                      "the same storage (resize_ it back, all-gather into full.data) in a full "
                      "backward pre-hook, before the unit's backward runs. If full.grad is "
                      "None where you reduce-scatter it: a module's backward hook fires before "
                      "autograd accumulates full.grad (reduce-scatter from "
                      "full.register_post_accumulate_grad_hook, registered ONCE, at "
                      "construction: one registered at every forward fires again and again)",
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
GROUP_SRC = ("rule 'Group': a broadcast on a group of global ranks {1, 3} was given src=0, a "
             "rank outside the group (torch refuses it). src is a GLOBAL rank: the group's rank "
             "0 is dist.get_global_rank(group, 0), global rank 1 for {1, 3}; the shard index "
             "and count are the GROUP rank and size (dist.get_rank(group), "
             "dist.get_world_size(group))")
