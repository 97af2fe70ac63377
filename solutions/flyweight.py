"""Reference: Rotated Tensor Parallelism (RTP) with the flyweight memory pattern, in two designs.

Up to the line `# ===== THE FASTER DESIGN`, the design the stub describes, as a student writes
it: every shard's part recomputed in backward, each layer's last accumulator waited before
the backward moves on. That part alone is a complete exercise module (tests/helpers/wrongs.py's
`simple_design()`): it must pass every check too (tests/correct/flyweight/simple_recompute.py),
and the realistic bugs of tests/wrong/flyweight/ that live in this design are edits of it.
After that line, the faster design this module exports, built on it (see its comment).

Each wrapped layer's weights are cut into N shards (one per rank of `group`);
a rank stores only shard r. Every rank feeds its OWN batch, like DDP.

Forward on rank r, step i = 0..N-1: hold shard s = (r - i) % N, start rotating it
clockwise (it goes to r+1, shard s-1 comes from r-1), compute the part of the
output that shard s produces, then wait. Parts are concatenated (output features
split) or summed (attention heads). N-1 rotations; received shards are dropped
as soon as they are used, so a rank holds its own shard plus, at most, the one
in hand and the one arriving.

Backward on rank r, step k = 0..N-1: hold shard s = (r + k) % N (weights rotate
counterclockwise), recompute shard s's part of the output from the saved input,
get d input and this batch's d shard; add d shard to the gradient accumulator of
shard s, which rotates counterclockwise too and comes back to its owner after N
moves (the weights need N-1). Owner's grad = accumulator / N: the DDP mean.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import rtp_course.models.moe as serial
from . import rotation


def _rank0(group):
    """Global rank of the group's rank 0: the source of the initial weights."""
    return 0 if group is None else dist.get_global_rank(group, 0)


