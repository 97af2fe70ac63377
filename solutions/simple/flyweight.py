"""The design the stub describes, as a student writes it: RTP with the flyweight pattern.

solutions/flyweight.py is the faster reference (no recomputed Linear / Embedding, no
transfer waited right after it starts, N-1 accumulator moves); this one recomputes every
shard's part in backward and waits for each layer's last accumulator before moving on.
It must pass every check too (tests/correct/flyweight/simple_recompute.py), and the
realistic bugs of tests/wrong/flyweight/ that live in this design are edits of it.

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


def _additive(mask, dtype):
    """A boolean mask (True = may not attend) as 0 / -inf; a float mask as it is."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
    return mask.to(dtype)


def _kind(module):
    for cls, kind in ((nn.MultiheadAttention, _MultiheadAttention), (nn.Linear, _Linear),
                      (nn.Conv2d, _Conv2d), (nn.Embedding, _Embedding)):
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
        if self.kind is None:
            raise TypeError(f"FlyweightWrapper: cannot shard {type(module).__name__}")
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.sizes = _split_sizes(self.kind.units(module), self.world)
        self.starts = [sum(self.sizes[:s]) for s in range(self.world)]
        self.full_shapes = {k: tuple(p.shape) for k, p in module.named_parameters()}
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
            grads = torch.autograd.grad(y, wanted, grad_output, allow_unused=True)
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
        return _RotatedShards.apply(self, None, 1, args[0], *shard)

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


# --------------------------------------------------------------------- the model wrapper
class RotatedTensorParallel(nn.Module):
    """Drop-in for DistributedDataParallel: wraps every Linear, Conv2d, Embedding and
    MultiheadAttention of `model` (in place) in a FlyweightWrapper; other parameters
    stay replicated (from rank 0) and get their gradients averaged over ranks."""

    def __init__(self, model, group=None):
        super().__init__()
        self.group = group
        self.module = (FlyweightWrapper(model, group) if _kind(model)
                       else _wrap_children(model, group))
        sharded = {id(p) for w in self._wrappers().values() for p in w.parameters()}
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
            setattr(model, name, FlyweightWrapper(child, group))
        else:
            _wrap_children(child, group)
    return model
