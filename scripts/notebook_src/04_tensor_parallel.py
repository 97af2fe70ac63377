# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Tensor-parallel layers and a tensor-parallel transformer (exercise E3)
#
# In notebook 03 you built Megatron's communication functions: $f$ (`duplicate`), $g$
# (`all_reduce`), `all_gather` and `split`. Now you build the **layers** of a tensor-parallel
# transformer with them, and assemble a model that trains exactly like the serial one while every
# rank stores only about $1/N$ of it.
#
# Tensor parallelism in one sentence: **every rank feeds the same batch, and every weight matrix
# is cut into $N$ blocks, one per rank**. Each rank computes with its block, and a few collectives
# on *activations* stitch the results together.
#
# 1. `ColumnParallelLinear`: split a linear layer's outputs;
# 2. `RowParallelLinear`: split its inputs;
# 3. `ParallelMLP`: the column/row pair, one all-reduce each way;
# 4. `ParallelEmbedding`: split the embedding dimension;
# 5. `ParallelSelfAttention`: split the heads;
# 6. `parallelize_transformer`: the whole model; training it, and its memory;
# 7. grading.
#
# You will edit **`rtp_course/tensor_parallel.py`**; its docstrings repeat the essentials.
# Conventions: $N$ = `dist.get_world_size(group)`, $r$ = `dist.get_rank(group)` (the rank *within*
# the group), and "slice $r$" of a size $S$ is $[rS/N, (r+1)S/N)$. PyTorch's `nn.Linear` stores
# $W$ as `[out_features, in_features]` and computes $y = xW^\top + b$.

# %%
import matplotlib.pyplot as plt

from rtp_course.notebook import diagrams, plots
from rtp_course.checker import check
from rtp_course.notebook.demos import run_demo, show_source
from rtp_course.notebook.demos import tp as demo
from rtp_course.course.impl import default_impl

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E3.1 · `ColumnParallelLinear`: split the output features
#
# Cut $W$ `[out, in]` by **rows** (each row of $W$ makes one output feature): rank $r$ holds
# $W_r$ = rows $[r\cdot out/N, (r+1)\cdot out/N)$ and the same slice $b_r$ of the bias. Then
#
# $$y_r = x W_r^\top + b_r \quad [\dots, out/N]$$
#
# is exactly **slice $r$ of the serial output** $y$, computed with no communication at all. The
# layer can stop there (`gather_output=False`: the next layer works on slices, see section 3) or
# all-gather the slices into the full $y$ on every rank (`gather_output=True`).
#
# The communication is in the **backward** pass: $x$ feeds every rank's block, so
# $\partial L/\partial x = \sum_r \partial L/\partial y_r \, W_r$, a sum over ranks. That is what
# $f$ = `duplicate` does on the way back (notebook 03). Forget it, and every layer before this one
# gets a partial gradient.
#
# In the picture, for 4 ranks, colours are the rank that holds a block; grey is replicated.

# %%
diagrams.weight_split([("x [b, in]", 3, 8, None, None), ("W [out, in]", 12, 8, 0, None),
                       ("b [out]", 12, 1, 0, None), ("y = xWᵀ+b [b, out]", 3, 12, 1, None)],
                      4, title="ColumnParallelLinear: W split by rows, y by columns")
plt.show()

# %% [markdown]
# **Your task.** Implement `ColumnParallelLinear` in `rtp_course/tensor_parallel.py`:
#
# * `__init__(in_features, out_features, bias=True, gather_output=False, group=None, *, device, dtype)`:
#   check that $N$ divides `out_features` (else a `ValueError` naming the layer and the sizes, as
#   the docstring shows), create `weight` `[out/N, in]` and `bias` `[out/N]` as `nn.Parameter`s,
#   initialised like `nn.Linear`: uniform in $\pm 1/\sqrt{in}$ (the *serial* fan-in);
# * `from_tensors(weight, bias, ...)` copies rows $[r\cdot out/N, (r+1)\cdot out/N)$ of a serial
#   weight (under `torch.no_grad()`), `from_serial(linear, ...)` calls it with `linear.weight`
#   and `linear.bias`;
# * `forward(x)`: `comm.duplicate(x, group)`, `F.linear` with the shard, and
#   `comm.all_gather(y, dim=-1, group=group)` if `gather_output`.
#
# The demo shards a serial `nn.Linear(48, 96)` on 2 ranks, runs forward and backward with the same
# input on both, and compares with the serial layer: the output (or its slice), the input gradient
# and each shard's gradient against the matching slice of the serial gradient. It also lists the
# collectives each pass called.