def _split_sizes(units, world):
    """Units (rows, channels, columns, heads) per shard: torch.tensor_split's rule."""
    return [units // world + (1 if s < units % world else 0) for s in range(world)]


# --------------------------------------------------------------------- layer kinds
# A kind says which slices of each parameter belong to the shard holding units
# [a, b), and computes that shard's part of the output from its tensors `p`.
class _Linear:
    cat_dim = -1  # output features

    def units(self, m):
        return m.out_features

    def ranges(self, m, index, a, b):
        out = {"weight": (0, [(a, b)])}
        if m.bias is not None:
            out["bias"] = (0, [(a, b)])
        return out

    def partial(self, m, inputs, p, index, extra):
        return F.linear(inputs[0], p["weight"], p.get("bias"))


class _Conv2d(_Linear):
    cat_dim = -3  # channels of [B, C, H, W] or [C, H, W]

    def units(self, m):
        if m.groups != 1:
            raise ValueError("RTP: Conv2d with groups > 1 is not supported")
        return m.out_channels

    def partial(self, m, inputs, p, index, extra):
        return m._conv_forward(inputs[0], p["weight"], p.get("bias"))  # handles padding_mode


class _Embedding:
    cat_dim = -1  # embedding columns

    def units(self, m):
        if m.max_norm is not None or m.sparse:
            raise ValueError("RTP: Embedding with max_norm or sparse gradients is not supported")
        return m.embedding_dim

    def ranges(self, m, index, a, b):
        return {"weight": (1, [(a, b)])}

    def partial(self, m, inputs, p, index, extra):
        return F.embedding(inputs[0], p["weight"], m.padding_idx, None, 2.0,
                           m.scale_grad_by_freq, False)


class _MultiheadAttention:
    """Heads [a, b): their q, k and v rows of in_proj, their columns of out_proj.weight.
    The partial outputs are summed; out_proj.bias belongs to shard 0 alone (added once)."""
    cat_dim = None

    def units(self, m):
        if not m._qkv_same_embed_dim or m.bias_k is not None:
            raise ValueError("RTP: MultiheadAttention needs kdim == vdim == embed_dim "
                             "and add_bias_kv=False")
        return m.num_heads

    def ranges(self, m, index, a, b):
        e, d = m.embed_dim, m.head_dim
        rows = [(j * e + a * d, j * e + b * d) for j in range(3)]  # q, k, v blocks
        out = {"in_proj_weight": (0, rows)}
        if m.in_proj_bias is not None:
            out["in_proj_bias"] = (0, rows)
        out["out_proj.weight"] = (1, [(a * d, b * d)])
        if m.out_proj.bias is not None:
            out["out_proj.bias"] = (0, [(0, e)] if index == 0 else [])
        return out

    def partial(self, m, inputs, p, index, extra):
        query, key, value = inputs                         # batch-first [B, L, E], [B, S, E]
        w_q, w_k, w_v = p["in_proj_weight"].chunk(3)
        b_q, b_k, b_v = p["in_proj_bias"].chunk(3) if "in_proj_bias" in p else (None,) * 3
        d = m.head_dim
        heads = w_q.shape[0] // d

        def split_heads(t):                                # [B, T, heads*d] -> [B, heads, T, d]
            return t.unflatten(-1, (heads, d)).transpose(1, 2)

        q = split_heads(F.linear(query, w_q, b_q))
        k = split_heads(F.linear(key, w_k, b_k))
        v = split_heads(F.linear(value, w_v, b_v))
        scores = q @ k.transpose(-2, -1) / d ** 0.5        # [B, heads, L, S]
        mask = extra["mask"]
        if mask is not None:
            if mask.shape[1] == m.num_heads:               # per-head mask: keep our heads
                start = extra["head_start"][index]
                mask = mask[:, start:start + heads]
            scores = scores + mask
        context = (scores.softmax(-1) @ v).transpose(1, 2).flatten(-2)   # [B, L, heads*d]
        out = F.linear(context, p["out_proj.weight"])
        bias = p.get("out_proj.bias")
        return out if bias is None or bias.numel() == 0 else out + bias


class _MoE:
    """Experts [a, b), every parameter of each whole; the other experts' parameters are empty in
    the shard. The router is not sharded (`replicated`): every rank routes its own tokens with
    it before the loop. The experts' parts are summed: a token's output adds its experts'."""
    cat_dim = None
    replicated = ("router.",)   # keys left whole, averaged like any replicated parameter

    def units(self, m):
        return m.num_experts

    def ranges(self, m, index, a, b):
        out = {}
        for e, expert in enumerate(m.experts):
            for name in ("fc1", "fc2"):
                layer = getattr(expert, name)
                rows = [(0, layer.out_features)] if a <= e < b else []
                out[f"experts.{e}.{name}.weight"] = (0, rows)
                if layer.bias is not None:
                    out[f"experts.{e}.{name}.bias"] = (0, rows)
        return out

    def partial(self, m, inputs, p, index, extra):
        """sum over experts e of shard `index`, over their kept choices (t, j):
        gate[t, j] * expert_e(x[t]), added at row t (the serial layer's loop)."""
        x, gate = inputs                                   # tokens [T, dim], gates [T, k]
        y = x.new_zeros(x.shape)
        for e in extra["experts"][index]:
            t, j = torch.nonzero((extra["expert"] == e) & extra["keep"], as_tuple=True)
            w = f"experts.{e}."
            h = torch.tanh(F.linear(x[t], p[w + "fc1.weight"], p.get(w + "fc1.bias")))
            out = F.linear(h, p[w + "fc2.weight"], p.get(w + "fc2.bias"))
            y = y.index_add(0, t, gate[t, j].unsqueeze(1) * out)
        return y


def _additive(mask, dtype):
    """A boolean mask (True = may not attend) as 0 / -inf; a float mask as it is."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
    return mask.to(dtype)


def _kind(module):
    for cls, kind in ((serial.MoE, _MoE), (nn.MultiheadAttention, _MultiheadAttention),
                      (nn.Linear, _Linear), (nn.Conv2d, _Conv2d), (nn.Embedding, _Embedding)):
        if isinstance(module, cls):
            return kind()
    return None


# --------------------------------------------------------------------- the wrapper
class _RotatedShards(torch.autograd.Function):
    """Differentiable in the layer inputs and this rank's shard; saves only those."""

    @staticmethod
    def forward(ctx, wrapper, extra, n_inputs, *tensors):
        ctx.wrapper, ctx.extra, ctx.n_inputs = wrapper, extra, n_inputs
        ctx.save_for_backward(*tensors)
        return wrapper._rotating_forward(tensors[:n_inputs], extra)

    @staticmethod
    def backward(ctx, grad_output):
        saved, n = ctx.saved_tensors, ctx.n_inputs
        needs = ctx.needs_input_grad[3:3 + n]
        grad_inputs, grad_shard = ctx.wrapper._rotating_backward(saved[:n], needs, ctx.extra,
                                                                 grad_output)
        return (None, None, None, *grad_inputs, *grad_shard)


class FlyweightWrapper(nn.Module):
    """Keeps shard r of `module`'s weights (from rank 0's values) and computes the full
    layer by rotating the shards; `module` keeps its class and hyper-parameters."""

    def __init__(self, module, group=None):
        super().__init__()
        self.kind = _kind(module)
        if self.kind is None or isinstance(self.kind, _MoE) != isinstance(self, FlyweightMoE):
            raise TypeError(f"{type(self).__name__}: cannot shard {type(module).__name__}")
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.sizes = _split_sizes(self.kind.units(module), self.world)
        self.starts = [sum(self.sizes[:s]) for s in range(self.world)]
        whole = getattr(self.kind, "replicated", ())     # an MoE's router: not sharded
        self.full_shapes = {k: tuple(p.shape) for k, p in module.named_parameters()
                            if not k.startswith(whole)}
        self.module = module
        self.keys = list(self.shard_ranges(0))  # the order of the pieces in a flat shard
        if sorted(self.keys) != sorted(self.full_shapes):
            raise ValueError(f"FlyweightWrapper: unexpected parameters {sorted(self.full_shapes)}")
        src = _rank0(group)
        with torch.no_grad():
            for key in self.keys:
                full = module.get_parameter(key)
                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
                shard = self._take(full, *self.shard_ranges(self.rank)[key]).clone()
                *path, leaf = key.split(".")
                setattr(module.get_submodule(".".join(path)), leaf,
                        nn.Parameter(shard, requires_grad=full.requires_grad))
            for key, p in module.named_parameters():     # kept whole, from rank 0 too
                if key.startswith(whole):
                    dist.broadcast(p, src=src, group=group)

    def shard_ranges(self, index):
        """{param key: (dim, [(start, stop), ...])}: the slices of the full parameter
        that make shard `index` (concatenated along dim, in this order)."""
        a = self.starts[index]
        return self.kind.ranges(self.module, index, a, a + self.sizes[index])

    @staticmethod
    def _take(full, dim, spans):
        return torch.cat([full.narrow(dim, a, b - a) for a, b in spans], dim) if spans \
            else full.narrow(dim, 0, 0)

    def _shapes(self, index):
        shapes = {}  # in the order of self.keys
        for key, (dim, spans) in self.shard_ranges(index).items():
            shape = list(self.full_shapes[key])
            shape[dim] = sum(b - a for a, b in spans)
            shapes[key] = shape
        return shapes

    def _numel(self, index):
        return sum(torch.Size(s).numel() for s in self._shapes(index).values())

    # A shard travels as ONE flat buffer: one message per step, shapes known from its index.
    def _shard_parameters(self):
        return [self.module.get_parameter(k) for k in self.keys]

    def _own_flat(self):
        return torch.cat([p.detach().reshape(-1) for p in self._shard_parameters()])

    def _unpack(self, flat, index):
        shapes = self._shapes(index)
        pieces = flat.split([torch.Size(s).numel() for s in shapes.values()])
        return {k: t.view(s) for (k, s), t in zip(shapes.items(), pieces)}

    def _rotating_forward(self, inputs, extra):
        world, rank, cat = self.world, self.rank, self.kind.cat_dim is not None
        shard, parts, total = self._own_flat(), [None] * world, None
        for i in range(world):
            s = (rank - i) % world
            incoming = None
            if i < world - 1:  # start the transfer BEFORE computing: overlap
                incoming = rotation.rotate_async(shard, "clockwise", self.group,
                                                 recv_shape=(self._numel((s - 1) % world),))
            y = self.kind.partial(self.module, inputs, self._unpack(shard, s), s, extra)
            if cat:
                parts[s] = y
            else:
                total = y if total is None else total + y
            shard = incoming.wait() if incoming is not None else None  # drop the used shard
        return torch.cat(parts, self.kind.cat_dim) if cat else total

    def _shard_grads(self, inputs, needs, shard, index, extra, grad_output):
        """d input and d shard (flat) of shard `index`'s part of the output, for this batch."""
        with torch.enable_grad():
            xs = [x.detach().requires_grad_(need) for x, need in zip(inputs, needs)]
            flat = shard.detach().requires_grad_()
            y = self.kind.partial(self.module, xs, self._unpack(flat, index), index, extra)
            if self.kind.cat_dim is not None:
                grad_output = grad_output.narrow(self.kind.cat_dim, self.starts[index],
                                                 self.sizes[index])
            wanted = [x for x in xs if x.requires_grad] + [flat]
            grads = torch.autograd.grad(y, wanted, grad_output, allow_unused=True) \
                if y.requires_grad else [None] * len(wanted)   # a shard without experts
        grads = iter([torch.zeros_like(t) if g is None else g for t, g in zip(wanted, grads)])
        return [next(grads) if x.requires_grad else None for x in xs], next(grads)

    def _rotating_backward(self, inputs, needs, extra, grad_output):
        world, rank = self.world, self.rank
        grad_inputs = [None] * len(inputs)
        shard, sending = self._own_flat(), None
        for k in range(world):
            s = (rank + k) % world
            incoming = None
            if k < world - 1:
                incoming = rotation.rotate_async(shard, "counterclockwise", self.group,
                                                 recv_shape=(self._numel((s + 1) % world),))
            d_inputs, d_shard = self._shard_grads(inputs, needs, shard, s, extra, grad_output)
            grad_inputs = [d if g is None else g + d for g, d in zip(grad_inputs, d_inputs)]
            # accumulator of shard s: what ranks r+1..r+k added, plus this batch's part
            acc = d_shard if sending is None else sending.wait() + d_shard
            sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                            recv_shape=(self._numel((s + 1) % world),))
            del acc
            shard = incoming.wait() if incoming is not None else None
        own = sending.wait() / world  # every rank's contribution to shard r: DDP's mean
        return grad_inputs, list(self._unpack(own, rank).values())

    def forward(self, *args, **kwargs):
        shard = self._shard_parameters()
        if isinstance(self.kind, _MultiheadAttention):
            return self._attention(*args, shard=shard, **kwargs)
        if isinstance(self.kind, _MoE):
            return self._experts(*args, shard=shard)
        return _RotatedShards.apply(self, None, 1, args[0], *shard)

    def _experts(self, x, shard=()):
        """MoE's call: (y, aux loss). The replicated router routes this rank's tokens; the
        routing (which expert, kept or dropped) is data for the loop, the gates an input."""
        m, shape = self.module, x.shape
        tokens = x.reshape(-1, shape[-1])
        probs, r = m.routing(tokens)
        extra = {"expert": r.expert, "keep": r.keep,
                 "experts": [range(a, a + z) for a, z in zip(self.starts, self.sizes)]}
        y = _RotatedShards.apply(self, extra, 2, tokens, r.gate, *shard)
        return y.reshape(shape), serial.load_balancing_loss(probs, r.expert)

    def _attention(self, query, key, value, key_padding_mask=None, need_weights=True,
                   attn_mask=None, average_attn_weights=True, is_causal=False, shard=()):
        """nn.MultiheadAttention's call; attention weights are not returned (None)."""
        m = self.module
        if m.training and m.dropout > 0:
            raise NotImplementedError("RTP recomputes attention in backward: use dropout=0")
        if m.batch_first:
            q, k, v = query, key, value
        else:
            q, k, v = (t.transpose(0, 1) for t in (query, key, value))
        if q.dim() != 3:
            raise ValueError("RTP: MultiheadAttention needs batched 3-D inputs")
        batch, length, source = q.shape[0], q.shape[1], k.shape[1]
        if attn_mask is None and is_causal:
            attn_mask = torch.ones(length, source, dtype=torch.bool, device=q.device).triu(1)
        mask = None  # additive, broadcastable to the scores [B, heads, L, S]
        if attn_mask is not None:
            mask = _additive(attn_mask, q.dtype)
            mask = mask.view(batch, m.num_heads, length, source) if mask.dim() == 3 \
                else mask.view(1, 1, length, source)
        if key_padding_mask is not None:
            padding = _additive(key_padding_mask, q.dtype).view(batch, 1, 1, source)
            mask = padding if mask is None else mask + padding
        extra = {"mask": mask, "head_start": self.starts}
        out = _RotatedShards.apply(self, extra, 3, q, k, v, *shard)
        return (out if m.batch_first else out.transpose(0, 1)), None

    def full_state_dict(self):
        """The serial module's parameters {key: full tensor}, on every rank: N-1 rotations."""
        shard, s = self._own_flat(), self.rank
        full = {key: shard.new_empty(shape) for key, shape in self.full_shapes.items()}
        whole = getattr(self.kind, "replicated", ())
        full.update({k: p.detach().clone() for k, p in self.module.named_parameters()
                     if k.startswith(whole)})
        for k in range(self.world):
            if k:  # clockwise: after k rotations we hold shard (r - k) % N
                s = (s - 1) % self.world
                shard = rotation.rotate(shard, "clockwise", self.group,
                                        recv_shape=(self._numel(s),))
            for key, piece in self._unpack(shard, s).items():   # put its slices in place
                dim, spans = self.shard_ranges(s)[key]
                for (a, b), t in zip(spans, piece.split([b - a for a, b in spans], dim)):
                    full[key].narrow(dim, a, b - a).copy_(t)
        return full

    def extra_repr(self):
        return (f"shard {self.rank} of {self.world}: units "
                f"[{self.starts[self.rank]}, {self.starts[self.rank] + self.sizes[self.rank]})")


