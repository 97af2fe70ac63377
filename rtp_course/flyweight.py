"""Exercise E5: Rotated Tensor Parallelism (RTP) with the flyweight memory pattern.

Notebook: notebooks/06_flyweight_rtp.ipynb. Check: `rtp-course check flyweight`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E5.1  section 2: `FlyweightWrapper`
    E5.2  section 3: `RotatedTensorParallel`
    E5.3  section 5: `FlyweightMoE`

RTP is a drop-in replacement for DistributedDataParallel (DDP): every rank
feeds its OWN batch and gets the same results as DDP, but stores only 1/N of
every big weight (and so 1/N of its gradient and optimizer state). The weights
a rank does not store visit it, one shard at a time, by rotation (exercise E4).

SHARDS. A layer's weights are cut into N shards along one "unit" dimension;
shard s lives on rank s (group ranks). Units are split like torch.tensor_split:
    sizes[s] = U // N + (1 if s < U % N else 0),  start[s] = sizes[0] + ... + sizes[s-1]
so shard s holds units [start[s], start[s] + sizes[s]); sizes may be uneven
(e.g. 10 outputs on 4 ranks: 3, 3, 2, 2) and every rank can compute the shape
of ANY shard from its index: that is how a receiver allocates its buffer.

    layer                 unit (U)          slices of shard s, units [a, b)
    nn.Linear             out_features      weight[a:b, :], bias[a:b]
    nn.Conv2d (groups=1)  out_channels      weight[a:b], bias[a:b]
    nn.Embedding          embedding_dim     weight[:, a:b]
    nn.MultiheadAttention num_heads         heads a..b-1, head dim d = E / H:
                                            in_proj_weight rows [a*d, b*d) of EACH of the
                                            q, k, v blocks (at 0, E, 2E), same for in_proj_bias,
                                            out_proj.weight[:, a*d:b*d],
                                            out_proj.bias: all of it in shard 0, none elsewhere
    MoE (models/moe.py)   num_experts       experts a..b-1, each parameter whole:
                                            experts.e.{fc1,fc2}.{weight,bias}: dim 0,
                                            [(0, that Linear's out_features)] for a <= e < b,
                                            [] (0 rows: empty) for the other experts;
                                            router: in no shard (replicated, see MOE)

ATTENTION. A wrapped nn.MultiheadAttention is called exactly as the module it
replaces, with everything nn.MultiheadAttention accepts that the checker uses:
    batch_first=False (the default: query [L, B, E], key and value [S, B, E]) or
        True ([B, L, E], [B, S, E]): read it from the wrapped module;
    cross-attention: key and value differ from query, and S may differ from L;
    key_padding_mask [B, S]: bool (True = ignore that key) or float (added to the
        scores), or None;
    attn_mask [L, S] (every head) or [B*H, L, S] (row b*H + h for head h of batch
        element b): bool or float, or None; is_causal as torch takes it;
    need_weights: ignored; it returns (output, None).
A shard of heads a..b-1 uses rows b*H + h (h in a..b-1) of a per-head attn_mask.
F.scaled_dot_product_attention on the shard's q, k, v (after the masks are
turned into one float bias) does the rest. In nn.MultiheadAttention a bool mask
(either one) means True = masked: it becomes -inf where True (while
F.scaled_dot_product_attention reads a bool mask the other way round).

MOE. FlyweightMoE wraps the course's mixture-of-experts layer (rtp_course/models/moe.py,
the layer exercise E10 spreads with all-to-all; read its docstring). Here the EXPERTS
rotate, as a Linear's rows do, and every rank runs every expert on its own tokens as that
expert's shard passes by; the router stays whole on every rank. Called as the MoE:
x [..., dim] -> (y [..., dim], aux []). On rank r, with tokens x [T, dim] (x flattened):
    probs, routing = moe.routing(x)           # the replicated router: [T, E]; expert, gate,
                                              # keep: [T, k] (gate differentiable)
    y = the rotating loop (FORWARD below) over the expert shards, the parts SUMMED, with
        part_s = sum over experts e of shard s, over their kept choices (t, j) with
                 expert[t, j] == e:  gate[t, j] * expert_e(x[t]) added at row t
                 (expert_e(x) = fc2(tanh(fc1(x))), with shard s's tensors)
    aux = load_balancing_loss(probs, routing.expert)   # from the replicated router alone
The tokens AND the gates are inputs of your autograd.Function (the router's gradient
comes through the gates: d gate[t, j] = dy[t] . expert_e(x[t]) for a kept choice);
expert, keep are data (no gradient). d x = the router's part (autograd, outside the
Function) + the experts' (the Function). The router's parameters are replicated
parameters: rank 0's values at the start, .grad the DDP mean (RotatedTensorParallel's
hooks; FlyweightMoE keeps them in self.module.router).

FORWARD of a wrapped layer on rank r (input x: this rank's batch):
    for i in 0..N-1:
        s = (r - i) % N                       # the shard in hand
        if i < N-1: start rotating it clockwise (rotate_async): shard s-1 arrives
        y_s = this layer computed with shard s only   (overlaps the transfer)
        wait for the arriving shard; drop the one you used
    y = concatenation of y_0..y_{N-1} along the output-feature dim (Linear, Embedding: -1,
        Conv2d: channels) -- or, for attention, the SUM of the heads' partial outputs
        (out_proj is split by input columns), with out_proj.bias added once.
    N-1 rotations. Memory: a rank holds its own shard, plus at most the received
    shard in hand and the one arriving (two received buffers per layer, freed as
    soon as they are used; none left after forward).

BACKWARD on rank r (dy: gradient of this rank's loss w.r.t. y):
    for k in 0..N-1:
        s = (r + k) % N                       # weights now rotate COUNTERCLOCKWISE
        if k < N-1: start rotating the weight shard counterclockwise
        recompute y_s from the saved input and shard s; from dy get dx (sum over s)
        and g = d(loss of THIS batch)/d(shard s)
        acc_s = (accumulator of shard s received from rank r+1, if any) + g
        rotate acc_s counterclockwise
    After N-1 weight moves and N accumulator moves, the accumulator of shard r
    (with every rank's contribution) is back on rank r: shard r's .grad = acc / N,
    the slice of the DDP-averaged gradient (mean over ranks).
    Memory: at most four received buffers per layer (the weight shard in hand and the
    arriving one, the accumulator arriving and the one you add to; the previous layer's
    last accumulator may still be arriving), none left after backward.
    A simple, generic way: a torch.autograd.Function whose forward saves only
    the input (never the other shards) and whose backward, for each shard in
    hand, recomputes that shard's output under torch.enable_grad() and calls
    torch.autograd.grad(y_s, [x, shard], dy_s).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes',
'Send buffers'.
* Results: each rank's forward output equals the serial model's output on its
  batch (whatever the wrapped modules' settings: stride, dilation, padding mode,
  unbatched inputs, masks; an MoE's routing, capacity and aux loss); after backward,
  each shard's .grad is the slice of the DDP-averaged gradient, and each replicated
  parameter's .grad (an MoE's router too) the DDP mean.
* Layout: shard s holds the slices of the SHARDS table above; shard_layout() says so.
* Accumulation: two backward passes without zero_grad leave the SUM of both: add to
  a shard's .grad, never replace it; two forwards before one backward give the
  gradient of both (keep per-call state in the autograd context, not on the module).
* Frozen and unused: a parameter that does not require grad stays so in its shard
  (nn.Parameter(t) requires grad whatever t did: pass requires_grad=...) and gets
  no gradient.
* Rotation only (your exercise E4 functions, `from . import rotation`): no
  all_gather / broadcast of weights during forward, backward or full_state_dict.
* Communication: per layer, forward receives every other shard once (at most N-1
  messages) from rank r-1; backward at most 2N-1 messages (N-1 weight shards, N
  accumulators) from rank r+1. Fewer messages are fine. Every rank makes the same
  calls, whatever its data.
* Overlap: start a shard's rotation BEFORE computing with it: between posting
  a receive and waiting for it the rank does the step's work with the shard in
  hand (a product: a matmul, a linear, attention, a convolution; or a lookup:
  embedding, indexing), not any op: another operation (a stray add, a norm),
  views, allocations and copies do not count.
* Memory: see FORWARD above; never keep received shards in a list, and no
  tensor of the weights besides your shard, wherever it would be kept (an
  attribute, a dict, a buffer of your own, a global, a closure), nor a shard that
  is a view of the full weight (nn.Parameter(w[a:b]) keeps all of w alive: clone
  the slice). The checker counts every tensor, and every storage kept without one
  (full.untyped_storage()), that the rank holds after forward (less
  what autograd saved for backward) and after a step, less its parameters,
  gradients, optimizer state and the model's own buffers. Backward rotates the
  weights again: keep no copy of a shard from forward to backward.
* Group: use `group` for every rank, size and communication; its ranks need not be
  consecutive, and the initial weights come from its rank 0.
"""
import torch
import torch.distributed as dist
from torch import nn

