"""The parent's half of the flyweight checks: the documented shard layout, serial training with
DDP semantics, and from them what each rank must observe. Serial torch only, never student code.

The layout is the one the stub's docstring documents: U units per layer cut like
torch.tensor_split, shard s holding units [start[s], start[s] + sizes[s]).
"""
from __future__ import annotations

import torch
from torch import nn

from rtp_course.checker import inputs
from rtp_course.checker.common import make_optimizer, randn
from rtp_course.checker.registry import Bound, CommRule
from rtp_course.models.moe import MoE

KINDS = (MoE, nn.MultiheadAttention, nn.Linear, nn.Conv2d, nn.Embedding)
RECV, SEND = "recv|irecv", "send|isend"


def sharded_layers(model: nn.Module, prefix: str = "") -> dict:
    """{module name: [its parameter keys]} of the layers RTP wraps, in module order."""
    if isinstance(model, KINDS):   # an MoE's router is not sharded: replicated
        return {prefix: [k for k, _ in model.named_parameters()
                         if not (isinstance(model, MoE) and k.startswith("router."))]}
    out = {}
    for name, child in model.named_children():
        out.update(sharded_layers(child, f"{prefix}.{name}" if prefix else name))
    return out


def units(m: nn.Module) -> int:
    if isinstance(m, MoE):
        return m.num_experts
    if isinstance(m, nn.MultiheadAttention):
        return m.num_heads
    if isinstance(m, nn.Linear):
        return m.out_features
    if isinstance(m, nn.Conv2d):
        return m.out_channels
    return m.embedding_dim