class FlyweightMoE(FlyweightWrapper):
    """An MoE layer (rtp_course.models.moe): its experts are the units, cut in shards that
    rotate like any layer's; its router stays whole (replicated). Called as the MoE:
    (y, aux loss)."""


# --------------------------------------------------------------------- the model wrapper
class RotatedTensorParallel(nn.Module):
    """Drop-in for DistributedDataParallel: wraps every Linear, Conv2d, Embedding and
    MultiheadAttention of `model` (in place) in a FlyweightWrapper; other parameters
    stay replicated (from rank 0) and get their gradients averaged over ranks."""

    def __init__(self, model, group=None):
        super().__init__()
        self.group = group
        self.module = _wrap(model, group) if _kind(model) else _wrap_children(model, group)
        sharded = {id(p) for w in self._wrappers().values() for p in w._shard_parameters()}
        src = _rank0(group)
        with torch.no_grad():
            for t in [p for p in self.module.parameters() if id(p) not in sharded] + \
                     [b for b in self.module.buffers()]:
                dist.broadcast(t, src=src, group=group)
        for p in self.module.parameters():
            if id(p) not in sharded and p.requires_grad:
                p.register_post_accumulate_grad_hook(self._average_gradient)

    def _average_gradient(self, p):
        # Replicated (small) parameters: plain DDP. Hooks fire in the same order on all ranks.
        world = dist.get_world_size(self.group)
        if world > 1:
            dist.all_reduce(p.grad, group=self.group)
            p.grad /= world

    def _wrappers(self):
        return {name: m for name, m in self.module.named_modules()
                if isinstance(m, FlyweightWrapper)}

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def full_state_dict(self):
        """The serial model's state dict (original keys, full tensors) on every rank."""
        wrappers, full = self._wrappers(), {}
        prefixes = {name: f"{name}.module." if name else "module." for name in wrappers}
        for key, value in self.module.state_dict().items():
            owner = next((n for n, prefix in prefixes.items() if key.startswith(prefix)), None)
            if owner is None:
                full[key] = value.clone()
            elif wrappers[owner] is not None:  # first key of a wrapper: gather all of it
                for k, t in wrappers[owner].full_state_dict().items():
                    full[f"{owner}.{k}" if owner else k] = t
                wrappers[owner] = None
        return full

    def shard_layout(self):
        """{wrapped module name: {"kind", "index", "num_shards", "units": (start, stop),
        "params": {key: {"name": name in self.named_parameters(), "dim", "ranges"}}}}."""
        names = {id(p): n for n, p in self.named_parameters()}
        layout = {}
        for name, w in self._wrappers().items():
            a = w.starts[w.rank]
            params = {key: {"name": names[id(w.module.get_parameter(key))], "dim": dim,
                            "ranges": list(spans)}
                      for key, (dim, spans) in w.shard_ranges(w.rank).items()}
            layout[name] = {"kind": type(w.module).__name__, "index": w.rank,
                            "num_shards": w.world, "units": (a, a + w.sizes[w.rank]),
                            "params": params}
        return layout


