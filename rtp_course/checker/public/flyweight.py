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


import torch
from torch import nn

from rtp_course.checker.common import manual_seed, owned_module, randint, randn
from rtp_course.checker.registry import Check, CommRule, Like
from rtp_course.models import MnistCNN, build_model
from rtp_course.models.moe import MoE
from rtp_course.checker.public.flyweight_harness import (HINTS, RTPCheck, _plain, _units)
from rtp_course.checker.public.flyweight_layout import initial_model


KEPT = "forward/output 0 after the later calls"    # an output buffer the module reuses shows


class FlyweightWrapperLinear(Check):
    """E5.1 alone: FlyweightWrapper around one nn.Linear(5, 10) (uneven shards at 3 and 4
    ranks), each rank its own batch: shard_ranges and the shard it keeps; a first pass calling
    it twice before one backward (a [3, 5] batch, then one unbatched [5] input); a second pass
    without zero_grad, where the last rank's loss is zero (it rotates its zero accumulator all
    the same), whose gradients add to the first's; the first output, unchanged by the later
    calls; the input gradients, the shard's gradient (the slice of the DDP-averaged one, summed
    over the passes), full_state_dict. Runs before the model checks, which wrap every layer."""
    exercise, name = "flyweight", "FlyweightWrapper"
    task = "E5.1"
    hints = dict(HINTS, **{
        "structure/shard_ranges": "shard_ranges(index) of a Linear: {'weight': (0, [(a, b)]), "
                                  "'bias': (0, [(a, b)])} with [a, b) shard index's units, cut "
                                  "like torch.tensor_split (the module docstring's table)",
        "init/own": "the wrapper keeps only its own shard, as the module's parameters: "
                    "weight[a:b] and bias[a:b] of rank 0's full weights (broadcast first)",
        "forward/output of the unbatched": "a Linear takes an unbatched [in] input too: "
                                           "concatenate the shards' parts along the LAST dim",
        KEPT: "rule 'Results': the first call's output changed when the wrapper was called "
              "again: each call returns a tensor of its own, never a buffer kept on the module",
        "backward/grad input": "two calls before one backward: each call's backward needs its "
                               "own input and masks: keep per-call state in the autograd "
                               "context (ctx.save_for_backward), never on the module, where the "
                               "second call overwrites the first's",
        "backward 2/grad": "rule 'Accumulation': a second backward without zero_grad ADDS to "
                           "each shard's .grad (p.grad += g, or p.grad = g if it is None), "
                           "as autograd does for any parameter; and a rank whose gradient is "
                           "zero rotates its accumulators all the same"})
    U, IN = 10, 5
    PASSES = {"forward": ((300, (3, 5), 400), (310, (5,), 410)), "forward 2": ((320, (3, 5), 420),)}

    owned = ("layer",)

    def layer(self):
        return nn.Linear(self.IN, self.U)

    def data(self, r, n, phase):
        """[(input, upstream gradient)] of `phase` on rank r; the second pass's upstream is
        zero on the last rank."""
        zero = phase == "forward 2" and n > 1 and r == n - 1
        return [(randn(sx, *shape, owner=r), randn(sg, *shape[:-1], self.U, owner=r) * (0 if zero else 1))
                for sx, shape, sg in self.PASSES[phase]]

    def run(self, ctx):
        r, n = ctx.rank, ctx.world_size
        layer = owned_module(self, "layer", 0, r, torch.float32).to(device=ctx.device,
                                                                    dtype=ctx.dtype)
        with ctx.phase("init"):
            w = ctx.impl.flyweight.FlyweightWrapper(layer, group=ctx.group)
        with ctx.phase("structure"):
            ranges = {i: w.shard_ranges(i) for i in range(n)}
        ctx.record_value("structure/shard_ranges", _plain(ranges))
        ctx.record("init/own weight shard", w.module.weight)
        ctx.record("init/own bias shard", w.module.bias)
        first = None
        for phase in self.PASSES:
            xs = [(ctx.to(x).requires_grad_(True), ctx.to(g)) for x, g in self.data(r, n, phase)]
            with ctx.phase(phase):
                ys = [w(x) for x, _ in xs]
            for i, y in enumerate(ys):
                ctx.record(f"{phase}/output {i}", y)
            if not all(isinstance(y, torch.Tensor) and y.shape == g.shape for y, (_, g) in zip(ys, xs)):
                return
            first = first if first is not None else ys[0]
            with ctx.phase(phase.replace("forward", "backward")):
                sum((y * g).sum() for y, (_, g) in zip(ys, xs)).backward()
            for i, (x, _) in enumerate(xs):
                ctx.record(f"{phase.replace('forward', 'backward')}/grad input {i}", x.grad)
        ctx.record(KEPT, first)
        ctx.record("backward 2/grad weight shard, summed over both passes", w.module.weight.grad)
        ctx.record("backward 2/grad bias shard, summed over both passes", w.module.bias.grad)
        with ctx.phase("full_state_dict"):
            full = w.full_state_dict()
        for k in ("weight", "bias"):
            ctx.record(f"full_state_dict/{k}", full.get(k) if isinstance(full, dict) else None)

    def expected(self, world_size):
        manual_seed(0, owner=0)
        serial = nn.Linear(self.IN, self.U).double()
        exp = {r: {} for r in range(world_size)}
        for r in range(world_size):
            for phase in self.PASSES:
                xs = [(x.requires_grad_(True), g) for x, g in self.data(r, world_size, phase)]
                ys = [serial(x) for x, _ in xs]
                exp[r].update({f"{phase}/output {i}": y.detach() for i, y in enumerate(ys)})
                (sum((y * g).sum() for y, (_, g) in zip(ys, xs)) / world_size).backward()
                exp[r].update({f"{phase.replace('forward', 'backward')}/grad input {i}":
                               x.grad * world_size for i, (x, _) in enumerate(xs)})
        mean_w, mean_b = serial.weight.grad, serial.bias.grad   # every rank's, / N
        ranges = {str(i): {"bias": [0, [[a, b]]], "weight": [0, [[a, b]]]}
                  for i, (a, b) in enumerate(_units(self.U, world_size))}
        for r, (a, b) in enumerate(_units(self.U, world_size)):
            exp[r] = {"structure/shard_ranges": ranges,
                      "init/own weight shard": serial.weight.detach()[a:b],
                      "init/own bias shard": serial.bias.detach()[a:b], **exp[r],
                      KEPT: exp[r]["forward/output 0"],
                      "backward 2/grad weight shard, summed over both passes": mean_w[a:b],
                      "backward 2/grad bias shard, summed over both passes": mean_b[a:b],
                      "full_state_dict/weight": serial.weight.detach(),
                      "full_state_dict/bias": serial.bias.detach()}
        return exp

    def comm_rules(self, world_size):
        quiet = "rule 'Rotation only': the shards travel point-to-point (rotate_async)"
        rules = [CommRule(p, "collective", 0, quiet) for p in (
            "forward", "backward", "forward 2", "backward 2", "full_state_dict")]
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
        "(module._conv_forward(x, weight, bias) applies them all), on a batched [B, C, H, W] "
        "or unbatched [C, H, W] input: the channels are dim -3")