from . import rotation


class FlyweightWrapper(nn.Module):
    """Holds shard r of one layer and computes the full layer by rotating shards.

    FlyweightWrapper(module, group=None), module: nn.Linear, nn.Conv2d,
    nn.Embedding or nn.MultiheadAttention (TypeError for anything else).
    At construction every rank takes the FULL weights of rank 0 (a broadcast
    is fine here, once) and keeps only its own shard, as the parameters of
    `self.module` (e.g. self.module.weight becomes an nn.Parameter of shape
    [sizes[r], in_features] for a Linear). The wrapped module keeps its class,
    so the wrapper is called exactly like it: wrapper(x) for Linear / Conv2d /
    Embedding, wrapper(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, ...) -> (output, None) for MultiheadAttention (attention
    weights are not returned: no rank ever has all the heads).
    """

    def __init__(self, module, group=None):
        raise NotImplementedError("[E5.1] FlyweightWrapper.__init__: super().__init__(); compute the "
                                  "unit sizes of every shard, broadcast the full parameters "
                                  "from group rank 0, then replace them by nn.Parameter(own "
                                  "shard)")

    def shard_ranges(self, index):
        """{parameter key: (dim, [(start, stop), ...])} for shard `index`.

        The slices (along `dim`) of each full parameter that make the shard,
        concatenated in this order. Keys are the wrapped module's own
        parameter names ("weight", "bias", "in_proj_weight", "out_proj.weight", ...).
        Examples, N = 3: Linear(5, 10), index 1 -> {"weight": (0, [(4, 7)]),
        "bias": (0, [(4, 7)])}; MultiheadAttention(E=6, H=3), index 2 ->
        {"in_proj_weight": (0, [(4, 6), (10, 12), (16, 18)]), ...,
        "out_proj.weight": (1, [(4, 6)]), "out_proj.bias": (0, [])}.
        """
        raise NotImplementedError("[E5.1] shard_ranges: see the table in the module docstring")

    def forward(self, *args, **kwargs):
        """The full layer's output for this rank's input, computed shard by shard."""
        raise NotImplementedError("[E5.1] FlyweightWrapper.forward: call your autograd.Function, whose "
                                  "forward loops over the N shards (rotate_async before compute)")

    def full_state_dict(self):
        """{key: full tensor} of the serial module's parameters, on every rank.

        Gathered with N-1 rotations of the shards (no all_gather).
        """
        raise NotImplementedError("[E5.1] full_state_dict: rotate your shard N-1 times; put each shard's "
                                  "slices where shard_ranges(index) says")