def _wrap_children(model, group):
    for name, child in model.named_children():
        if _kind(child):
            setattr(model, name, _wrap(child, group))
        else:
            _wrap_children(child, group)
    return model


def _wrap(layer, group):
    return (FlyweightMoE if isinstance(layer, serial.MoE) else FlyweightWrapper)(layer, group)


# ===== THE FASTER DESIGN, built on the one above =====================================================
# Its definitions replace the ones above that they improve; the functions above look names up
# when they are called (_kind, RotatedTensorParallel's wrapping), so they use these.
# What makes it fast (the stub's simpler design recomputes every shard's forward
# and waits for every transfer; both are correct; notebook 06 measures the two):
# * Linear and Embedding get d input and d shard from the saved input and the
#   shard in hand (d x = g W_s, d W_s = g^T x): no forward is recomputed. Conv2d
#   and attention recompute their part under autograd.
# * No transfer is waited right after it starts: an accumulator is waited only
#   when the next step adds to it, and the last one, coming home, after the first
#   step of the next layer's backward (or at the end of the backward: an autograd
#   engine callback, as DDP does). Replicated parameters' gradients are
#   all-reduced in one bucket at that point: one call, not one per LayerNorm.
# * Prefetch: a layer's first transfer starts during the previous layer's last
#   shard, when nothing else is arriving (the layer order is learned in the
#   first forward), so it travels during a whole step of compute. Still at most
#   two received shards at once.
# * No copies: the shard's parameters are views of one flat tensor, sent as it
#   is; a Linear writes each shard's part straight into its columns of the
#   output; d input is summed in place; a new accumulator is written, not zeroed
#   and then added to.
# * Attention through scaled_dot_product_attention; shard shapes computed once.
from torch.autograd import Variable  # noqa: E402

