# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Rotated Tensor Parallelism with flyweight layers (exercise E5)
#
# DDP (notebook 02) is simple and fast, but every rank stores the whole model: parameters,
# gradients and optimizer state, $16$ bytes per parameter with mixed-precision Adam (notebook 00).
# FSDP shards them and **all-gathers** each layer's full weights before using it. Tensor
# parallelism (notebook 04) shards them too, but changes the program: every rank must feed the
# same batch, and activations are all-reduced at every layer.
#
# **Rotated Tensor Parallelism** (RTP, Luo et al., *RTP: Rethinking Tensor Parallelism with Memory
# Deduplication*, arXiv 2311.01635) keeps DDP's program and gets rid of the duplicates:
#
# * like DDP, **each rank feeds its own batch**, and the result is DDP's, step for step;
# * each rank **stores only its own shard** of every weight, of its gradient and of its
#   optimizer state: $1/N$ of each;
# * the shards it does not store **visit it**: in the forward pass they rotate around the ring
#   (notebook 05) while the rank computes with the one in hand; in the backward pass they rotate
#   back, together with **gradient accumulators** that collect every rank's contribution.
#
# In this notebook you
#
# 1. follow one layer through an RTP forward and backward pass;
# 2. **implement** `FlyweightWrapper`, which turns one layer into a rotating one;
# 3. **implement** `RotatedTensorParallel`, a drop-in replacement for DDP, and train the MNIST CNN
#    with it;
# 4. train the transformer LM of the RTP paper's benchmarks with it;
# 5. **implement** `FlyweightMoE`: a mixture-of-experts layer whose experts travel;
# 6. check your work;
# 7. compare per-rank memory with DDP and PyTorch's FSDP, by category;
# 8. compare step times;
# 9. get graded.
#
# You will edit **`rtp_course/flyweight.py`**; it uses your `rtp_course/rotation.py` (notebook 05).

# %%
import matplotlib.pyplot as plt

from rtp_course.notebook import diagrams, plots, timeline, trace
from rtp_course.training.bench import CATEGORIES
from rtp_course.checker import check
from rtp_course.notebook import where_checks_run
from rtp_course.notebook.demos import rtp as demo
from rtp_course.notebook.demos import run_demo, show_source
from rtp_course.course.impl import default_impl
from rtp_course.training.strategies import LABELS

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. The idea: shards that travel
#
# Take one `nn.Linear` with weight $W$ `[out, in]`, and cut its **output features** in $N$ shards
# $W_0, \dots, W_{N-1}$ (with their bias slices): shard $s$ lives on rank $s$. Rank $r$ has its own
# batch $x_r$, and needs $y_r = x_r W^\top + b = [x_r W_0^\top + b_0, \dots, x_r W_{N-1}^\top + b_{N-1}]$:
# every shard, but one at a time.
#
# **Forward** on rank $r$, steps $i = 0, \dots, N-1$:
#
# 1. the shard in hand is $s = (r - i) \bmod N$ (at step 0, its own);
# 2. start rotating it **clockwise** (`rotate_async`): it leaves for rank $r+1$, while shard
#    $s-1$ arrives from rank $r-1$;
# 3. compute the part of the output this shard makes, $x_r W_s^\top + b_s$, while the transfer runs;
# 4. wait for the arriving shard and **drop** the one just used.
#
# After $N$ steps and $N-1$ rotations, rank $r$ has computed every part; it concatenates them.
#
# **Backward** on rank $r$, given $\partial L_r/\partial y_r$, steps $k = 0, \dots, N-1$: the
# shard in hand is now $s = (r + k) \bmod N$: weights rotate **counterclockwise**, back where they
# came from. With shard $s$ the rank computes its contribution to $\partial L_r / \partial x_r$
# and the gradient of *its own batch's* loss with respect to $W_s$. That gradient must reach the
# owner of $W_s$, summed over all ranks' batches. So a **gradient accumulator** travels with the
# shard: rank $r$ adds its term to the accumulator of $W_s$ received from rank $r+1$ and passes it
# on counterclockwise. After $N$ moves, the accumulator of $W_r$ is back on rank $r$ with all $N$
# contributions; divided by $N$, it is DDP's averaged gradient for shard $r$.
#
# The grids show, for 4 ranks, which shard (colour = owner) each rank holds at each step:

# %%
diagrams.rtp_schedule(4)
plt.show()