class FlyweightMoE(FlyweightWrapper):
    """The experts of an MoE layer (rtp_course.models.moe.MoE) in shards that rotate; its
    router replicated (the MOE paragraph of the module docstring).

    FlyweightMoE(moe, group=None) (TypeError if `moe` is not an MoE). Reuse your wrapper:
    an MoE is one more layer kind, whose units are its experts (the SHARDS table), whose
    shards' parts are summed (as attention's are), and whose Function takes two inputs,
    the tokens and the gates. At construction every rank takes rank 0's FULL parameters,
    keeps the experts of its shard as they are and the others' parameters empty
    (nn.Parameter(p[0:0].clone(), requires_grad=...)), and keeps the router whole, as
    self.module.router (not rotated: the routing is needed before the loop).
    forward(x) -> (y, aux), as MoE.forward. shard_ranges(index): the experts' keys only
    (the router is in no shard). full_state_dict(): every key of the serial MoE, the
    router's as they are.
    """

    def __init__(self, moe, group=None):
        raise NotImplementedError("[E5.3] FlyweightMoE.__init__: your FlyweightWrapper's, with the "
                                  "experts as units and the router kept whole")

    def shard_ranges(self, index):
        raise NotImplementedError("[E5.3] FlyweightMoE.shard_ranges: experts.e.* of shard index's "
                                  "experts whole, (0, []) for the others; no router key")

    def forward(self, x):
        raise NotImplementedError("[E5.3] FlyweightMoE.forward: route with the replicated router, "
                                  "then your rotating Function over (tokens, gates); add the "
                                  "aux loss")

    def full_state_dict(self):
        raise NotImplementedError("[E5.3] FlyweightMoE.full_state_dict: the experts by rotation, "
                                  "the router as it is")