class RTPConv2d(RTPCheck):
    """nn.Conv2d(2, 5, 3, stride=(2, 1), padding=1, dilation=(1, 2), padding_mode="circular",
    bias=False) on an unbatched [C, H, W] input: 5 channels, no bias, and settings beyond the
    defaults (a layer's own settings must be applied to each shard, and its channels are
    dim -3, not 1)."""
    name = "Conv2d"
    hints = dict(HINTS, **{"forward/output": CONV + "; " + HINTS["forward/output"],
                           "error/forward": CONV + "; " + HINTS["error/forward"]})

    def build(self):
        return nn.Conv2d(2, 5, 3, stride=(2, 1), padding=1, dilation=(1, 2),
                         padding_mode="circular", bias=False)

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 7, 7, owner=rank),)


class RTPEmbedding(RTPCheck):
    """A pretrained nn.Embedding(13, 7, padding_idx=0) whose padding row is not zero (a loaded
    table keeps it): columns split, integer input, no input gradient."""
    name = "Embedding"
    hints = dict(HINTS, **{"forward/output": "the output is the serial table's rows, the "
                           "padding row included as it is (a pretrained one need not be zero: "
                           "never zero it when wrapping); " + HINTS["forward/output"]})

    def build(self):
        emb = nn.Embedding(13, 7, padding_idx=0)
        with torch.no_grad():
            emb.weight[0].uniform_(0.5, 1.0)
        return emb

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


MASKS = ("nn.MultiheadAttention reads a bool mask (attn_mask, key_padding_mask) as True = "
         "masked (not attended), while F.scaled_dot_product_attention reads a bool attn_mask "
         "as True = attend: turn the module's bool masks into a float bias first (-inf where "
         "True, 0 elsewhere), or pass ~mask to scaled_dot_product_attention")


class RTPMultiheadAttentionBatchFirst(RTPCheck):
    """nn.MultiheadAttention(12, 4, batch_first=True): self-attention, a bool causal mask and a
    bool key padding mask (True = masked, as the module reads them)."""
    name = "MultiheadAttention_batch_first"
    hints = dict(HINTS, **{"error/forward": ATTENTION_CONTRACT, "forward": ATTENTION_CONTRACT})

    def build(self):
        return nn.MultiheadAttention(12, 4, batch_first=True)

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 5, 12, owner=rank),)

    def call(self, model, xs, inverted=False):
        x = xs[0]
        causal = torch.ones(5, 5, dtype=torch.bool, device=x.device).triu(1)
        padding = torch.zeros(2, 5, dtype=torch.bool, device=x.device)
        padding[1, 3] = True
        if inverted:
            causal, padding = ~causal, ~padding
        return model(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)[0]

    def expected(self, world_size):
        """The output as the serial module gives it, and as bool masks read the other way round
        give it (F.scaled_dot_product_attention reads True as "attend", nn.MultiheadAttention
        as "masked"), which the verdict then names."""
        exp, model = super().expected(world_size), initial_model(self, list(range(world_size)))
        for r, e in exp.items():
            with torch.no_grad():
                y = self.call(model, [self.inputs(1, r)[0].to(getattr(torch, self.dtype))], True)
            e["forward/output"] = Like(e["forward/output"], (
                (y, "the bool masks read the other way round", MASKS),))
        return exp