_SimpleLinear, _SimpleConv2d, _SimpleEmbedding, _SimpleAttention, _SimpleMoE = (
    _Linear, _Conv2d, _Embedding, _MultiheadAttention, _MoE)
_SimpleWrapper, _SimpleRTP, _SimpleShards = FlyweightWrapper, RotatedTensorParallel, _RotatedShards


# --------------------------------------------------------------------- layer kinds
# The stub's design says which slices of each parameter a shard holds and computes its part
# of the output; a kind here also computes that part's gradients.
class _Kind:
    def grads(self, m, inputs, needs, p, index, extra, g, accumulator, d_inputs):
        """Add shard `index`'s part (g: d its output) to the gradients: its d inputs to
        `d_inputs` (a list, None where nothing was added yet; returned), its d shard to
        `accumulator()` -> ({key: view}, fresh) (called once, late: it may wait for a
        transfer; a fresh one holds garbage: write, do not add).
        Generic: recompute the part under autograd."""
        with torch.enable_grad():
            xs = [x.detach().requires_grad_(need) for x, need in zip(inputs, needs)]
            ps = {k: t.detach().requires_grad_() for k, t in p.items()}
            y = self.partial(m, xs, ps, index, extra)
            wanted = [x for x in xs if x.requires_grad] + list(ps.values())
            grads = torch.autograd.grad(y, wanted, g, allow_unused=True) \
                if y.requires_grad else [None] * len(wanted)   # a shard without experts
        n = len(wanted) - len(ps)
        acc, fresh = accumulator()
        for key, d in zip(ps, grads[n:]):
            _add(acc[key], fresh, d)
        return _sum_into(d_inputs, [grads[:n][sum(needs[:i])] if need else None
                                    for i, need in enumerate(needs)])


def _add(acc, fresh, d):
    """acc += d (d None: nothing); a fresh accumulator holds garbage."""
    if fresh:
        acc.zero_() if d is None else acc.copy_(d)
    elif d is not None:
        acc.add_(d)


def _sum_into(totals, parts):
    """totals[i] += parts[i] in place (totals are this backward's own tensors), None = 0."""
    return [d if t is None else t if d is None else t.add_(d) for t, d in zip(totals, parts)]


class _Linear(_Kind, _SimpleLinear):
    writes_into = True  # partial(..., out=its columns of the output)

    def partial(self, m, inputs, p, index, extra, out=None):
        if out is None:
            return F.linear(inputs[0], p["weight"], p.get("bias"))
        # Straight into this shard's columns of the output ([tokens, out] with a row stride
        # the BLAS accepts): no concatenation afterwards.
        x2, out2, b = _rows(inputs[0]), _rows_view(out), p.get("bias")
        if b is None:
            torch.mm(x2, p["weight"].t(), out=out2)
        else:
            torch.addmm(b, x2, p["weight"].t(), out=out2)
        return out

    def grads(self, m, inputs, needs, p, index, extra, g, accumulator, d_inputs):
        """y = x W^T + b: d x = g W, d W = g^T x, d b = sum of g; from the saved x."""
        d_x = d_inputs[0]
        if needs[0]:
            if d_x is None:
                d_x = g.matmul(p["weight"])           # a new, contiguous tensor
            else:
                _rows_view(d_x).addmm_(_rows(g), p["weight"])
        _add_linear_grads(*accumulator(), "weight", "bias", inputs[0], g)
        return [d_x]