# %% [markdown]
# **Why "flyweight"?** The *flyweight* design pattern shares one heavy object among many uses,
# swapping in the little state that differs. Here the wrapped layer is **one module** whose weight
# is swapped for the shard in hand at each step: the layer's code (`F.linear`, a convolution, an
# attention) runs $N$ times on $N$ different small weights, and no rank ever materializes the full
# weight. At any moment a rank holds its own shard, the one in hand and the one arriving.
#
# **Memory, per rank:** parameters, gradients and optimizer state are $1/N$ of the model's, plus,
# for the layer being computed only, a few shards in flight (in forward the one in hand and the one
# arriving; in backward also gradient accumulators): the *communication* buffers. FSDP instead
# gathers a whole layer (or block) at a time. DDP duplicates everything.
#
# **Other layers.** The same recipe works for any layer whose output features come from separate
# slices of its weights:
#
# | layer | unit cut in shards | shard $s$ | combine the parts |
# |---|---|---|---|
# | `nn.Linear` | output features | `weight[a:b, :]`, `bias[a:b]` | concatenate (last dim) |
# | `nn.Conv2d` | output channels | `weight[a:b]`, `bias[a:b]` | concatenate (channels) |
# | `nn.Embedding` | embedding columns | `weight[:, a:b]` | concatenate (last dim) |
# | `nn.MultiheadAttention` | heads | their $q$, $k$, $v$ rows and `out_proj` columns | **sum** |
#
# For attention, the heads' outputs go through `out_proj`, whose input columns are split: each
# shard's part is a partial sum (as in notebook 04's row layer), and `out_proj.bias` is added
# once (it belongs to shard 0 alone). Shards may be **uneven**: $U$ units over $N$ ranks follow
# `torch.tensor_split`'s rule (10 outputs on 4 ranks: 3, 3, 2, 2), so every rank can compute the
# shape of any shard from its index and allocate the receive buffer.
#
# ## 2. Task E5.1 · One layer: `FlyweightWrapper`
#
# **Your task.** In `rtp_course/flyweight.py`, implement `FlyweightWrapper(module, group=None)`:
#
# * **construction**: broadcast the full parameters from group rank 0 (once; every rank then
#   starts from the same weights), keep only your shard as the module's parameters
#   (`nn.Parameter`), and remember the full shapes;
# * `shard_ranges(index)`: which slices of each full parameter make shard `index` (the table
#   above; the docstring has examples);
# * `forward`: the rotating loop of section 1. The simplest correct design is a
#   `torch.autograd.Function` whose forward runs the loop and **saves only the input** (never the
#   visiting shards: they are gone after the loop), and whose backward runs the counterclockwise
#   loop, **recomputing** each shard's part of the output under `torch.enable_grad()` and calling
#   `torch.autograd.grad` on it to get $\partial x$ and $\partial W_s$. Recomputation costs one
#   more forward, and buys the memory;
# * `full_state_dict()`: the full serial parameters, gathered with $N-1$ rotations (a checkpoint).
#
# Send each shard as **one flat tensor** (all its pieces concatenated): one message per step.
#
# A wrapped `nn.MultiheadAttention` is a drop-in replacement, so it takes what the module takes,
# not only the causal self-attention of the LM: sequence-first input (the default) or
# `batch_first=True`, cross-attention (key and value of another length $S$ than the query's $L$),
# a `key_padding_mask` of shape $[B, S]$ and an `attn_mask` of shape $[L, S]$ or per head
# $[B \cdot H, L, S]$, each either bool or float. The checks use all of them; the stub's
# ATTENTION paragraph says how each maps onto your shard of heads.
#
# The demo wraps a serial `nn.Linear(8, 10)` on **3 ranks** (10 outputs: shards of 4, 3 and 3)
# and an `nn.MultiheadAttention(12, 6 heads)`. Each rank feeds **its own** batch, then compares
# its output with the serial layer on that batch and its shard's gradient with the same slice of
# the **DDP-averaged** gradient (the mean over ranks of the serial gradients). It also counts the
# point-to-point calls and the most received bytes a rank held at once.

# %%
for kind in ("linear", "attention"):
    out = run_demo(demo.layer_demo, 3, kind, needs="FlyweightWrapper (rtp_course/flyweight.py)")
    if out is not None:
        print(f"--- {kind}\n{demo.describe(out)}\n")

