# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · The communication of tensor parallelism: $f$ and $g$ (exercise E2)
#
# Data parallelism copies the model. **Tensor parallelism** (TP) splits each layer's *weights*
# across the ranks, so that a model too large for one GPU can still run: every rank holds $1/N$ of
# every weight matrix and does $1/N$ of every matrix multiplication.
#
# Splitting the weights is the easy part. The subtle part is making **autograd** do the right
# communication in both directions. Megatron-LM (Shoeybi et al., 2019) showed that two tiny
# functions suffice for a transformer, called $f$ and $g$. In this notebook you
#
# 1. see where the communication comes from in a split MLP;
# 2. **implement** $f$ (`Duplication`) and $g$ (`AllReduce`), deriving their backward passes;
# 3. **implement** their cousins `AllGather` and `Split`;
# 4. check your work;
# 5. build a two-layer MLP split over 2 ranks by hand and reproduce the serial result exactly;
# 6. get graded.
#
# You will edit **`rtp_course/comm.py`**.

# %%
import matplotlib.pyplot as plt
import torch

from rtp_course.notebook import diagrams
from rtp_course.notebook.demos import run_demo, show_source
from rtp_course.notebook.demos import tp_comm as demo
from rtp_course.course.impl import default_impl

print("exercise code under test:", default_impl())


# %% [markdown]
# ## 1. Splitting an MLP: where the communication comes from
#
# The transformer's MLP block computes, for an input $X$ of shape $[b, d]$,
#
# $$Z = \mathrm{GeLU}(X A)\, B, \qquad A: [d, h], \quad B: [h, d].$$
#
# **Split $A$ by columns** over $N$ ranks: $A = [A_0, A_1, \dots, A_{N-1}]$, each $[d, h/N]$.
# Rank $r$ computes $Y_r = \mathrm{GeLU}(X A_r)$, its $h/N$ hidden units. GeLU acts element by
# element, so no communication is needed: $[Y_0, \dots, Y_{N-1}] = \mathrm{GeLU}(XA)$.
#
# **Split $B$ by rows** the same way: $B_r$ is $[h/N, d]$. Then
#
# $$Z = [Y_0, \dots, Y_{N-1}] \begin{bmatrix} B_0 \\ \vdots \\ B_{N-1}\end{bmatrix} = \sum_{r} Y_r B_r .$$
#
# Rank $r$ computes the **partial sum** $Z_r = Y_r B_r$, and one **all-reduce** makes $Z$ on every
# rank. (In PyTorch, `nn.Linear` stores its weight transposed, $[\text{out}, \text{in}]$, so
# "split $A$ by columns" means splitting `linear1.weight` along dim 0, the output features. That
# is why the first layer is called *column parallel* and the second *row parallel*.)
#
# So the forward pass is
#
# $$X \xrightarrow{\;f\;} X \text{ on every rank} \longrightarrow Y_r = \mathrm{GeLU}(XA_r)
#   \longrightarrow Z_r = Y_r B_r \xrightarrow{\;g\;} Z = \sum_r Z_r$$
#
# where $g$ is an all-reduce and $f$, in the forward direction, does nothing at all: $X$ is already
# the same on every rank. Then why do we need $f$? Because of the **backward** pass.

# %% [markdown]
# ## 2. Task E2.1 · $f$ (`Duplication`) and $g$ (`AllReduce`)
#
# The split MLP with its two communication points, for 2 ranks: $f$ where the replicated input
# enters the split part, $g$ where the partial sums leave it.

# %%
diagrams.tp_mlp(2)
plt.show()