def _rows(t):
    """[..., features] as [rows, features] (t 1-D: one row), to read."""
    return t.flatten(0, -2) if t.dim() > 1 else t[None]


def _rows_view(t):
    """The same, to write into: always a view (view() raises where flatten would copy)."""
    return t.view(t.shape[:-1].numel(), t.shape[-1]) if t.dim() > 1 else t[None]  # -1: not for 0


def _add_linear_grads(acc, fresh, weight, bias, x, g):
    """acc[weight] += g^T x, acc[bias] += sum of g, over every leading dimension."""
    x2, g2 = _rows(x), _rows(g)            # [tokens, in], [tokens, out of this shard]
    acc[weight].addmm_(g2.t(), x2, beta=0 if fresh else 1)   # beta=0 ignores the garbage
    if acc.get(bias) is not None and acc[bias].numel():
        if fresh:
            torch.sum(g2, 0, out=acc[bias])
        else:
            acc[bias].add_(g2.sum(0))


class _Conv2d(_SimpleConv2d, _Kind):
    """A convolution's gradients are convolutions of their own: recomputed (_Kind.grads)."""


class _Embedding(_Kind, _SimpleEmbedding):
    def grads(self, m, inputs, needs, p, index, extra, g, accumulator, d_inputs):
        """Row i of d W is the sum of g over the positions holding token i (none for padding)."""
        if m.scale_grad_by_freq:
            return super().grads(m, inputs, needs, p, index, extra, g, accumulator, d_inputs)
        ids = inputs[0].reshape(-1)
        g2 = g.reshape(ids.shape[0], g.shape[-1])
        if m.padding_idx is not None:
            g2 = g2.masked_fill((ids == m.padding_idx).unsqueeze(1), 0)
        acc, fresh = accumulator()
        if fresh:
            acc["weight"].zero_()
        acc["weight"].index_add_(0, ids, g2)
        return d_inputs


class _MultiheadAttention(_Kind, _SimpleAttention):
    """Through scaled_dot_product_attention; out_proj's gradients are a Linear's."""

    def partial(self, m, inputs, p, index, extra):
        out = F.linear(self._context(m, inputs, p, index, extra), p["out_proj.weight"])
        bias = p.get("out_proj.bias")
        return out if bias is None or bias.numel() == 0 else out + bias

    def grads(self, m, inputs, needs, p, index, extra, g, accumulator, d_inputs):
        """Recompute the heads' context under autograd; out_proj's part is a Linear's."""
        inner = {k: t for k, t in p.items() if k.startswith("in_proj")}
        with torch.enable_grad():
            xs = [x.detach().requires_grad_(need) for x, need in zip(inputs, needs)]
            ps = {k: t.detach().requires_grad_() for k, t in inner.items()}
            context = self._context(m, xs, ps, index, extra)
            wanted = [x for x in xs if x.requires_grad] + list(ps.values())
            grads = torch.autograd.grad(context, wanted, g.matmul(p["out_proj.weight"]))
        n = len(wanted) - len(ps)
        acc, fresh = accumulator()
        for key, d in zip(ps, grads[n:]):
            _add(acc[key], fresh, d)
        _add_linear_grads(acc, fresh, "out_proj.weight", "out_proj.bias", context.detach(), g)
        return _sum_into(d_inputs, [grads[:n][sum(needs[:i])] if need else None
                                    for i, need in enumerate(needs)])

    def _context(self, m, inputs, p, index, extra):
        """Attention of this shard's heads, before out_proj: [B, L, heads*d]."""
        d = m.head_dim
        heads = p["in_proj_weight"].shape[0] // (3 * d)
        if len(inputs) == 1:                               # self-attention: one product for q, k, v
            qkv = F.linear(inputs[0], p["in_proj_weight"], p.get("in_proj_bias")).chunk(3, -1)
        else:                                              # batch-first [B, L, E], [B, S, E]
            biases = p["in_proj_bias"].chunk(3) if "in_proj_bias" in p else (None,) * 3
            qkv = [F.linear(x, w, b) for x, w, b in
                   zip(inputs, p["in_proj_weight"].chunk(3), biases)]
        # [B, T, heads*d] -> [B, heads, T, d]
        q, k, v = (t.unflatten(-1, (heads, d)).transpose(1, 2) for t in qkv)
        mask = extra["mask"]                               # additive, [B or 1, heads or 1, L, S]
        if mask is not None and mask.shape[1] == m.num_heads:   # per-head mask: keep our heads
            start = extra["head_start"][index]
            mask = mask[:, start:start + heads]
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return context.transpose(1, 2).flatten(-2)         # [B, L, heads*d]


class _MoE(_Kind, _SimpleMoE):
    """The experts' part recomputed under autograd (_Kind.grads): d gates and d tokens too."""