# %% [markdown]
# With the design above, forward makes $N-1 = 2$ rotations (a send and a receive each) and holds
# at most two received shards at once (the one in hand and the one arriving); backward makes
# $N-1$ weight rotations plus $N$ accumulator moves: $2N - 1 = 5$ sends. The MultiheadAttention
# shards take their rows from each of the $q$, $k$, $v$ blocks, and only shard 0 holds
# `out_proj.bias`.
#
# ### The rotation, overlapped: a timeline
#
# Does the transfer really hide behind the computation? The next cell wraps a larger
# `nn.Linear(1024, 1024)` on 2 ranks and profiles a forward and a backward pass, batch 256, with
# `torch.profiler` (`rtp_course.notebook.trace.recording_rotations` times every `rotate_async`
# your layer starts, tells weight shards from gradient accumulators by their values, and marks
# the time between two rotation events as compute):

# %%
out = run_demo(demo.layer_timeline, 2, needs="FlyweightWrapper (rtp_course/flyweight.py)")
if out is not None:
    timeline.plot_phases(out, 2)
    path = trace.write_trace([res["events"] for res in out], "traces/06_flyweight_linear.json")
    print(f"the whole profiler trace: {path} (open it in ui.perfetto.dev)")

# %% [markdown]
# Forward: one weight rotation, under the first shard's product. Backward: each step recomputes
# and differentiates a shard's part (more compute) while the next weight shard (orange) and the
# accumulators (green) travel (more traffic). Where a transfer outlasts the compute, the red
# hatches show the wait.
#
# On GPUs the host only queues kernels, and NCCL's `wait()` returns at once: it makes the
# compute stream wait for the transfer's stream. So there the recording synchronizes the GPU at
# the end of every region (`rtp_course/notebook/trace.py`): a blue bar lasts until its kernels
# are done, and a red one as long as the GPU would stall for the transfer. With NVLink a
# 1024 x 1024 shard moves in a few microseconds: expect thin orange bars, under the blue ones.
#
# ## 3. Task E5.2 · The whole model: `RotatedTensorParallel`
#
# **Your task.** Implement `RotatedTensorParallel(model, group=None)`:
#
# * replace, in place and recursively, every `nn.Linear`, `nn.Conv2d`, `nn.Embedding` and
#   `nn.MultiheadAttention` by a `FlyweightWrapper` (do not look inside an attention: its
#   `out_proj` belongs to it); keep the model as `self.module`;
# * every other parameter and buffer (LayerNorms, positional tables) stays **replicated**:
#   broadcast it from rank 0, and average its gradient over the ranks after backward, like DDP
#   (`p.register_post_accumulate_grad_hook`, notebook 02);
# * `forward` calls the model; `full_state_dict()` returns the serial model's state dict with its
#   original keys; `shard_layout()` tells the checker what this rank owns.
#
# Used exactly like DDP: `rtp = RotatedTensorParallel(model)`, an optimizer on `rtp.parameters()`
# (shards and replicated parameters), each rank its own batch.
#
# `demo.train_against_ddp` trains the **MNIST CNN** (synthetic digits) on 2 ranks, 8 images per
# rank, first with PyTorch's `DistributedDataParallel`, then with your `RotatedTensorParallel`,
# from the same weights on the same batches, through `rtp_course.training.strategies.wrap` (the benchmark's
# wrapper). At the end it gathers RTP's `full_state_dict()` and compares it with DDP's weights.

# %%
show_source(demo.train_against_ddp)


# %%
def against_ddp(model, steps=8):
    out = run_demo(demo.train_against_ddp, 2, model, steps,
                   needs="RotatedTensorParallel (rtp_course/flyweight.py)")
    if out is None:
        return
    res = out[0]
    diffs = [abs(a - b) for a, b in zip(res["ddp"]["losses"], res["rtp"]["losses"])]
    print(f"{model}: largest loss difference RTP - DDP over {steps} steps: {max(diffs):.1e}; "
          f"full_state_dict has DDP's keys: {res['same keys']}, largest weight difference "
          f"after training: {res['max weight difference']:.1e}")
    plots.loss_curves({"DDP": res["ddp"]["losses"], "RTP (yours)": res["rtp"]["losses"]},
                      title=f"{model}: RTP trains the model DDP trains",
                      styles={"RTP (yours)": {"linestyle": "--", "linewidth": 2.5}})
    plt.show()


against_ddp("cnn")