class RTPMnistCNN(RTPCheck):
    """The tutorial CNN's layers (dropout off), scaled down: at full size fc1 alone is 1.2M
    weights, whose records took more time to write, read and compare than all the other
    checks. 10, 14, 22 and 10 units: uneven shards for N = 3 and 4. Its first convolution is
    frozen (a pretrained feature extractor): its shards stay frozen, get no gradient, and take
    no optimizer state."""
    name = "MnistCNN"
    opt_steps = (("sgd", 1), ("adam", 1))

    def build(self):
        model = MnistCNN(dropout1=0.0, dropout2=0.0, channels=(10, 14), hidden=22, image=14)
        model.conv1.requires_grad_(False)
        return model

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 1, 14, 14, owner=rank),)


class RTPTransformerLM(RTPCheck):
    """The tiny transformer LM: embedding, attention, MLP and decoder wrapped, LayerNorms
    replicated."""
    name = "TransformerLM"
    opt_steps = (("sgd", 1), ("adam", 1))  # 8 layers x 2N-1 messages a step: the layer checks
                                           # above run two steps of each optimizer
    zero_last_rank = True   # its gradients are zero at step 1: it communicates all the same

    def build(self):
        return build_model("lm", tiny=True)

    def inputs(self, step, rank):
        return (randint(1000 * step, 96, 2, 6, owner=rank),)


MOE = ("a wrapped MoE returns what the serial MoE.forward returns, (y, aux): here the check's "
       "output is torch.cat([y.flatten(), aux[None]]), so its LAST entry is the aux loss. "
       "The router stays whole (replicated) and routes this rank's tokens before the loop "
       "(moe.routing(x)); forward step i holds the experts of shard s = (r - i) % N (they came "
       "CLOCKWISE, from rank r-1) and adds, for each of them and each of its KEPT choices "
       "(t, j), gate[t, j] * expert(x[t]) at row t; the shards' parts are summed")
MOE_GRADS = ("the router's gradient comes from the aux loss AND from the gates, which weight "
             "each expert's output: pass the gates into your autograd.Function as an input "
             "(never detached) and return d gate = the sum over the kept choices of "
             "dy[t] . expert(x[t]); the router is a replicated parameter: its .grad is the "
             "mean over the ranks, like DDP")


class RTPMoE(RTPCheck):
    """E5.3: the course's MoE layer (rtp_course/models/moe.py, the one E10 parallelises with
    all-to-all): 6 experts (2, 2, 1, 1 at N = 4), top-2 routing, a capacity that drops some
    choices. The experts rotate, the router stays replicated; the output holds y and the aux
    loss, so the router learns through the gates and the aux loss."""
    name = "MoE"
    task = "E5.3"
    hints = dict(HINTS, **{
        "forward/output": MOE, "error/forward": MOE + "; " + HINTS["error/forward"],
        "backward/grad router": MOE_GRADS,
        "backward/grad input": "d x sums the experts' part (your Function: for each shard in "
                               "hand, recompute its experts' part from the saved tokens and "
                               "gates) and the router's (autograd, outside your Function, "
                               "through the aux loss AND the gates: the gates are an input of "
                               "your Function, never detached, and it returns their gradient); "
                               + HINTS["backward/grad input"],
        "structure/": "an MoE's units are its experts, cut like torch.tensor_split: shard s "
                      "holds experts [start[s], start[s] + sizes[s]), all of each one's "
                      "parameters ('experts.e.fc1.weight', ...: (0, [(0, rows)])); the other "
                      "experts' parameters are empty in it ((0, [])); the router is not in any "
                      "shard: it stays whole, a replicated parameter"})

    def build(self):
        return MoE(dim=6, hidden=8, num_experts=6, top_k=2, capacity_factor=1.0)

    def inputs(self, step, rank):
        return (randn(1000 * step, 2, 5, 6, owner=rank),)

    def call(self, model, xs):
        y, aux = model(*xs)
        return torch.cat([y.flatten(), aux.reshape(1)])


GROUP = ("rule 'Group': in a group, the shard index and the number of shards are the GROUP rank and size "
         "(dist.get_rank(group), dist.get_world_size(group)); the initial weights come from the "
         "group's rank 0 (global rank dist.get_global_rank(group, 0)); only p2p peers are global "
         "ranks (your rotation functions translate them)")


class RTPLinearSubgroup(RTPLinear):
    """The Linear check on the group of global ranks {0, 2}: group ranks are not global ranks,
    and the group's are not consecutive."""
    name = "Linear_subgroup"
    world_sizes = (3,)
    hints = dict(HINTS, error=GROUP, **{"structure/": GROUP, "init/": GROUP})

    def members(self, world_size):
        return [[0, 2]]