# --------------------------------------------------------------------- the wrapper
class _RotatedShards(torch.autograd.Function):
    """Differentiable in the layer inputs and this rank's shard; saves only those. The shard's
    gradient is not returned here: it comes home after the backward has moved on (see
    FlyweightWrapper._rotating_backward)."""

    @staticmethod
    def forward(ctx, wrapper, extra, n_inputs, *tensors):
        # self-attention (query, key and value one tensor): one input, one product for q, k, v
        ctx.same = n_inputs == 3 and tensors[0] is tensors[1] is tensors[2]
        kept = tensors[2:] if ctx.same else tensors
        ctx.wrapper, ctx.extra, ctx.n_inputs = wrapper, extra, 1 if ctx.same else n_inputs
        ctx.save_for_backward(*kept)
        return wrapper._rotating_forward(kept[:ctx.n_inputs], extra)

    @staticmethod
    def backward(ctx, grad_output):
        saved, n = ctx.saved_tensors, ctx.n_inputs
        needs = ctx.needs_input_grad[5:6] if ctx.same else ctx.needs_input_grad[3:3 + n]
        grad_inputs = ctx.wrapper._rotating_backward(saved[:n], needs, ctx.extra, grad_output)
        if ctx.same:        # the one input's gradient, given once (autograd sums the three)
            grad_inputs = [None, None, *grad_inputs]
        return (None, None, None, *grad_inputs, *[None] * (len(saved) - n))


def _at_end_of_backward(fn):
    """Run fn when the autograd engine has finished this backward pass (DDP's hook point)."""
    Variable._execution_engine.queue_callback(fn)


# Last accumulators still travelling home: (wrapper, handle, own part). Each is waited after
# the first step of the next layer's backward, or at the end of the backward.
_coming_home = []


def _bring_home():
    while _coming_home:
        wrapper, *arriving = _coming_home.pop(0)
        wrapper._receive_grad(*arriving)


# Layers whose first transfer a previous layer started (FlyweightWrapper._prefetch_next).
_pending_prefetches = []


def _drop_prefetched():
    """End of a pass: wait for (and drop) the prefetched transfers no layer used."""
    while _pending_prefetches:
        wrapper = _pending_prefetches.pop()
        if wrapper._prefetched is not None:
            wrapper._prefetched[1].wait()
            wrapper._prefetched = None


def _end_of_backward():
    _bring_home()
    _drop_prefetched()


class FlyweightWrapper(_SimpleWrapper):
    """The stub's design's wrapper, with one flat shard, no transfer waited right after it
    starts, and each layer's first transfer started during the previous layer's last step."""

    def __init__(self, module, group=None):
        super().__init__(module, group)
        # Set by RotatedTensorParallel: {"forward": wrapper, "backward": wrapper}, the layer
        # that runs next (a dict: an attribute holding a module would register it as a child).
        self.next_layer = {}
        self._prefetched = None  # (direction, RotationHandle) started by the previous layer
        self.shapes = [self._shapes(i) for i in range(self.world)]   # shard index -> {key: shape}
        self.piece_numels = [[torch.Size(sh).numel() for sh in shapes.values()]
                             for shapes in self.shapes]
        self.numels = [sum(n) for n in self.piece_numels]
        self._flat = None
        self._own_flat()   # the shard's parameters become views of ONE flat tensor: sent as it is

    def _own_flat(self):
        """This rank's shard as one flat tensor: the parameters' own storage, unless something
        (module.to(), load_state_dict(assign=True)) replaced them; then they are packed again."""
        params, flat = self._shard_parameters(), self._flat
        at, size = (flat.data_ptr(), flat.element_size()) if flat is not None else (None, 0)
        for p, n in zip(params, self.piece_numels[self.rank]):
            if p.data_ptr() != at or p.dtype != flat.dtype or p.device != flat.device:
                break
            at += n * size
        else:
            return flat.detach()
        with torch.no_grad():
            self._flat = torch.cat([p.detach().reshape(-1) for p in params])
            for p, view in zip(params, self._unpack(self._flat, self.rank).values()):
                p.data = view
        return self._flat.detach()

    def _unpack(self, flat, index):
        pieces = flat.split(self.piece_numels[index])
        return {k: t.view(s) for (k, s), t in zip(self.shapes[index].items(), pieces)}

    def _rotating_forward(self, inputs, extra):
        world, rank, cat = self.world, self.rank, self.kind.cat_dim is not None
        shard, parts, total, out = self._own_flat(), [None] * world, None, None
        if getattr(self.kind, "writes_into", False) and inputs[0].dim() > 1:
            out = inputs[0].new_empty(*inputs[0].shape[:-1], self.full_shapes["weight"][0])
        for i in range(world):
            s = (rank - i) % world
            incoming = None
            if i == 0:  # start the transfer BEFORE computing: overlap
                incoming = self._first_rotation("clockwise")
            elif i < world - 1:
                incoming = rotation.rotate_async(shard, "clockwise", self.group,
                                                 recv_shape=(self.numels[(s - 1) % world],))
            if i == world - 1:  # nothing arrives for us now: start the next layer's first
                self._prefetch_next("forward", "clockwise")
            y = self.kind.partial(self.module, inputs, self._unpack(shard, s), s, extra,
                                  **({} if out is None else
                                     {"out": out.narrow(-1, self.starts[s], self.sizes[s])}))
            if cat:
                parts[s] = y
            else:
                total = y if total is None else total + y
            shard = incoming.wait() if incoming is not None else None  # drop the used shard
        if out is not None:  # the parts are its columns
            return out
        return torch.cat(parts, self.kind.cat_dim) if cat else total

    def _rotating_backward(self, inputs, needs, extra, grad_output):
        world, rank, cat = self.world, self.rank, self.kind.cat_dim
        grad_inputs = [None] * len(inputs)
        shard, sending, own_part = self._own_flat(), None, None
        for k in range(world):
            s, nxt = (rank + k) % world, (rank + k + 1) % world
            incoming = None
            if k == 0:
                incoming = self._first_rotation("counterclockwise")
            elif k < world - 1:
                incoming = rotation.rotate_async(shard, "counterclockwise", self.group,
                                                 recv_shape=(self.numels[nxt],))
            if k == world - 1:
                self._prefetch_next("backward", "counterclockwise")
            g = grad_output if cat is None else \
                grad_output.narrow(cat, self.starts[s], self.sizes[s])
            # Our own shard's part waits here for the others' (it would go round the ring and
            # back); shard s's accumulator holds what ranks r+1..r+k-1 added, and is waited
            # for only when this step adds to it. A new one is not zeroed: the kind writes it.
            acc = []

            def accumulator(s=s, previous=sending if k >= 2 else None):
                acc.append(previous.wait() if previous is not None else
                           shard.new_empty(self.numels[s]))
                return self._unpack(acc[0], s), previous is None

            grad_inputs = self.kind.grads(self.module, inputs, needs, self._unpack(shard, s), s,
                                          extra, g, accumulator, grad_inputs)
            if k == 0:
                own_part = acc.pop()
            else:  # to rank r-1, which holds shard s next; the last one goes to its owner
                sending = rotation.rotate_async(acc.pop(), "counterclockwise", self.group,
                                                recv_shape=(self.numels[nxt],))
            shard = incoming.wait() if incoming is not None else None
            if k == 0:
                _bring_home()  # the previous layer's, which travelled during this step
        if not _coming_home:
            _at_end_of_backward(_end_of_backward)
        _coming_home.append((self, sending, own_part))
        return grad_inputs

    # Prefetch: a layer's first transfer (its own shard, one step round the ring) is started
    # by the layer before it, at that layer's last shard, when nothing else is arriving: it
    # then travels during a whole step of compute. The order is the one RotatedTensorParallel
    # saw in its first forward (backward: reversed). Every rank runs the same layers in the
    # same order, so the messages pair up even when the predicted layer does not run next:
    # its transfer waits, unused, until that layer runs or the pass ends (_drop_prefetched).
    def _start_first(self, direction):
        step = -1 if direction == "clockwise" else 1  # the rank we receive from
        return rotation.rotate_async(self._own_flat(), direction, self.group,
                                     recv_shape=(self.numels[(self.rank + step) % self.world],))

    def _first_rotation(self, direction):
        """This layer's first transfer: the prefetched one, or one started now."""
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            if prefetched[0] == direction:
                return prefetched[1]
            prefetched[1].wait()
        return self._start_first(direction) if self.world > 1 else None

    def _prefetch_next(self, phase, direction):
        nxt = self.next_layer.get(phase)
        if nxt is not None and nxt._prefetched is None and nxt.world > 1:
            nxt._prefetched = (direction, nxt._start_first(direction))
            _pending_prefetches.append(nxt)

    def _receive_grad(self, sending, own_part):
        """Our shard's accumulator, home after N-1 moves, plus our own part: every rank's
        contribution, so grad = sum / N (in our own tensor: the received one is dropped)."""
        total = own_part if sending is None else own_part.add_(sending.wait())
        total.div_(self.world)
        for p, g in zip(self._shard_parameters(), self._unpack(total, self.rank).values()):
            if p.requires_grad:
                p.grad = g if p.grad is None else p.grad.add_(g)