# %% [markdown]
# The losses agree to rounding, and the gathered weights match DDP's to about $10^{-5}$: Adam
# amplifies last-digit differences of near-zero gradients (notebook 02, section 6). On a recent
# GPU, cuDNN computes fp32 convolutions in TF32 by default (a 10-bit mantissa), which would make
# this about $10^{-3}$ for two correct implementations: `train_against_ddp` turns TF32 off for
# the comparison (`demo.without_tf32`), so a GPU shows the same $10^{-5}$.
#
# ## 4. The transformer LM
#
# The RTP paper benchmarks a GPT-style language model (the course's `TransformerLM`: embedding,
# decoder layers with PyTorch's `nn.MultiheadAttention`, causal mask, a vocabulary decoder). Your
# wrapper meets all four layer kinds here, the attention's packed $q, k, v$ weights included.
# Same comparison:

# %%
against_ddp("lm")

# %% [markdown]
# ## 5. Task E5.3 · Experts that travel: `FlyweightMoE`
#
# A mixture-of-experts layer (`rtp_course/models/moe.py`, the layer notebook 12 spreads over
# ranks with all-to-all) holds $E$ expert MLPs and a small **router**. Each token $x_t$ goes to
# its top-$k$ experts, and the layer returns the experts' outputs weighted by the router's
# probabilities (the **gates**), plus a load-balancing loss:
#
# $$p = \mathrm{softmax}(x W_r^T + b_r), \qquad
#   y_t = \sum_{\text{kept choices } j} g_{tj}\, \mathrm{expert}_{e_{tj}}(x_t), \qquad
#   \text{aux} = E \sum_e f_e P_e .$$
#
# The experts hold almost all the weights, and under RTP they are one more layer kind: the
# **units are experts** (tensor_split's rule again: 8 experts on 3 ranks are shards of 3, 3 and
# 2), a shard holds its experts' parameters whole, and the shards rotate exactly as a Linear's
# rows do. At step $i$ the rank holds shard $s = (r - i) \bmod N$ and runs **its experts on its
# own tokens** routed to them; the parts are **summed** (as attention's heads are). The router
# is tiny and needed *before* the loop (it decides which expert each token visits), so it is
# not sharded: a **replicated** parameter, like a LayerNorm, averaged over ranks after backward.
#
# What your `autograd.Function` needs, compared with a Linear's:
#
# * two differentiable inputs, the tokens $x$ **and the gates** $g$ (the router learns through
#   them: $\partial g_{tj} = \partial y_t \cdot \mathrm{expert}_{e_{tj}}(x_t)$), and the routing
#   (which expert, kept or dropped by the capacity) as plain data;
# * in backward, the same counterclockwise loop: recompute each shard's part from $x$, $g$ and
#   the shard in hand, and take $\partial x$, $\partial g$ and $\partial W_s$ from it.
#
# The stub's MOE paragraph gives the shapes, `FlyweightMoE`'s docstring the construction. The demo
# wraps an 8-expert MoE (top-2) on 3 ranks, each rank with its own 16 tokens, and compares with the
# serial layer and the DDP-averaged gradients; then it counts the experts' bytes each rank holds.

# %%
out = run_demo(demo.moe_demo, 3, needs="FlyweightMoE (rtp_course/flyweight.py)")
if out is not None:
    for r, res in enumerate(out):
        errors = ", ".join(f"{k} {v:.1e}" for k, v in res["errors"].items())
        print(f"rank {r}: experts [{res['experts'][0]}, {res['experts'][1]}), "
              f"{res['expert bytes']} of the experts' {res['serial expert bytes']} bytes; "
              f"largest errors: {errors}")

# %% [markdown]
# Every rank holds about $1/N$ of the experts' bytes, yet each token met its own experts:
# the output, the aux loss and the router's gradient are the serial layer's, and each expert's
# gradient is the DDP mean of every rank's tokens.
#
# ## 6. Check your work
#
# The checker compares your RTP with DDP semantics on single layers, the CNN and the transformer
# LM on 1 to 4 ranks (uneven shards included): outputs per rank, shard gradients, weights after SGD
# and Adam steps, the gathered state dict; and the structure: only point-to-point transfers with
# the two ring neighbours carry weights, the received shards held at once, and the per-rank memory.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("flyweight")          # world sizes 1, 2, 3 and 4

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["flyweight"], gpus=GPUS)