# %% [markdown]
# ### The backward of $g$: the identity
#
# $g$ computes $Z = \sum_r Z_r$. The derivative of a sum with respect to one of its terms is the
# identity, $\partial Z / \partial Z_r = I$, so
#
# $$\frac{\partial L}{\partial Z_r} = \frac{\partial L}{\partial Z}.$$
#
# And every rank already holds $\partial L / \partial Z$: $Z$ is replicated and everything after it
# runs identically on every rank, so the gradient arriving at $g$ is the same everywhere.
# **No communication.** (A common mistake is to all-reduce here too, "because the forward did":
# every gradient upstream then comes out $N$ times too large.)
#
# ### The backward of $f$: an all-reduce
#
# $X$ feeds *every* rank's branch: rank $r$ uses it in $XA_r$. The loss therefore depends on $X$
# through $N$ paths, and the chain rule **adds** their contributions:
#
# $$\frac{\partial L}{\partial X} = \sum_{r=0}^{N-1} \frac{\partial L}{\partial Y_r}\frac{\partial Y_r}{\partial X}
#   = \sum_{r=0}^{N-1} \underbrace{\Big(\frac{\partial L}{\partial (XA_r)}\Big) A_r^\top}_{\text{computed on rank } r} .$$
#
# Each rank's backward computes only its own term. An **all-reduce** of the gradient adds them,
# so that every rank holds the true $\partial L / \partial X$ for the layers before.
#
# $f$ and $g$ are **conjugate**: one is the identity forward and an all-reduce backward, the other
# the reverse.
#
# | | forward | backward |
# |---|---|---|
# | $f$ = `Duplication` | $y = x$ | $\partial x = \sum_r \partial y_r$ (**all-reduce**) |
# | $g$ = `AllReduce` | $y = \sum_r x_r$ (**all-reduce**) | $\partial x_r = \partial y$ |
#
# ### Your task
#
# In **`rtp_course/comm.py`**, implement `Duplication` and `AllReduce` as
# `torch.autograd.Function`s (the docstrings give the signatures). Four rules the checker enforces:
#
# * **Never modify the caller's tensor.** `dist.all_reduce` works in place: reduce a *copy*
#   (`x.clone()`), in forward and in backward (the incoming gradient may be used elsewhere).
# * **Use `group`** for every collective; save it on `ctx` in forward for backward to use.
# * `backward` returns one value per input of `forward`: the gradient of `x`, then `None` for `group`.
# * **Make buffers on the device of the data** (`torch.empty_like(x)`, or `device=x.device`): on a
#   GPU run a tensor made without a device is in CPU memory, and NCCL refuses it.
#
# The functions `duplicate(x, group)` and `all_reduce(x, group)` at the bottom of the file are the
# forms the rest of the course calls. The next cells run each on 2 ranks and show, for each rank,
# the input $x$, the output $y$, the gradient that arrives at the output $\partial L/\partial y$,
# and the gradient your backward returns, $\partial L/\partial x$.

# %%
def show(name):
    out = run_demo(demo.one_op, 2, name, needs=f"comm.{name} (rtp_course/comm.py)")
    if out is not None:
        for r, res in enumerate(out):
            print(f"rank {r}:  " + "   ".join(f"{k} = {v.tolist()}" for k, v in res.items()))


show("duplicate")

# %% [markdown]
# Expected: $y = x$ on both ranks. The two ranks' branches weigh $y$ by 1 and 2, so the true
# gradient of the shared $x$ is $1 + 2 = 3$: `dL/dx = [3.0, 3.0, 3.0]` **on both ranks**.

# %%
show("all_reduce")

# %% [markdown]
# Expected: the partial inputs $[1, 2, 3]$ and $[2, 4, 6]$ sum to $y = [3, 6, 9]$ on both ranks,
# and the gradient passes through unchanged: `dL/dx = [1.0, 10.0, 100.0]` on both ranks.
#
# ## 3. Task E2.2 · `AllGather` and `Split`
#
# Sometimes a tensor is split along a dimension and a layer needs all of it, or the reverse. On
# 2 ranks, along the last dimension: `split` keeps rank $r$'s block of a replicated tensor (no
# communication), `all_gather` puts every rank's block back together on every rank.

# %%
diagrams.weight_split([("x, replicated", 3, 8, None, None), ("split(x)", 3, 8, 1, None),
                       ("all_gather(split(x))", 3, 8, None, None)], 2, gap=2.5)
plt.show()

# %% [markdown]
# With the ranks' slices $x_0, \dots, x_{N-1}$ along dimension `dim`:
#
# **`AllGather`**: forward $y = \mathrm{cat}(x_0, \dots, x_{N-1})$ along `dim`, replicated. Each
# $x_r$ appears in $y$ only as slice $r$, so $\partial L/\partial x_r$ is **slice $r$ of**
# $\partial L/\partial y$, and $\partial L/\partial y$ is the same on every rank ($y$ is
# replicated): each rank takes its slice, no communication.
#
# **`Split`**: forward keeps slice $r$ of a replicated $x$ (no communication). Backward: $x$ reaches
# the loss through every rank's slice, one slice per rank, so $\partial L/\partial x$ is the
# concatenation of all ranks' $\partial L/\partial y_r$: an **all-gather**.
#
# They are conjugate too, just as $f$ and $g$:
#
# | | forward | backward |
# |---|---|---|
# | `AllGather` | $y = \mathrm{cat}_r\, x_r$ (**all-gather**) | $\partial x_r = (\partial y)_{\text{slice } r}$ |
# | `Split` | $y_r = x_{\text{slice } r}$ | $\partial x = \mathrm{cat}_r\, \partial y_r$ (**all-gather**) |
#
# "Slice $r$" of a dimension of size $S$ is $[rS/N, (r+1)S/N)$, with $r$ the rank **within the
# group**. `Split` must raise a `ValueError` naming the sizes when $S$ is not divisible by $N$.
# Hints: `dist.all_gather(list_of_buffers, tensor, group=group)` fills a list of $N$ tensors;
# `torch.cat`, `tensor.narrow(dim, start, length)`, and `.contiguous()` (collectives need contiguous
# tensors, and a gradient you return should not be a view of a bigger one).
#
# Uses: `AllGather` after a column-parallel layer when the next operation needs the whole output
# (the vocabulary logits of a language model); `Split` before a row-parallel layer whose input is
# replicated. Notebook 04 uses both.