# %%
for kind in ("column", "column_gather"):
    out = run_demo(demo.layer_demo, 2, kind, needs="ColumnParallelLinear (rtp_course/tensor_parallel.py)")
    if out is not None:
        print(f"--- {kind}\n{demo.describe(out)}\n")

# %% [markdown]
# Errors of $10^{-7}$ are float rounding (a sum done in another order). Forward: no communication
# (or one all-gather); backward: one all-reduce, from `duplicate`.
#
# Now the checker, on this task's checks only (`only=["E3.1"]`: every check of task E3.1, the
# layer with and without `gather_output` and the ValueError for sizes that do not divide), on 1
# to 4 ranks; section 6 runs them all. On a Slurm cluster, the same check runs on GPUs with
# `rtp_course.cluster.slurm.check_on_slurm(["tensor_parallel"], gpus=4)` (see the cell after section 6's
# check).

# %%
report = check("tensor_parallel", only=["E3.1"])

# %% [markdown]
# ## 2. Task E3.2 · `RowParallelLinear`: split the input features
#
# Cut $W$ by **columns** instead: rank $r$ holds $W_r$ = columns $[r\cdot in/N, (r+1)\cdot in/N)$,
# `[out, in/N]`, and needs only slice $r$ of the input, $x_r$. Since a matrix product is a sum
# over the inner dimension,
#
# $$x W^\top = \sum_{r=0}^{N-1} x_r W_r^\top ,$$
#
# each rank computes a full-size **partial sum** $x_r W_r^\top$ `[..., out]`, and one all-reduce
# ($g$ = `all_reduce`) adds them up. Its backward is the identity: $\partial L/\partial y$ is the
# same on every rank.
#
# **The bias is added once, after the reduction.** Added before, it would be summed $N$ times. It
# is **replicated**: every rank holds all of it, and, because every rank sees the same
# $\partial L/\partial y$, every rank computes the same full gradient for it, with no extra
# communication.
#
# Where does $x_r$ come from? Usually from a column layer that did not gather (section 3):
# `input_is_parallel=True`, $x$ *is* already $x_r$. With `input_is_parallel=False` the layer
# takes the full $x$ and keeps its slice with `comm.split(x, dim=-1)`, whose backward all-gathers
# $\partial L/\partial x_r$ into the full gradient.

# %%
diagrams.weight_split([("x [b, in]", 3, 12, 1, None), ("W [out, in]", 8, 12, 1, None),
                       ("b [out]", 8, 1, None, None), ("y = Σ xᵣWᵣᵀ + b", 3, 8, None, None)],
                      4, title="RowParallelLinear: W split by columns, partial sums all-reduced")
plt.show()

# %% [markdown]
# **Your task.** Implement `RowParallelLinear` (`__init__`, `from_tensors`, `from_serial`,
# `forward`): `weight` `[out, in/N]`, a replicated `bias` `[out]` (a fresh layer starts it at zero,
# equal on every rank), `F.linear` *without* the bias, `comm.all_reduce`, then `+ bias`.
# The demo uses `input_is_parallel=False`: every rank gets the full input, like the serial layer.