def unit_span(m: nn.Module, index: int, world: int) -> tuple:
    u = units(m)
    sizes = [u // world + (1 if s < u % world else 0) for s in range(world)]
    start = sum(sizes[:index])
    return start, start + sizes[index]


def shard_slices(m: nn.Module, index: int, world: int) -> dict:
    """{param key: (dim, ((start, stop), ...))} of shard `index`: the stub's table."""
    a, b = unit_span(m, index, world)
    if isinstance(m, nn.MultiheadAttention):
        e, d = m.embed_dim, m.head_dim
        rows = tuple((j * e + a * d, j * e + b * d) for j in range(3))
        out = {"in_proj_weight": (0, rows), "in_proj_bias": (0, rows),
               "out_proj.weight": (1, ((a * d, b * d),)),
               "out_proj.bias": (0, ((0, e),) if index == 0 else ())}
    elif isinstance(m, nn.Embedding):
        out = {"weight": (1, ((a, b),))}
    elif isinstance(m, MoE):   # experts [a, b) whole, the others empty
        out = {f"experts.{e}.{k}": (0, ((0, p.shape[0]),) if a <= e < b else ())
               for e, expert in enumerate(m.experts) for k, p in expert.named_parameters()}
    else:
        out = {"weight": (0, ((a, b),)), "bias": (0, ((a, b),))}
    present = dict(m.named_parameters())
    return {k: v for k, v in out.items() if k in present}


def cut(full: torch.Tensor, dim: int, spans) -> torch.Tensor:
    if not spans:
        return full.narrow(dim, 0, 0)
    return torch.cat([full.narrow(dim, a, b - a) for a, b in spans], dim)


def upstream(step: int, rank: int, shape, dtype, zero: bool = False) -> torch.Tensor:
    """dL/d output of global rank `rank` at `step` (the loss is (output * upstream).sum()),
    drawn from that rank's own key (checker.inputs); `zero`: a rank whose data happen to give
    a zero gradient (it communicates all the same)."""
    g = randn(5000 + 10 * step, *shape, owner=rank).to(dtype)
    return g * 0 if zero else g


def zero_upstream(check, step: int, group_rank: int, world: int) -> bool:
    """Whether this rank's upstream is zero: the last rank's, at step 1, where the check asks."""
    return check.zero_last_rank and step == 1 and world > 1 and group_rank == world - 1


def _clone(named) -> dict:
    return {n: t.detach().clone() for n, t in named}


_TRACES: dict = {}


def serial_trace(check, members) -> dict:
    """Serial training of check.build() with DDP semantics over the batches of the group of
    global ranks `members`, from the weights of its first."""
    key = (check.id, check.dtype, tuple(members))
    if key not in _TRACES:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny ops: a second thread only waits for a busy core
        try:
            _TRACES[key] = _train(check, list(members))
        finally:
            torch.set_num_threads(threads)
    return _TRACES[key]


def _train(check, members: list) -> dict:
    dtype, world = getattr(torch, check.dtype), len(members)
    with torch.random.fork_rng(devices=[]):   # CPU only, as the fork
        torch.random.default_generator.manual_seed(inputs.seed(0, owner=members[0]))
        model = check.build().to(dtype)
    tr = {"layers": sharded_layers(model), "init": _clone(model.named_parameters()),
          "state0": _clone(model.state_dict().items()),
          "frozen": sorted(n for n, p in model.named_parameters() if not p.requires_grad)}
    tr["modules"] = {mod: model.get_submodule(mod) for mod in tr["layers"]}
    step = 0
    for opt_name, count in check.opt_steps:
        opt = make_optimizer(opt_name, model.parameters(), eps=check.adam_eps)
        for _ in range(count):
            step += 1
            grads = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
            for q in range(world):
                xs = [x.to(dtype) if x.is_floating_point() else x
                      for x in check.inputs(step, members[q])]
                xs = [x.clone().requires_grad_(x.is_floating_point()) for x in xs]
                model.zero_grad(set_to_none=True)
                out = check.call(model, xs)
                (out * upstream(step, members[q], out.shape, dtype,
                                zero_upstream(check, step, q, world))).sum().backward()
                for n, p in model.named_parameters():
                    if p.grad is not None:
                        grads[n] += p.grad / world
                tr[("output", step, q)] = out.detach()
                if step == 1:
                    tr[("grad inputs", q)] = [x.grad for x in xs]
            for n, p in model.named_parameters():
                p.grad = grads[n]
            if step == 1:
                tr["grads"] = _clone(grads.items())
            opt.step()
        tr[("params", step, opt_name)] = _clone(model.named_parameters())
    tr["final"] = _clone(model.state_dict().items())
    return tr


def initial_model(check, members) -> nn.Module:
    """The serial model as the group of global ranks `members` starts it (its first's weights)."""
    tr = serial_trace(check, members)
    with torch.random.fork_rng(devices=[]):
        model = check.build().to(getattr(torch, check.dtype))
    model.load_state_dict(tr["state0"])
    return model


def _shard_bytes(tr, mod, index, world, elsize, trainable_only=False) -> int:
    m, total = tr["modules"][mod], 0
    for key, (dim, spans) in shard_slices(m, index, world).items():
        if trainable_only and (f"{mod}.{key}" if mod else key) in tr["frozen"]:
            continue
        shape = list(m.get_parameter(key).shape)
        shape[dim] = sum(b - a for a, b in spans)
        total += torch.Size(shape).numel() * elsize
    return total


def byte_plan(check, members, rank: int) -> dict:
    """Bytes per layer: own shard, all shards, largest shard; replicated and serial bytes."""
    tr, world = serial_trace(check, members), len(members)
    elsize = torch.empty(0, dtype=getattr(torch, check.dtype)).element_size()
    layers = {mod: [_shard_bytes(tr, mod, s, world, elsize) for s in range(world)]
              for mod in tr["layers"]}
    sharded = {f"{mod}.{k}" if mod else k for mod, keys in tr["layers"].items() for k in keys}
    rep = {n: t for n, t in tr["init"].items() if n not in sharded}
    trainable = sum(_shard_bytes(tr, mod, rank, world, elsize, True) for mod in tr["layers"])
    return {"own": sum(b[rank] for b in layers.values()),
            "own_trainable": trainable + sum(t.numel() * elsize for n, t in rep.items()
                                             if n not in tr["frozen"]),
            "total": sum(sum(b) for b in layers.values()),
            "max": max((max(b) for b in layers.values()), default=0),
            # the largest shard of another layer than the largest one's (0 with one layer)
            "next": (sorted((max(b) for b in layers.values()), reverse=True) + [0, 0])[1],
            "max_sum": sum(max(b) for b in layers.values()),
            "layers": len(layers),
            "tensors": sum(len(k) for k in tr["layers"].values()),
            "replicated": rep,
            "replicated_bytes": sum(t.numel() * elsize for t in rep.values()),
            "serial_bytes": sum(t.numel() * elsize for t in tr["init"].values())}


def _params(exp, prefix, tr, values, rank, world, replicated):
    """Shard (documented slice) and replicated values, under keys f"{prefix}{name} ..."."""
    grads = prefix.startswith("backward/grad")
    for mod, keys in tr["layers"].items():
        slices = shard_slices(tr["modules"][mod], rank, world)
        for key in keys:
            full = f"{mod}.{key}" if mod else key
            if grads and full in tr["frozen"]:
                exp[f"{prefix}{full} shard (frozen): no gradient"] = True
            else:
                exp[f"{prefix}{full} shard"] = cut(values[full], *slices[key])
    for name in sorted(replicated):
        if grads and name in tr["frozen"]:
            exp[f"{prefix}{name} (replicated parameter, frozen): no gradient"] = True
        else:
            exp[f"{prefix}{name} (replicated parameter)"] = values[name]


def expected_rank(check, members, rank: int) -> dict:
    """{key: value | Bound} group rank `rank` of the group of global ranks `members` must
    record, in the order the verdict reads them."""
    tr, plan = serial_trace(check, members), byte_plan(check, members, rank)
    world = len(members)
    exp = {}
    for mod, keys in tr["layers"].items():
        m = tr["modules"][mod]
        exp[f"structure/{mod or '(the model itself)'} shard"] = (
            type(m).__name__, rank, world, unit_span(m, rank, world))
        slices = shard_slices(m, rank, world)
        for key in keys:
            exp[f"structure/{mod}.{key} slices" if mod else f"structure/{key} slices"] = slices[key]
    exp["structure/replicated parameters"] = sorted(plan["replicated"])
    exp["structure/frozen parameters (requires_grad=False)"] = tr["frozen"]
    if check.record_init:
        _params(exp, "init/", tr, tr["init"], rank, world, plan["replicated"])
        exp.update({f"full_state_dict/{k}": v for k, v in tr["state0"].items()})
    held = f"largest shard {plan['max']} bytes"
    exp["forward/output"] = tr[("output", 1, rank)]
    exp["forward/compute while the next shard is in flight"] = True
    exp["backward/compute while a shard is in flight"] = True
    held_bounds = {
        "forward/received bytes held at peak": Bound(
            high=2 * plan["max"], what=f"2 shards: the one in hand and the arriving one; {held}"),
        "forward/received bytes still held after forward": Bound(
            high=0, what="every received shard dropped once used"),

        # The layer backward reaches may still wait for the previous layer's accumulator
        # (its last wait deferred for overlap): that one shard, of another layer, is allowed.
        "backward/received bytes held at peak": Bound(
            high=4 * plan["max"] + plan["next"], what=f"4 shards: weights in hand and "
            f"arriving, the accumulator arriving and the one just added to, and the previous "
            f"layer's accumulator still arriving; {held}"),
        "backward/received bytes still held after backward": Bound(
            high=0, what="every received shard and accumulator dropped once used")}
    exp.update(held_bounds)
    exp["forward/bytes held after forward besides activations"] = Bound(
        high=0.1 * (plan["own"] + plan["replicated_bytes"]) + 4096,
        what="no copy of a shard kept from forward to backward besides what autograd saves "
             f"(backward rotates the weights again); {held}")
    for i, g in enumerate(tr[("grad inputs", rank)]):
        if g is not None:
            exp[f"backward/grad input {i}"] = g
    _params(exp, "backward/grad ", tr, tr["grads"], rank, world, plan["replicated"])
    step = 0
    for opt_name, count in check.opt_steps:
        for _ in range(count):
            step += 1
            if step > 1:
                exp[f"step{step} forward/output"] = tr[("output", step, rank)]
                exp.update({k.replace("forward", f"step{step} forward", 1)
                            .replace("backward", f"step{step} backward", 1): v
                            for k, v in held_bounds.items()})
        _params(exp, f"step{step} {opt_name}/", tr, tr[("params", step, opt_name)], rank, world,
                plan["replicated"])
    own = plan["own"] + plan["replicated_bytes"]
    exp["memory/bytes held besides parameters and buffers"] = Bound(
        high=0.1 * own + 4096, what="small caches at most; the serial weights are "
                                    f"{plan['serial_bytes']} bytes")
    states = 2 if check.opt_steps[-1][0] == "adam" else 1  # Adam: 2 moments; SGD: momentum
    for what, factor, mine in (("parameter", 1, own), ("gradient", 1, plan["own_trainable"]),
                               ("optimizer state", states, plan["own_trainable"])):
        exp[f"memory/{what} bytes"] = Bound(
            0.9 * factor * mine, 1.1 * factor * mine + 64,
            what=f"this rank's shards and the replicated parameters"
                 f"{f' ({factor} optimizer states each)' if what == 'optimizer state' else ''}; "
                 f"the serial model's parameters are {plan['serial_bytes']} bytes")
    exp.update({f"full_state_dict after the steps/{k}": v for k, v in tr["final"].items()})
    return exp


def step_phases(check) -> list:
    """[(step, optimizer name)] in training order, steps counted from 1."""
    names = [name for name, count in check.opt_steps for _ in range(count)]
    return list(enumerate(names, start=1))


def rtp_groups(check, world: int) -> list:
    """The RTP groups as lists of global ranks: [[0..world-1]] unless the check uses subgroups."""
    return check.members(world) or [list(range(world))]


def rtp_comm_rules(check, world: int) -> dict:
    """{global rank: [CommRule]}: what each phase may send and receive, and from which rank."""
    gathers = ["full_state_dict after the steps"]
    if check.record_init:
        gathers.append("full_state_dict")
    rules = {}
    for members in rtp_groups(check, world):
        for r in range(len(members)):
            rules[members[r]] = _rank_rules(check, members, r, gathers)
    return rules


def _rank_rules(check, members, r, gathers) -> list:
    """One rank's rules: group rank r of the group of global ranks `members`."""
    n = len(members)
    mine = [CommRule("structure", "*", 0, "shard_layout() only describes: no communication")]
    mine += [CommRule(f"step{s} {opt}", "*", 0, "the optimizer step updates this rank's own "
                      "shards: no communication") for s, opt in step_phases(check)]
    plan = byte_plan(check, members, r)
    if n == 1:   # nothing to rotate; an all-reduce of a replicated gradient is harmless
        rep = sum(1 for t in plan["replicated"].values() if t.is_floating_point())
        return mine + [CommRule(p, "*", 0, "with one rank nothing needs to be communicated")
                       for p in ["forward"] + gathers] + [
            CommRule("backward", "p2p", 0, "with one rank there is nothing to rotate"),
            CommRule("backward", "collective", Bound(0, rep), "backward's only collective: "
                     "the all_reduce of the replicated parameters' gradients (at most one each)")]
    lay, ten, total, own = plan["layers"], plan["tensors"], plan["total"], plan["own"]
    prev, nxt = (members[(r - 1) % n],), (members[(r + 1) % n],)   # peers are logged global
    rep = sum(1 for n, t in plan["replicated"].items()
              if t.is_floating_point() and n not in serial_trace(check, members)["frozen"])
    for s, _ in step_phases(check):
        fwd, bwd = ("forward", "backward") if s == 1 else (f"step{s} forward",
                                                           f"step{s} backward")
        mine += [
            CommRule(fwd, "collective", 0, "rule 'Rotation only': forward may not use any "
                     "collective: the weights travel by rotation only (rotate_async, "
                     "point-to-point)"),
            CommRule(fwd, RECV, Bound(lay, (n - 1) * ten), FWD_HINT,
                     nbytes=Bound(total - own, (n - 1) * plan["max_sum"]),
                     peers=prev),
            CommRule(fwd, SEND, Bound(lay, (n - 1) * ten), FWD_HINT,
                     peers=nxt),
            CommRule(bwd, "collective", Bound(min(rep, 1), rep), "backward's only collective: "
                     "the all_reduce of the replicated parameters' gradients (one each), on "
                     "`group`, by every rank whatever its gradients", members=tuple(members)),
            CommRule(bwd, RECV, Bound(lay, (2 * n - 1) * ten), BWD_HINT,
                     nbytes=Bound(total - own, (2 * n - 1) * plan["max_sum"]),
                     peers=nxt),
            CommRule(bwd, SEND, Bound(lay, (2 * n - 1) * ten), BWD_HINT,
                     peers=prev),
        ]
    for phase in gathers:
        mine += [CommRule(phase, "collective", 0, "rule 'Rotation only': full_state_dict "
                          "gathers by rotation: no all_gather / broadcast"),
                 CommRule(phase, RECV, Bound((n - 1) * lay, (n - 1) * ten),
                          "full_state_dict: N-1 rotations of each layer's shard",
                          nbytes=Bound(total - own, (n - 1) * plan["max_sum"]))]
    return mine


FWD_HINT = ("rule 'Communication': forward rotates each layer's shard CLOCKWISE: receive from rank r-1, "
            "send to rank r+1, every other shard once and no more (at most N-1 receives per "
            "layer, or one per shard tensor)")
BWD_HINT = ("rule 'Communication': backward moves each layer's weights COUNTERCLOCKWISE (every other "
            "shard once) and its gradient accumulators: at most 2N-1 receives per layer (N-1 "
            "weight shards, N accumulators; fewer is fine), all from rank r+1")
