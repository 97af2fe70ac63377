# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 12 · Mixture of experts: expert parallelism over all-to-all (exercise E10)
#
# A mixture-of-experts (MoE) layer replaces one MLP by $E$ of them, the **experts**, and a small
# **router** that sends each token to $k$ of them ($k = 1$ or $2$). The model has $E$ times the
# MLP's parameters, but each token pays for $k$ MLPs only. Switch Transformer, GShard, Mixtral and
# DeepSeek are built this way.
#
# **Expert parallelism** (EP) spreads the experts over the $N$ ranks of a group: rank $r$ holds
# experts $[rE/N, (r+1)E/N)$. Each rank has its own tokens (as in data parallelism), so tokens
# must travel to the rank of their expert and their results must travel back: two
# **all-to-alls** per layer in forward (dispatch, combine) and two in backward. Parameters per
# rank: the router plus $E/N$ experts; traffic per rank: the tokens it sends away and receives.
#
# You will edit **`rtp_course/experts.py`**: an all-to-all as an autograd function (E10.1), the
# expert-parallel layer (E10.2) and its training with data parallelism (E10.3).

# %%
import matplotlib.pyplot as plt

from rtp_course.checker import check
from rtp_course.course.impl import default_impl
from rtp_course.notebook import where_checks_run
from rtp_course.notebook.demos import experts as demo
from rtp_course.notebook.demos import run_demo

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. The serial layer (given): routing, capacity, dropped tokens
#
# `rtp_course/models/moe.py` holds the layer every check compares with. For $T$ tokens
# $x: [T, d]$:
#
# $$p = \mathrm{softmax}(x W_r^\top + b_r) \in [T, E], \qquad
#   (\text{gate}, \text{expert}) = \mathrm{topk}(p, k), \qquad
#   y_t = \sum_{j \text{ kept}} \text{gate}_{t,j}\, \mathrm{MLP}_{\text{expert}_{t,j}}(x_t).$$
#
# **Capacity.** An expert takes at most $C = \lceil \text{capacity\_factor} \cdot T k / E
# \rceil$ tokens, so that work per expert is bounded (on a GPU, buffers have fixed sizes). Its
# queue takes all first choices in token order, then all second choices; a choice past slot $C$
# is **dropped**: it adds nothing (in a model the residual connection carries the token on).
# Each rank's tokens are one routing group: $C$ counts the rank's own $T$.
#
# **Load balancing.** Left alone the router favours a few experts. The auxiliary loss
# $\text{aux} = E \sum_e f_e P_e$ ($f_e$: share of the choices for $e$; $P_e$: mean router
# probability of $e$) is smallest when both are uniform; training adds a small multiple of it.
#
# The cell routes 4 ranks' 32 tokens each through a layer with 8 experts, $k = 2$, capacity factor
# 1.0: solid bars are kept choices, hatched ones dropped, the dashed line is $C$.

# %%
moe = demo.make_moe(experts=8, top_k=2, capacity_factor=1.0)
table = demo.routing_table(moe)
demo.plot_routing(table, "k = 2, capacity factor 1.0: choices per expert on each rank")
plt.show()
print("dropped choices per rank:", (table["chosen"] - table["kept"]).sum(1).tolist(),
      "of", int(table["chosen"][0].sum()))

# %% [markdown]
# With a larger capacity factor fewer choices are dropped, at the price of bigger buffers:

# %%
for factor in (0.5, 1.0, 1.5, 2.0):
    t = demo.routing_table(demo.make_moe(experts=8, top_k=2, capacity_factor=factor))
    print(f"capacity factor {factor}: C = {t['capacity']:2d}, dropped "
          f"{int((t['chosen'] - t['kept']).sum())} of {int(t['chosen'].sum())} choices")

# %% [markdown]
# ## 2. Task E10.1 · All-to-all as an autograd function: `AllToAll`, `all_to_all`
#
# In an all-to-all every rank sends a piece to every rank (itself included) and receives one from
# each. The pieces may differ in size: rank $r$ sends `input_splits[q]` rows to rank $q$ (its rows
# in rank order) and receives `output_splits[q]` rows from rank $q$ (placed in rank order). Both
# sides must agree: rank $q$'s `output_splits[p]` is rank $p$'s `input_splits[q]`.
#
# ```
#            to rank 0   to rank 1   to rank 2              arrives at rank 1:
# rank 0:    [a a]       [b]         []                      [b] [d d] [g]
# rank 1:    [c]         [d d]       [e e e]          ->     from 0, from 1, from 2
# rank 2:    [f]         [g]         [h h]
# ```
#
# torch's `dist.all_to_all_single(out, x, output_split_sizes, input_split_sizes, group=...)`
# does it; `out` is allocated by you with `sum(output_splits)` rows. Its **backward** is the
# reverse all-to-all: the gradient of each received row goes back to its sender, so the splits
# swap. Keep them on `ctx` (two calls may run before their backwards). NCCL wants contiguous
# tensors on the data's device and the same calls on every rank, also on a rank with no row to
# send or receive.
#
# The cell runs it on 3 ranks: rank $r$ sends $q+1$ rows of value $10r + q$ to rank $q$, and the
# backward sends rows of $100 + $ the receiver's rank back:

# %%
out = run_demo(demo.all_to_all_demo, 3, needs="AllToAll (rtp_course/experts.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: sent {res['sent']}\n        received {res['received']}\n"
              f"        gradient back {res['grad']}")

# %% [markdown]
# Expected: rank $r$ receives $r+1$ rows from each rank $q$, of value $10q + r$; the gradient of
# the rows it sent to rank $q$ is $100 + q$.
#
# ## 3. Task E10.2 · The expert-parallel layer: `exchange_splits`, `ExpertParallelMoE`
#
# A forward on rank $r$ (the stub's docstring has the steps in full):
#
# 1. route its tokens with the serial layer's `route` and `capacity` (its own $T$), keep the kept
#    choices, **sort them by expert**: expert $e$ lives on rank $e \div (E/N)$, so sorting by
#    expert groups them by destination rank;
# 2. `counts[q, i]` = rows for rank $q$'s $i$-th expert; **exchange the split sizes**
#    (`exchange_splits`, one all-to-all of the counts): now rank $r$ knows how many rows arrive
#    from each rank for each of its experts;
# 3. **dispatch**: `all_to_all(x[kept tokens], counts.sum(1), received.sum(1))`;
# 4. run each local expert on its rows (every expert, even on an empty batch);
# 5. **combine**: `all_to_all` back with the splits swapped, then `y.index_add(0, token, gate *
#    row)`.
#
# Autograd does the backward: the combine's and dispatch's reverse all-to-alls bring every
# rank's output gradient to the experts and the input gradients back. The router's gradient stays
# this rank's own; expert $e$'s gradient sums every rank's tokens.
#
# The cell runs your layer on 4 ranks ($E = 8$: 2 experts each, $k = 2$, capacity factor 1.0)
# against the serial layer on each rank's tokens, and draws what `exchange_splits` told each rank
# (rows it receives, per sending rank and own expert):

# %%
out = run_demo(demo.ep_demo, 4, needs="ExpertParallelMoE (rtp_course/experts.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: output error {res['output error']:.1e}, aux {res['aux error']:.1e}, "
              f"input grad {res['input grad error']:.1e}, router grad {res['router grad error']:.1e}; "
              f"{res['dropped']} of {res['choices']} choices dropped")
    if all(res["received"] is not None for res in out):
        demo.plot_dispatch([res["received"] for res in out], 2)
        plt.show()

# %% [markdown]
# Expected: errors around $10^{-16}$ (float64). The numbers in the pictures are the splits: rank
# $q$'s row of rank $r$'s picture is how many rows $q$ sends $r$, per expert.
#
# ## 4. Task E10.3 · Training, with data parallelism: `sync_gradients`, `train_step`
#
# Training minimises the mean of the $W$ ranks' losses. After backward:
#
# * the **router** is replicated on every rank but each saw other tokens: average its gradient over
#   all $W$ ranks (all-reduce over the EP group, then over the DP group; divide by $W$);
# * **expert** $e$'s gradient already sums the tokens of its EP group (the all-to-alls brought them):
#   sum it over its **replicas** (the DP group: the ranks holding the same experts) and divide by
#   $W$. Never over the EP group: its ranks hold other experts.
#
# With $W = 4$ and EP groups of 2 (the layout of notebook 08: rank $= d \cdot N + t$): EP groups
# $\{0,1\}, \{2,3\}$, DP groups $\{0,2\}, \{1,3\}$. The cell trains 3 SGD steps that way against
# serial training:

# %%
out = run_demo(demo.train_demo, 4, 2, 3, needs="sync_gradients and train_step (rtp_course/experts.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: losses {[round(v, 4) for v in res['losses']]}, weights against serial: "
              f"largest difference {res['weight difference']:.1e}")

# %% [markdown]
# ## 5. Check your work
#
# The checker runs your module on 1 to 4 ranks (gloo on CPU, with NCCL's rules; NCCL on GPUs) and
# compares every rank with the serial layer on that rank's tokens: `all_to_all` with uneven splits
# (a rank that receives nothing, two calls before their backwards, a transposed input and a
# transposed upstream gradient), `exchange_splits`, both also on groups that are not the world
# ({0} and {1}; {0, 2} and {1, 3}), the layer's output, aux loss, input gradient, the router's and
# every expert's gradients (named by their global expert), then `sync_gradients` (also on the
# groups {0, 2} and {1, 3}) and SGD and Adam steps of `train_step` (its loss returned detached),
# alone and with data parallelism. The inputs and routings it tries: $k = 1$ and $k = 2$, capacity
# overflow, every token to expert 0, no token for the last rank's experts, a rank with no token at
# all, and a batched input `[2, 8, d]`. It also counts your all-to-alls, and reads the ValueError
# of 10 experts over 3 or 4 ranks for both numbers.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("experts")

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["experts"], gpus=GPUS)

# %% [markdown]
# ## 6. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/experts.py` and awards up to 20 points, in proportion to the checks that
# pass. In your copy the cell is empty: the grader puts the tests back. Use the check cell of
# section 5 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e10_experts", "locked": true, "points": 20.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("experts")
### END HIDDEN TESTS