# %%
out = run_demo(demo.layer_demo, 2, "row", needs="RowParallelLinear (rtp_course/tensor_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %%
report = check("tensor_parallel", only=["E3.2"])

# %% [markdown]
# ## 3. Task E3.3 · `ParallelMLP`: the column/row pair
#
# A transformer's MLP is `fc2(act(fc1(x)))` with a hidden width $h$ (4 times the model width).
# Megatron's observation (notebook 03, section 1): make `fc1` column parallel **without gathering**
# and `fc2` row parallel **with its input already parallel**. The hidden activation is then split
# by columns, exactly the slice $x_r$ that `fc2` wants; the activation acts element by element,
# so it works on the slice. **Nothing crosses ranks between the two layers**: one all-reduce in
# forward (`fc2`'s $g$) and one in backward (`fc1`'s $f$), both of activation size $[b, s, d]$.

# %%
diagrams.weight_split([("x", 3, 6, None, None), ("fc1.weight [h, d]", 12, 6, 0, None),
                       ("act(fc1(x)) [b, h]", 3, 12, 1, None), ("fc2.weight [d, h]", 6, 12, 1, None),
                       ("y", 3, 6, None, None)],
                      4, title="ParallelMLP: column then row, the hidden activation stays split")
plt.show()

# %% [markdown]
# **Your task.** Implement `ParallelMLP`: `__init__` builds `fc1 = ColumnParallelLinear(in, hidden,
# gather_output=False)`, `act` (default `nn.GELU()`) and `fc2 = RowParallelLinear(hidden, out,
# input_is_parallel=True)`; `from_linears(fc1, fc2, activation)` shards two serial `nn.Linear`s;
# `from_serial(ff)` shards the course's `FeedForward`; `forward` is `fc2(act(fc1(x)))`.
# Watch the communication lines: one all-reduce each way, nothing else.

# %%
out = run_demo(demo.layer_demo, 2, "mlp", needs="ParallelMLP (rtp_course/tensor_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %%
report = check("tensor_parallel", only=["E3.3"])

# %% [markdown]
# `ParallelMLP_subgroup` runs your MLP on a group of 2 of the 3 ranks, while the third does
# something else: if a collective forgets `group=`, it waits for a rank that never joins.
#
# ## 4. Task E3.4 · `ParallelEmbedding`: split the embedding dimension
#
# An embedding table `[num, dim]` maps a token id to a row. Cut the table by **columns**: rank $r$
# holds `[num, dim/N]`, looks up the same ids in its slice, and gets slice $r$ of every embedding
# vector; one all-gather along the last dimension rebuilds the full vectors on every rank. In
# backward, all-gather's backward keeps slice $r$ of the gradient: no communication. (Megatron
# itself cuts the *vocabulary* rows instead, which suits huge vocabularies: each rank looks up the
# ids it owns, writes zeros for the others, and an all-reduce sums the results. Both are exact.)

# %%
diagrams.weight_split([("table [num, dim]", 12, 8, 1, None), ("lookup [b, s, dim]", 3, 8, 1, None),
                       ("all-gathered", 3, 8, None, None)],
                      4, title="ParallelEmbedding: the table split by columns")
plt.show()

# %% [markdown]
# **Your task.** Implement `ParallelEmbedding` (`__init__` with a $N(0, 1)$ shard like
# `nn.Embedding`, `from_serial` keeping `padding_idx`, `forward` = `F.embedding` with the shard
# then `comm.all_gather(e, dim=-1)`).

# %%
out = run_demo(demo.layer_demo, 2, "embedding", needs="ParallelEmbedding (rtp_course/tensor_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %%
report = check("tensor_parallel", only=["E3.4"])

# %% [markdown]
# ## 5. Task E3.5 · `ParallelSelfAttention`: split the heads
#
# Multi-head attention with $H$ heads of $d = E/H$ features computes each head independently:
#
# $$\text{head}_h = \mathrm{softmax}\!\Big(\frac{q_h k_h^\top}{\sqrt d}\Big) v_h, \qquad
#   y = [\text{head}_0, \dots, \text{head}_{H-1}]\, W_o^\top + b_o .$$
#
# Give rank $r$ the heads $[rH/N, (r+1)H/N)$. Their $q$, $k$, $v$ come from rows $[rE/N, (r+1)E/N)$
# of $W_q$, $W_k$, $W_v$ (head $h$ is rows $[hd, (h+1)d)$): three **column-parallel** projections
# sharing one `duplicate`. The output projection needs the concatenated heads, which are split by
# columns across ranks: a **row-parallel** $W_o$ (columns $[rE/N, (r+1)E/N)$), one all-reduce,
# then $b_o$ once. The attention itself (scores, softmax, causal mask) is local: heads never mix.
#
# Two classic slips: scaling the scores by $\sqrt{E/N}$, the width of the *local* block, instead of
# $\sqrt d$, the per-head dimension; and giving rank $r$ the heads of another rank.

# %%
diagrams.weight_split([("Wq", 12, 12, 0, 6), ("Wk", 12, 12, 0, 6), ("Wv", 12, 12, 0, 6),
                       ("Wo", 12, 12, 1, 6), ("bo", 12, 1, None, None)],
                      2, title="ParallelSelfAttention, 6 heads on 2 ranks: 3 heads each")
plt.show()

# %% [markdown]
# **Your task.** Implement `ParallelSelfAttention`. `from_serial(module)` accepts both the
# course's `SelfAttention` (BERT) and PyTorch's `nn.MultiheadAttention` (the transformer LM, whose
# $q$, $k$, $v$ weights are packed in one `in_proj_weight`): `attention_weights(module)` from
# `rtp_course.models.layers` returns the separate tensors for both. For the computation,
# `attention_forward(x, weights)` works on any number of heads: give it an `AttentionWeights`
# holding your shards (`num_heads` = $H/N$, `wo` your $W_o$ columns, `bo=None`) and it returns
# your heads' partial sum. Called like `nn.MultiheadAttention` (`tuple_output=True`), return
# `(y, None)`.

# %%
out = run_demo(demo.layer_demo, 2, "attention", needs="ParallelSelfAttention (rtp_course/tensor_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %%
report = check("tensor_parallel", only=["E3.5"])

# %% [markdown]
# ## 6. Task E3.6 · The whole model: `parallelize_transformer`
#
# A transformer block is attention then MLP, each a column/row pair: **two all-reduces in
# forward and two in backward per block**, each the size of the activations $[b, s, E]$. Replace
# the layers of a serial model in place, each with its `from_serial`:
#
# * `BertClassifier`: `tok_emb`, `pos_emb` → `ParallelEmbedding`; each block's `attn` →
#   `ParallelSelfAttention`, `mlp` → `ParallelMLP`;
# * `TransformerLM`: `embedding` → `ParallelEmbedding`; each layer's `self_attn` →
#   `ParallelSelfAttention`; `linear1` / `linear2` → column (no gather) / row (input parallel),
#   kept inline because `DecoderLayer` calls them directly with a ReLU in between.
#
# LayerNorms, the classifier `head` and the LM `decoder` stay serial and **replicated**. Their
# inputs are replicated (every rank computes the same full activations after each all-reduce), so
# every rank computes the same gradients for them and they stay equal after every optimizer step,
# with no communication. Every rank must start from the same serial model (same seed) and feed the
# same batches. Anything else raises a `TypeError`.

# %%
report = check("tensor_parallel")          # every check, on 1, 2, 3 and 4 ranks

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["tensor_parallel"], gpus=GPUS)

# %% [markdown]
# ### Training the tensor-parallel classifier
#
# `demo.train` trains the course's BERT-like classifier (2 blocks, width 48, 12 heads) with Adam on
# synthetic sequences whose class is readable from their tokens (`rtp_course.training.data.classification_tokens`).
# With `parallel=True` it calls your `parallelize_transformer` and runs on 2 ranks, each feeding the
# same batch; the serial run trains the unchanged model in this process. Same seed, same batches.

# %%
show_source(demo.train)

# %%
STEPS = 30
parallel = run_demo(demo.train, 2, STEPS, needs="parallelize_transformer (rtp_course/tensor_parallel.py)")
serial = demo.train(0, 1, STEPS, parallel=False)
tp_losses = None
if parallel is not None:
    tp_losses = parallel[0]["losses"]
    diffs = [abs(a - b) for a, b in zip(tp_losses, serial["losses"])]
    print(f"loss difference at step 1: {diffs[0]:.1e}; largest over {STEPS} steps: {max(diffs):.1e}")
    print("both ranks report the same losses:", parallel[0]["losses"] == parallel[1]["losses"])
plots.loss_curves({"serial": serial["losses"], "tensor parallel, 2 ranks": tp_losses},
                  title="BertClassifier: serial and tensor-parallel training",
                  styles={"tensor parallel, 2 ranks": {"linestyle": "--", "linewidth": 2.5}})
plt.show()

# %% [markdown]
# The curves coincide. As in notebook 02, the values agree to rounding, not to the last bit: the
# all-reduces add partial sums in another order than one big matrix product does.
#
# ### Memory: what each rank stores
#
# How much of the model does each rank hold? `demo.param_bytes` builds a wider classifier (width
# 96, vocabulary 1200) and parallelizes it on groups of 1, 2, 3 and 4 ranks, counting each rank's
# parameter bytes, split into sharded ones and replicated ones.

# %%
out = run_demo(demo.param_bytes, 4, needs="parallelize_transformer (rtp_course/tensor_parallel.py)")
if out is not None:
    sizes = [k for k in out[0] if k != "serial"]
    full = out[0]["serial"]
    sharded = [out[0][k]["sharded"] for k in sizes]
    replicated = [out[0][k]["replicated"] for k in sizes]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(sizes, sharded, label="sharded parameters (1/N each)", color=plots.RANK_COLORS[0])
    ax.bar(sizes, replicated, bottom=sharded, label="replicated (LayerNorms, biases, head)",
           color=plots.RANK_COLORS[1])
    ax.plot(sizes, [full / n for n in sizes], "k--", marker="o", label="serial / N")
    ax.set_xticks(sizes)
    ax.set_xlabel("tensor-parallel ranks N")
    ax.set_ylabel("parameter bytes per rank")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v / 1e6:.1f} MB"))
    ax.set_title("per-rank parameter memory of the TP classifier")
    ax.legend()
    plt.show()
    for n, s, r in zip(sizes, sharded, replicated):
        print(f"N={n}: {(s + r) / 1e6:.3f} MB per rank = {(s + r) / full:.3f} of the serial "
              f"{full / 1e6:.3f} MB ({r / 1e3:.1f} kB replicated)")

# %% [markdown]
# Per rank, parameters (and with them gradients and Adam's two states) fall as $1/N$; only the
# small replicated part stays. Activations shrink too, in part: inside attention and the MLP each
# rank keeps only its heads and its hidden slice, while the LayerNorm inputs and residuals stay
# whole (notebook 00's `transformer_activation_bytes(..., tensor_parallel=N)` counts them).
#
# The price is communication: two all-reduces of $b \cdot s \cdot E$ values per block in forward
# and two in backward, on the critical path (nothing else can run until the sum arrives). That is
# why tensor parallelism lives **inside a node**, on NVLink, usually with $N \le 8$, and why it is
# combined with data parallelism across nodes (notebook 08). Notebooks 05 and 06 take another
# road: move the *weights* instead of the activations, with each rank feeding its own batch.
#
# ## 7. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/tensor_parallel.py` and awards up to 20 points, in proportion to the checks that
# pass. In your copy the cell is empty: the grader puts the tests back. Use the check cell of
# section 6 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e3_tensor_parallel", "locked": true, "points": 20.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("tensor_parallel")
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# Tensor parallelism moves activations at every layer and needs every rank to see the same batch.
# Notebook **05** builds the primitive of another way to split a model: a **rotation** that passes
# weight shards around a ring of ranks while they compute.