class FlyweightMoE(FlyweightWrapper):
    """The stub's design's MoE wrapper, on the faster wrapper."""


# --------------------------------------------------------------------- the model wrapper
class RotatedTensorParallel(_SimpleRTP):
    """The stub's design's model wrapper, with the replicated gradients all-reduced in one
    bucket, and the layer order learned in the first forward for the prefetches."""

    def __init__(self, model, group=None):
        self._reducing, self._order_known = [], False   # before the hooks can fire
        super().__init__(model, group)

    def _average_gradient(self, p):
        # Replicated (small) parameters: DDP's recipe with one bucket. Their gradients are
        # noted as they become ready and all-reduced together, once, when the backward ends:
        # one call instead of one per LayerNorm weight (each call costs far more than its
        # few bytes). Hooks fire in the same order on all ranks, so the buckets match.
        if dist.get_world_size(self.group) == 1:
            return
        if not self._reducing:
            _at_end_of_backward(self._finish_averaging)
        self._reducing.append(p)

    def _finish_averaging(self):
        grads = [p.grad for p in self._reducing]
        self._reducing.clear()
        bucket = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(bucket, group=self.group)
        bucket.div_(dist.get_world_size(self.group))
        for g, mean in zip(grads, bucket.split([g.numel() for g in grads])):
            g.copy_(mean.view_as(g))

    def forward(self, *args, **kwargs):
        if self._order_known:
            try:
                return self.module(*args, **kwargs)
            finally:
                _drop_prefetched()
        order = []  # the first forward: which layer runs after which (for the prefetches)
        hooks = [w.register_forward_pre_hook(lambda m, _: order.append(m))
                 for w in self._wrappers().values()]
        try:
            out = self.module(*args, **kwargs)
        finally:
            for h in hooks:
                h.remove()
        if len(set(map(id, order))) == len(order):  # a layer called twice: no prediction
            for a, b in zip(order, order[1:]):
                a.next_layer["forward"], b.next_layer["backward"] = b, a
        self._order_known = True
        return out
