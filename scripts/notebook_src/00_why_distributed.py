# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Why distributed training?
#
# Before we write a single line of distributed code, let us convince ourselves that we
# *have to*. The argument is pure arithmetic: count the bytes that one training step
# needs, and compare with the memory of one accelerator.
#
# By the end of this notebook you will be able to
#
# * list the four kinds of memory a training step uses (**parameters, gradients, optimizer
#   states, activations**) and estimate each from a model's shape;
# * explain why mixed-precision Adam costs **16 bytes per parameter** before a single activation is stored;
# * say what data parallelism (DDP), ZeRO, FSDP, tensor parallelism (TP) and rotated tensor
#   parallelism (RTP) each split across GPUs, and read the consequences off a plot.
#
# Nothing here starts a process: it is all multiplication. The helpers live in
# `rtp_course/training/memory.py`; open it whenever you want to see a formula in code.

# %%
import math

import matplotlib.pyplot as plt
import torch

from rtp_course.notebook import plots
from rtp_course.training.memory import (activation_bytes, human_bytes, measure, sharded,
                               training_memory, transformer_activation_bytes)

# %% [markdown]
# ## 1. Where the bytes go
#
# Training a model with $P$ parameters keeps four families of tensors alive:
#
# | category | what it is | size |
# |---|---|---|
# | **parameters** | the weights the forward pass multiplies with | $P \times$ bytes per value |
# | **gradients** | $\partial L / \partial w$, one per parameter, filled by `backward()` | $P \times$ bytes per value |
# | **optimizer states** | what the optimizer remembers between steps: nothing for plain SGD, one tensor for momentum, **two** for Adam (the running mean $m$ and the running mean of squares $v$) | $P \times$ states $\times$ bytes |
# | **activations** | the intermediate results of the forward pass that backward needs (inputs of every matmul, softmax outputs, dropout masks...) | grows with batch size, sequence length and depth, **not** with $P$ |
#
# The first three are the **model states**: their size depends only on the model and the
# optimizer. Activations depend on how much data you push through at once.
#
# **Bytes per value.** `float32` takes 4 bytes, `float16`/`bfloat16` 2, `float8` 1.
# Large models are trained in *mixed precision*: the forward and backward passes run in
# 16-bit, but updates are applied to a 32-bit **master copy** of the weights (a 16-bit
# number keeps only 3 or 4 significant digits, so an update hundreds of times smaller than the
# weight would be rounded away), and Adam's $m$ and $v$ are kept in 32-bit too. Per parameter that is
#
# $$\underbrace{2}_{\text{fp16 weight}} + \underbrace{2}_{\text{fp16 gradient}} +
#   \underbrace{4}_{\text{fp32 master}} + \underbrace{4 + 4}_{\text{Adam } m,\,v} = 16 \text{ bytes.}$$
#
# `training_memory` does exactly this bookkeeping:

# %%
one = training_memory(1)                       # mixed-precision Adam, one parameter
print(one.as_dict())
print("plain fp32 Adam:", training_memory(1, param_dtype_bytes=4, grad_dtype_bytes=4).as_dict())
print("fp32 SGD       :", training_memory(1, 4, 4, optimizer="sgd").as_dict())

# %% [markdown]
# Notice that the weights themselves are only 2 of the 16 bytes. A model that "fits"
# for inference can be eight times too large to train.
#
# ### Checking the arithmetic on a real model
#
# Arithmetic is only useful if it matches reality. Let us build the course's small GPT-like
# language model, run one Adam step in plain `float32`, and measure what is actually held.
# In fp32 without a master copy we expect $4 + 4 + 8 = 16$ bytes per parameter.

# %%
from rtp_course.training.data import lm_tokens
from rtp_course.models import build_model, lm_loss