# %% [markdown]
# ## 7. Memory against DDP and FSDP
#
# Now the payoff. `rtp_course.training.bench` (notebook 07 runs it from the command line) trains one model
# with several strategies on the same ranks and batches, and measures each rank's bytes by
# category: **parameters**, **gradients**, **optimizer** state (Adam's two moments), **activations**
# (what autograd saves during a forward pass), **buffers** (registered buffers: the LM's positional
# table) and **communication** buffers (DDP's gradient buckets, FSDP's gathered units, RTP's
# in-flight shards and accumulators). FSDP here is PyTorch's own (`fully_shard`, one unit per
# transformer block or CNN layer). `demo.compare_strategies` calls it; first the CNN on 2 ranks:

# %%
def memory_and_time(model, **flags):
    rows, info = demo.compare_strategies(model, world_size=2, strategies_=("ddp", "fsdp", "rtp"), **flags)
    rank0 = [r for r in rows if r["rank"] == 0]
    for r in rank0:
        if r["status"] != "ok":
            print(f"{LABELS[r['strategy']]}: {r['status']}")
    ok = [r for r in rank0 if r["status"] == "ok"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw=dict(width_ratios=[3, 2]))
    plots.memory_bars({LABELS[r["strategy"]]: {c: r[c] for c in CATEGORIES} for r in ok}, ax=left,
                      title=f"{model}: bytes per rank (rank 0 of 2)")
    slowest = {s: max(x["step_time_s"] for x in rows if x["strategy"] == s) for s in (r["strategy"] for r in ok)}
    right.bar([LABELS[s] for s in slowest], [1e3 * t for t in slowest.values()], color="#4C72B0")
    right.set_ylabel("ms per training step (slowest rank)")
    right.set_title(f"step time, {info['backend']}, {info['num_params'] / 1e6:.2f} M parameters")
    fig.tight_layout()
    plt.show()
    print(f"{'':>6}" + "".join(f"{c:>14}" for c in CATEGORIES) + f"{'total':>14}")
    for r in ok:
        print(f"{LABELS[r['strategy']]:>6}" + "".join(f"{r[c] / 1e6:11.2f} MB" for c in CATEGORIES)
              + f"{r['total'] / 1e6:11.2f} MB")
    return rows


cnn_rows = memory_and_time("cnn", batch_size=16)

# %% [markdown]
# On 2 ranks, FSDP and RTP hold **half** of DDP's parameters, gradients and optimizer state: the
# three categories that make DDP's bar tall. Activations are the same for all three: each rank
# computes the same layers on its own 16 images.
#
# The communication buffers tell the CNN's special story: `fc1` holds 96% of its weights. DDP's
# buckets are a flat copy of all gradients; FSDP gathers `fc1` whole before using it; RTP, in
# backward, holds up to three *halves* of `fc1` at once (the weight shard in hand, the one
# arriving, and a travelling gradient accumulator). On 2 ranks a shard is half the layer, so RTP's
# buffers can come close to FSDP's whole gathered `fc1` (compare the communication column above:
# how close depends on the design, section 8). They shrink as $1/N$; FSDP's gathered unit does not.
#
# Now the transformer LM (4 decoder layers, width 256, vocabulary 2048: the benchmark's default),
# whose weights are spread over many layers, as in real models:

# %%
lm_rows = memory_and_time("lm", batch_size=8)