# %%
show("all_gather")

# %% [markdown]
# Expected: $y = [11, 12, 21, 22]$ on both ranks; with $\partial L/\partial y = [1, 2, 3, 4]$,
# rank 0 gets `dL/dx = [1.0, 2.0]` and rank 1 gets `[3.0, 4.0]`.

# %%
show("split")

# %% [markdown]
# Expected: from $x = [1, 2, 3, 4]$, rank 0 keeps $[1, 2]$ and rank 1 keeps $[3, 4]$. Their branches
# weigh $y$ by 1 and 2, so **both** ranks get `dL/dx = [1.0, 1.0, 2.0, 2.0]`.
#
# ## 4. Check your work
#
# The checker runs each function on 1 to 4 ranks, forward and backward, on random tensors and on
# sub-groups, and compares with the serial computation. It also records the communication you
# perform: `Duplication` must do nothing in forward and exactly one all-reduce in backward, and so
# on. It checks that your functions leave their inputs untouched.

# %%
from rtp_course.checker import check
from rtp_course.notebook import where_checks_run

print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("comm")          # world sizes 1, 2, 3 and 4

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5):

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import submit_check
    job = submit_check(["comm"], gpus=GPUS)
    job.wait()
    print(job.summary())

# %% [markdown]
# ## 5. A tensor-parallel MLP, by hand
#
# Now put $f$ and $g$ to work. `demo.tp_mlp` builds the MLP of section 1 with $d = 8$, $h = 16$ on
# $N$ ranks: rank $r$ keeps rows $[rh/N, (r+1)h/N)$ of the first weight (and of its bias) and the
# same columns of the second weight. The second bias is added **once**, after $g$ (added before,
# it would be summed $N$ times).

# %%
show_source(demo.tp_mlp)

# %% [markdown]
# We run it on 2 ranks and compare every rank's output and gradients with the serial MLP,
# computed here in the notebook (`demo.serial_mlp`). Each rank's weight gradients are compared with
# the matching slice of the serial gradients.

# %%
reference = demo.serial_mlp()
out = run_demo(demo.tp_mlp, 2, needs="comm.duplicate and comm.all_reduce (rtp_course/comm.py)")


def error_table(results):
    rows = demo.compare_mlp(results, reference)
    names = list(rows[0])
    print("largest |parallel - serial| per rank and tensor")
    print("rank " + "".join(f"{n:>10}" for n in names))
    for rank, errs in rows.items():
        print(f"{rank:4d} " + "".join(f"{errs[n]:10.1e}" for n in names))


if out is not None:
    error_table(out)

# %% [markdown]
# Everything agrees to float precision: the output `y`, the input gradient `dx`, and each rank's
# slices of the weight gradients. Two ranks, each holding half of the weights, computed the same
# function and the same gradients as one process.
#
# Count the communication: **one all-reduce in forward** ($g$) and **one in backward** ($f$), each
# of size $b \times d$, the activations, not the weights. Megatron's insight is that this
# column-then-row pairing needs no communication *between* the two layers.
#
# What if we forget $f$? The forward pass is unchanged, so the output is still right. Watch `dx`:

# %%
out = run_demo(demo.tp_mlp, 2, 0, False, needs="comm.all_reduce (rtp_course/comm.py)")
if out is not None:
    error_table(out)

# %% [markdown]
# Without $f$, each rank's `dx` holds only its own branch's contribution. The weight gradients of
# *this* MLP are still right, so the bug hides; but in a transformer, `dx` flows into the previous
# layers, and all their gradients are silently wrong. This is exactly the kind of bug the checker's
# gradient comparisons are there to catch.
#
# ## 6. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/comm.py` and awards up to 10 points, in proportion to the checks that pass. In
# your copy the cell is empty: the grader puts the tests back. Use the check cell of section 4 to
# know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e2_comm", "locked": true, "points": 10.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("comm")
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# With $f$, $g$, `AllGather` and `Split` you have all the communication Megatron's tensor
# parallelism needs. In notebook **04** you build the layers themselves (column- and row-parallel
# linear layers, a parallel embedding, parallel self-attention) and turn the course's transformer
# into a tensor-parallel one.