model = build_model("lm", seed=0, tiny=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
inputs, targets = lm_tokens(8, seq_len=12, vocab_size=96, seed=0)
lm_loss(model(inputs), targets).backward()
optimizer.step()

num_params = sum(p.numel() for p in model.parameters())
measured = measure(model, optimizer)
predicted = training_memory(num_params, param_dtype_bytes=4, grad_dtype_bytes=4, master_weights=False)
print(f"{num_params:,} parameters")
for cat in ("parameters", "gradients", "optimizer"):
    print(f"  {cat:11s} measured {measured[cat]:>9,} B   predicted {predicted[cat]:>9,} B")

# %% [markdown]
# Activations are different: they are not held *between* steps, only during one. We can
# count what autograd saves for backward with `activation_bytes`. Double the batch and
# the activations double; the model states do not move.

# %%
for batch in (1, 2, 4, 8):
    x, _ = lm_tokens(batch, seq_len=12, vocab_size=96, seed=0)
    print(f"batch {batch}: activations {human_bytes(activation_bytes(model, x)):>9}   "
          f"model states {human_bytes(measured.total)}")

# %% [markdown]
# ## 2. A trillion parameters, on the back of an envelope
#
# Take a GPT-style transformer with $P = 10^{12}$ parameters: 128 layers, hidden size
# $h = 25\,600$, 160 attention heads (a transformer layer has about $12h^2$ parameters, and
# $12 \cdot 128 \cdot 25\,600^2 \approx 10^{12}$). Train it on sequences of $s = 2048$ tokens,
# $b = 128$ sequences per step.
#
# **Quick estimate** (everything in 16-bit, Adam's two states included):
# parameters $2P$ = 2 TB, gradients $2P$ = 2 TB, optimizer $2 \times 2P$ = 4 TB.
#
# **Careful estimate** (mixed precision as above): $16P$ = 16 TB.

# %%
P = 10**12
quick = training_memory(P, optimizer="adam", master_weights=False, state_dtype_bytes=2)
careful = training_memory(P)
for name, b in (("quick (all 16-bit)", quick), ("careful (mixed precision)", careful)):
    parts = ", ".join(f"{k} {human_bytes(b[k])}" for k in ("parameters", "gradients", "optimizer"))
    print(f"{name:26s} {parts}  ->  {human_bytes(b.total)}")

# %% [markdown]
# **Activations.** The smallest thing backward could possibly need is the input of each
# layer: one $s \times b \times h$ tensor per layer, 2 bytes per value,
# $s\,b\,h\,L \times 2$ bytes. That is what remains with *full activation checkpointing*,
# which recomputes everything inside a layer during backward.
#
# Without recomputation, autograd keeps much more: the inputs of the four linear layers, the
# attention scores and softmax output (these grow with $s^2$!), GELU inputs, layer-norm
# inputs and dropout masks. Korthikanti et al. (2022) counted
# $s\,b\,h\,(34 + 5\,a\,s/h)$ bytes per layer for 16-bit training; that is what
# `transformer_activation_bytes` computes.

# %%
s, b, h, L, a = 2048, 128, 25_600, 128, 160
boundary = s * b * h * L * 2
full = transformer_activation_bytes(seq_len=s, batch=b, hidden=h, num_layers=L, num_heads=a)
print(f"layer inputs only (checkpointing): {human_bytes(boundary)}")
print(f"everything autograd saves        : {human_bytes(full)}  ({full / boundary:.0f} x more)")
print(f"model states + saved activations : {human_bytes(careful.total + full)}")

# %% [markdown]
# So: somewhere between about **18 TB** and **100 TB** for one training step, depending on
# how much we are willing to recompute. One H100 has 80 GB; an H200 has 141 GB.

# %%
for gpu, mem in (("H100 (80 GB)", 80e9), ("H200 (141 GB)", 141e9)):
    print(f"{gpu}: model states alone need {careful.total / mem:.0f} of them, "
          f"with all activations {(careful.total + full) / mem:.0f}")


# %% [markdown]
# Those GPU counts assume we can **split** every byte evenly across the GPUs. Whether and how
# we can is what the rest of this course is about.
#
# ## 3. A calculator
#
# Here is the whole estimate as one function. Change the numbers and rerun: how large a
# model fits on one GPU for training? What does a longer sequence cost? What does
# activation checkpointing buy?

# %%
def per_gpu(num_layers, hidden, heads, seq_len, micro_batch, world_size=1, strategy="ddp",
            vocab=50_000, checkpointing=False):
    """Bytes per GPU for one training step of a GPT-style model (mixed-precision Adam)."""
    params = 12 * num_layers * hidden**2 + vocab * hidden
    states = training_memory(params)
    tp = world_size if strategy == "tp" else 1
    if checkpointing:
        act = seq_len * micro_batch * hidden * num_layers * 2 // tp
    else:
        act = transformer_activation_bytes(seq_len, micro_batch, hidden, num_layers, heads,
                                           tensor_parallel=tp)
    largest_layer = 4 * hidden * hidden * 2          # the MLP's up-projection, fp16
    per_rank = sharded({**states.as_dict(), "activations": act}, world_size, strategy,
                       largest_layer_bytes=largest_layer)
    return params, per_rank


CONFIGS = {"1.3B": (24, 2048, 16), "13B": (40, 5120, 40), "175B": (96, 12288, 96),
           "1T": (128, 25600, 160)}
print(f"{'model':>6} {'params':>8} {'states':>9} {'act, b=1':>9} {'act, ckpt':>9}   (one GPU, seq 2048)")
for name, (layers, hidden, heads) in CONFIGS.items():
    params, full_b1 = per_gpu(layers, hidden, heads, 2048, 1)
    _, ckpt_b1 = per_gpu(layers, hidden, heads, 2048, 1, checkpointing=True)
    states = full_b1.total - full_b1.activations
    print(f"{name:>6} {params / 1e9:7.1f}B {human_bytes(states):>9} "
          f"{human_bytes(full_b1.activations):>9} {human_bytes(ckpt_b1.activations):>9}")

# %% [markdown]
# ## 4. Splitting the bytes: DDP, ZeRO, FSDP, TP and RTP
#
# With $N$ GPUs, each strategy decides which of the model states are **replicated** (every
# GPU holds all of it) and which are **sharded** (each GPU holds $1/N$):
#
# | strategy | parameters | gradients | optimizer | communication per step | notebook |
# |---|---|---|---|---|---|
# | **DDP** (data parallel) | replicated | replicated | replicated | all-reduce of the gradients | 02 |
# | **ZeRO-1** | replicated | replicated | sharded | reduce-scatter + all-gather | 09 (built by hand) |
# | **ZeRO-2** | replicated | sharded | sharded | reduce-scatter + all-gather | - |
# | **FSDP / ZeRO-3** | sharded, *gathered layer by layer* | sharded | sharded | all-gather the weights (twice), reduce-scatter the gradients | 09 (built by hand); PyTorch's FSDP2 measured in 06, 07 |
# | **TP** (Megatron) | sharded | sharded | sharded | all-reduce of *activations*, twice per layer | 03, 04 |
# | **RTP** (rotated TP) | sharded, *rotated around a ring* | sharded | sharded | each shard visits every GPU once | 05, 06 |
#
# DDP is the simplest and the fastest when the model fits, but look at its row: nothing is
# split, so adding GPUs never reduces the memory of one GPU. FSDP splits everything but
# must assemble one full layer at a time; RTP keeps only its own shard plus one in flight.
# The plot below shows the model states per GPU of the 175B model (activations aside)
# as $N$ grows.

# %%
params_175b, _ = per_gpu(96, 12288, 96, 2048, 1)
states_175b = training_memory(params_175b)
largest_layer = 4 * 12288 * 12288 * 2
ax = plots.memory_vs_world_size(states_175b, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                                strategies=("ddp", "zero1", "zero2", "fsdp", "tp", "rtp"),
                                largest_layer_bytes=largest_layer, gpu_bytes=80e9)
ax.set_title("175B parameters, mixed-precision Adam: model states per GPU")
plt.show()

# %% [markdown]
# Three things to read off the plot:
#
# * DDP is flat: with $N$ GPUs you train on $N$ times more data per step, but each GPU still
#   holds 2.8 TB.
# * ZeRO-1 and ZeRO-2 flatten out: the part they do not split (the 16-bit weights, and for
#   ZeRO-1 the gradients) stays on every GPU.
# * FSDP, TP and RTP fall like $1/N$. FSDP levels off slightly higher: it always holds one
#   complete layer while using it.
#
# Now the whole picture for one configuration, activations included: the 13B model on 8 GPUs,
# one sequence of 2048 tokens per GPU (for TP, the 8 GPUs share one sequence and each keeps
# its slice of the activations).

# %%
bars = {}
for strategy in ("ddp", "zero1", "zero2", "fsdp", "tp", "rtp"):
    _, per_rank = per_gpu(40, 5120, 40, 2048, 1, world_size=8, strategy=strategy)
    bars[strategy.upper()] = per_rank
plots.memory_bars(bars, title="13B model, 8 GPUs, one sequence per GPU: bytes per GPU")
plt.show()
for name, bd in bars.items():
    print(f"{name:6s} {human_bytes(bd.total):>9}  fits in 80 GB: {bd.total <= 80e9}")


# %% [markdown]
# ## 5. Your turn
#
# Two short questions, graded automatically. Write your answer in the cell marked
# `YOUR CODE HERE`; the cell after it runs a few visible tests, and more tests run when your
# work is graded.
#
# **Question 1.** Write `gpus_needed(num_params, gpu_bytes, strategy)`: the smallest number of
# GPUs of `gpu_bytes` each that can hold the **model states** of mixed-precision Adam training
# (16 bytes per parameter; ignore activations and communication buffers).
#
# * `strategy="fsdp"`: the states are split evenly over the GPUs.
# * `strategy="ddp"`: every GPU holds all of them. Return `1` if they fit on one GPU and
#   `None` if they do not (more GPUs do not help!).
#
# Hint: `training_memory(num_params).total` and `math.ceil`.

# %% deletable=false editable=true nbgrader={"grade": false, "grade_id": "q1_gpus_needed", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gpus_needed(num_params, gpu_bytes, strategy):
    ### BEGIN SOLUTION
    total = training_memory(num_params).total
    if strategy == "ddp":
        return 1 if total <= gpu_bytes else None
    if strategy == "fsdp":
        return math.ceil(total / gpu_bytes)
    raise ValueError(f"unknown strategy {strategy!r}")
    ### END SOLUTION


# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "q1_visible", "locked": true, "points": 1.0, "schema_version": 3, "solution": false, "task": false}
assert gpus_needed(1e9, 80e9, "fsdp") == 1, "16 GB fit on one 80 GB GPU"
assert gpus_needed(70e9, 80e9, "fsdp") == 14, "70e9 x 16 B = 1120 GB = 14 x 80 GB"
assert gpus_needed(70e9, 80e9, "ddp") is None, "DDP replicates: 1120 GB never fit on one GPU"
print("visible tests passed")

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "q1_hidden", "locked": true, "points": 1.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
assert gpus_needed(10**12, 80e9, "fsdp") == 200
assert gpus_needed(175e9, 141e9, "fsdp") == 20
assert gpus_needed(5e9, 80e9, "ddp") == 1          # exactly 80 GB: fits
assert gpus_needed(5e9, 80e9, "fsdp") == 1
assert gpus_needed(5e9 + 1, 80e9, "ddp") is None   # one parameter too many
assert gpus_needed(5e9 + 1, 80e9, "fsdp") == 2
### END HIDDEN TESTS

# %% [markdown]
# **Question 2.** A 13B-parameter model is trained with mixed-precision Adam under FSDP on
# 8 GPUs of 80 GB (`80e9` bytes). Ignoring FSDP's gathered-layer buffer, how many bytes per GPU
# remain for activations? Store the number in `left_for_activations`.
#
# Hint: `sharded(training_memory(...), world_size, "fsdp")` gives the per-GPU breakdown.

# %% deletable=false editable=true nbgrader={"grade": false, "grade_id": "q2_left_for_activations", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
left_for_activations = 80e9 - sharded(training_memory(13e9), 8, "fsdp").total
### END SOLUTION
print(human_bytes(left_for_activations))

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "q2_visible", "locked": true, "points": 1.0, "schema_version": 3, "solution": false, "task": false}
assert 0 < left_for_activations < 80e9, "a positive number of bytes, less than the whole GPU"
print("visible tests passed")

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "q2_hidden", "locked": true, "points": 1.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
assert abs(left_for_activations - 54e9) < 1e6, "80 GB - 16 B x 13e9 / 8 = 54 GB"
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# Every strategy in the table above is built from a handful of communication operations:
# broadcast, all-reduce, reduce-scatter, all-gather, send and receive. Notebook **01** starts
# processes, puts them in a group and shows each of these operations on tensors small enough
# to read. Notebook **02** then uses them to build data parallelism from scratch.