# %% [markdown]
# Category by category:
#
# * **Parameters, gradients, optimizer**: FSDP and RTP hold $1/2$ of DDP's on 2 ranks, $1/N$ on $N$.
#   With mixed-precision Adam these are 16 bytes per parameter: they dominate large models.
# * **Activations**: RTP's are *smaller*. Its layers save only their input and recompute the rest
#   in backward (a trade of compute for memory), while PyTorch's attention saves more for its own
#   backward.
# * **Communication**: FSDP holds a whole decoder layer gathered, with its gradient; RTP a few
#   shards of one layer, $1/N$ of a layer each.
#
# With $P$ the model's state bytes (parameters, gradients, optimizer), $U$ the largest unit and
# $k \le 4$ shards in flight, per rank:
#
# $$\text{DDP} \approx P + \text{act}, \qquad \text{FSDP} \approx \frac{P}{N} + U\,(\text{or } 2U) + \text{act},
#   \qquad \text{RTP} \approx \frac{P}{N} + k\,\frac{U}{N} + \text{act}.$$
#
# As $N$ grows, RTP's per-rank memory tends to $P/N$ + activations: no full layer is ever
# materialized anywhere. That is the *memory deduplication* of the paper's title.
#
# ## 8. Step time
#
# The right-hand plots show the other side of the trade. Timings on a shared CPU are noisy (run
# the cells again and the bars move), but RTP is not expected to win here:
#
# * the design of section 2 **recomputes** every wrapped layer in backward: one extra forward;
# * it computes each layer in $N$ smaller products instead of one large one, which uses the
#   hardware less efficiently;
# * with gloo, its transfers take CPU cycles from the same cores that compute (notebook 05,
#   section 6), so overlapping buys little; and RTP moves more bytes than DDP's all-reduce
#   (on 2 ranks: the other half of every layer twice, and the gradient accumulators).
#
# **From correct to fast.** The design you wrote is the one to write first: one generic
# recipe for every layer kind. The course's reference goes one step further, with the same
# memory and the same messages in the same directions:
#
# 1. *No recomputation where the saved input suffices.* For `y = x W_s^T + b_s`, backward needs
#    only $\partial x = \partial y_s\, W_s$ and $\partial W_s = \partial y_s^T x$: two products with
#    the shard in hand, added straight into the travelling accumulator (`addmm_`). The same for
#    `Embedding` (an `index_add_` of the output gradient's rows). Attention still recomputes its
#    heads' $q, k, v$ and attention (their gradients need them), but not `out_proj`.
# 2. *No transfer waited right after it starts.* A step waits for the arriving accumulator only
#    when it adds to it, after computing $\partial x$; a layer's last accumulator, on its way
#    home, is waited during the next layer's backward (or, for the last layer, in a callback
#    that the autograd engine runs when the backward ends: `Variable._execution_engine.
#    queue_callback`, DDP's own hook point).
# 3. *$N-1$ accumulator moves instead of $N$.* Your own contribution to your own shard does not
#    need to go round the ring: keep it at home, start each accumulator at the rank after its
#    owner, and add the two when the accumulator comes back. One message less per layer.
# 4. *Prefetch.* A layer's first transfer (its own shard, one step round the ring) can start
#    during the previous layer's last shard, when nothing else is arriving: it then travels
#    during a whole step of compute. The reference learns the layer order in its first forward
#    (backward runs it reversed). Every rank runs the same layers in the same order, so the
#    messages pair up even when the prediction is wrong; still at most two received shards.
# 5. *One call for the small things.* The replicated parameters' gradients (LayerNorms) are
#    all-reduced in one bucket when the backward ends, as DDP does: gloo pays far more per call
#    than for their few bytes.
# 6. *No copies.* The shard's parameters are views of one flat tensor, sent as it is; a
#    `Linear` writes each shard's part straight into its columns of the output (`torch.addmm`
#    with `out=`: no `torch.cat`); $\partial x$ is summed in place; a new accumulator is
#    written, not zeroed and then added to. Attention goes through
#    `F.scaled_dot_product_attention`, with $q, k, v$ of self-attention in one product.
#
# Measured by the course staff on the benchmark LM (4.2 M parameters, 2 CPU ranks, 30 rounds of
# interleaved steps; you can time your own design against DDP with `rtp-course bench`, notebook
# 07): the section-2 design takes
# 1.9 times DDP's step (quartiles of the step-by-step ratio 1.86-2.03), the reference 1.23
# (1.17-1.26), with the same per-rank memory (58 MB, DDP: 114 MB). The checker requires neither:
# it checks the rules in your stub's docstring (results, rotation only, overlap, memory, traffic
# limits), so both designs get full marks.
#
# FSDP pays its all-gathers and reduce-scatters, DDP its all-reduce of every gradient. On GPUs with
# NCCL, the transfers run on their own stream and hide behind the products; the RTP paper reports
# throughput close to DDP's and FSDP's for large models, at a fraction of their memory. Notebook 07
# runs all four strategies (TP included) and puts our numbers next to the paper's.
#
# ## 9. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/flyweight.py` (and the `rotation.py` it uses) and awards up to 25 points, in
# proportion to the checks that pass. In your copy the cell is empty: the grader puts the tests
# back. Use the check cell of section 6 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e5_flyweight", "locked": true, "points": 25.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("flyweight")
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# Notebook **07** benchmarks DDP, FSDP, TP and RTP side by side with `rtp-course bench`, on a CPU
# here and on GPUs through Slurm, and compares with the RTP paper's measurements.