class RotatedTensorParallel(nn.Module):
    """RotatedTensorParallel(model, group=None): DDP semantics, RTP memory.

    Replaces, in place, every nn.Linear, nn.Conv2d, nn.Embedding and
    nn.MultiheadAttention inside `model` (recursively; `model` itself too if it
    is one of them) by FlyweightWrapper(child, group), and every MoE
    (rtp_course.models.moe.MoE) by FlyweightMoE(child, group) (task E5.3). Do not look
    inside a MultiheadAttention or an MoE: its Linears belong to it (an MoE's router
    stays a replicated parameter, below the wrapper's `module`).
    Every other parameter and buffer (LayerNorm, ...) stays replicated: all
    ranks start from rank 0's values and, after backward, such a parameter's
    .grad is the mean over ranks (like DDP; an all_reduce of these small
    gradients is fine, e.g. from p.register_post_accumulate_grad_hook).

        rtp = RotatedTensorParallel(model)
        opt = torch.optim.Adam(rtp.parameters())   # shards + replicated parameters
        loss_fn(rtp(x_of_this_rank), y).backward(); opt.step()
    """

    def __init__(self, model, group=None):
        raise NotImplementedError("[E5.2] RotatedTensorParallel.__init__: super().__init__(); wrap the "
                                  "layers (recursively), store the model as self.module, "
                                  "broadcast the replicated parameters and buffers from rank 0, "
                                  "hook their gradients")

    def forward(self, *args, **kwargs):
        raise NotImplementedError("[E5.2] RotatedTensorParallel.forward: call the wrapped model")

    def full_state_dict(self):
        """The serial model's state_dict on every rank: same keys ('fc1.weight', ...), full
        tensors, gathered by rotation (FlyweightWrapper.full_state_dict), for checkpoints."""
        raise NotImplementedError("[E5.2] full_state_dict: replicated entries as they are; each wrapper's "
                                  "entries from its full_state_dict, under the original key")

    def shard_layout(self):
        """What this rank owns, for the checker. One entry per wrapped module:

            {"fc1": {"kind": "Linear", "index": r, "num_shards": N, "units": (start, stop),
                     "params": {"weight": {"name": "module.fc1.module.weight",
                                           "dim": 0, "ranges": [(start, stop)]},
                                "bias": {...}}},
             "layers.0.self_attn": {...}, ...}

        Keys are the module names in the serial model ("" if `model` itself is
        wrapped); "name" is the shard parameter's name in self.named_parameters();
        "dim" and "ranges" are shard_ranges(r) of that wrapper; "kind" the wrapped
        module's class name ("MoE" for an MoE, whose "units" are experts).
        """
        raise NotImplementedError("[E5.2] shard_layout: build it from your wrappers' shard_ranges")
