# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · 2D parallelism: tensor parallel inside, data parallel across (exercise E6)
#
# Tensor parallelism (notebook 04) splits a model over $T$ ranks, but it all-reduces activations
# at every layer: it needs the fast links *inside* a node and stops scaling beyond about 8 GPUs.
# Data parallelism (notebook 02) scales to thousands of GPUs, but every rank must hold a whole
# model. Large trainings use both at once: **$D$ replicas of the model, each one split over a
# tensor-parallel group of $T$ ranks**, $W = D \cdot T$ ranks in all. (Add pipeline parallelism
# across layers and you have the "3D parallelism" of Megatron-LM and DeepSpeed.)
#
# In this notebook you
#
# 1. build the two kinds of process groups and see where each rank sits;
# 2. make a 2D-parallel model from the serial one;
# 3. average the gradients across replicas, and only across replicas;
# 4. train it and compare with serial training;
# 5. check your work, and 6. get graded.
#
# You will edit **`rtp_course/groups.py`**. It uses your E1 (`data_parallel`) and E3
# (`tensor_parallel`) modules.

# %%
import matplotlib.pyplot as plt

from rtp_course.notebook import diagrams, plots
from rtp_course.checker import check
from rtp_course.notebook import where_checks_run
from rtp_course.notebook.demos import run_demo, show_source
from rtp_course.notebook.demos import twod as demo
from rtp_course.course.impl import default_impl

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E6.1 · Process groups: `build_groups`
#
# Number the ranks so that **the ranks of one replica are consecutive**:
#
# $$\text{rank} = \text{dp\_rank} \cdot T + \text{tp\_rank}, \qquad
#   \text{tp\_rank} = \text{rank} \bmod T, \quad \text{dp\_rank} = \lfloor \text{rank} / T \rfloor .$$
#
# * **TP group** $d$ = ranks $[dT, dT + T)$: one replica. Consecutive ranks are on the same node
#   (a job places ranks $0..7$ on node 0, $8..15$ on node 1, ...), so the all-reduces of every
#   layer stay on NVLink.
# * **DP group** $t$ = ranks $t, t + T, t + 2T, \dots$: the ranks that hold **the same shard** $t$
#   in every replica. Their gradients are averaged once per step, across nodes.
#
# A row of the picture is a TP group, a dashed column a DP group:

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.2))
diagrams.rank_layout(4, 2, ax=axes[0])
diagrams.rank_layout(8, 4, ax=axes[1])
plt.show()

# %% [markdown]
# **Creating groups is collective.** `dist.new_group(ranks)` must be called by **every process
# of the job, for every group, in the same order**, members or not; each process keeps the groups
# it belongs to. A rank that skips the groups it is not in, or creates them in another order,
# mismatches the groups (and hangs). So `build_groups` loops over all $D$ TP groups, then all $T$
# DP groups, the same way on every rank.
#
# **Your task.** Implement `build_groups(tp_size)` in `rtp_course/groups.py`: a
# `ValueError` if `tp_size` does not divide the world size (before creating anything), then the
# groups, returned as the given `ParallelGroups` dataclass (`tp_group`, `dp_group`, `tp_size`,
# `dp_size`, `tp_rank`, `dp_rank`). It lays out the whole job, as Megatron's
# `initialize_model_parallel` and torch's `init_device_mesh` do: a process outside a group
# cannot see its ranks, so a layout of part of the job could not be created collectively.

# %%
out = run_demo(demo.layout, 4, 2, needs="build_groups (rtp_course/groups.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: tp_rank {res['tp_rank']}, dp_rank {res['dp_rank']}, "
              f"TP group {res['tp_group']}, DP group {res['dp_group']}")

# %% [markdown]
# Expected for $W=4$, $T=2$: TP groups $\{0,1\}$ and $\{2,3\}$, DP groups $\{0,2\}$ and $\{1,3\}$.
#
# ## 2. Task E6.2 · Building the model: `parallelize_2d`
#
# Two steps, in place:
#
# 1. `tensor_parallel.parallelize_transformer(model, groups.tp_group)`: your E3, on the TP group.
#    Every rank of the replica must pass the same serial model.
# 2. Make the replicas start equal: broadcast every parameter **and buffer** over
#    `groups.dp_group` from its first rank. `src` is a global rank:
#    `dist.get_global_rank(groups.dp_group, 0)`. Broadcasting shard $t$ over DP group $t$ gives
#    every replica rank 0's shard $t$.
#
# The demo builds each replica from a **different seed** on purpose (replica 0 from seed 100,
# replica 1 from seed 101), then calls your `parallelize_2d`. It prints a checksum of the serial
# `fc1` weight of the first block and of each rank's shard of it.

# %%
out = run_demo(demo.replicas_start_equal, 4, 2, needs="parallelize_2d (rtp_course/groups.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r} (replica {res['dp_rank']}, shard {res['tp_rank']}): serial weight "
              f"checksum {res['serial checksum']:+.4f} -> shard {res['shard shape']} checksum "
              f"{res['shard checksum']:+.4f}")

# %% [markdown]
# Before: the two replicas' serial weights differ. After: ranks 0 and 2 hold the same shard 0,
# ranks 1 and 3 the same shard 1, all cut from replica 0's model.
#
# ## 3. Task E6.3 · Averaging across replicas: `sync_gradients` and `train_step_2d`
#
# Replica $d$ trains on its own batch of $B$ samples with loss $L_d$, the mean over them. The
# serial model on the $D \cdot B$ concatenated samples has loss $L = \frac1D \sum_d L_d$, so
#
# $$\frac{\partial L}{\partial w} = \frac{1}{D} \sum_{d=0}^{D-1} \frac{\partial L_d}{\partial w},$$
#
# one all-reduce per gradient **on the DP group**, divided by $D$: exactly notebook 02's
# `average_gradients(model, group=groups.dp_group)`. For every parameter:
#
# * a **shard** $t$: the DP group holds shard $t$ of every replica, so it averages like with like;
# * a **replicated** parameter (LayerNorm, row bias, classifier head): equal inside a replica,
#   but each replica saw another batch, so it must be averaged too.
#
# Never all-reduce gradients over the **TP group**: it would add shard 0's gradient to shard
# 1's, different slices of the weights. (Inside a replica the TP layers already did all the
# communication they need, notebook 04.)
#
# **Your task.** Implement `sync_gradients(model, groups)` and `train_step_2d(model, optimizer,
# loss_fn, inputs, targets, groups)`: zero the gradients, forward, loss, backward,
# `sync_gradients`, optimizer step, return the detached loss.
#
# ## 4. Training that matches serial
#
# `demo.train` trains the course's BERT-like classifier on 4 ranks with $T=2$ and $D=2$: each
# step's global batch of 32 sequences is cut in 2; replica $d$ (ranks $2d$ and $2d+1$) trains on
# piece $d$. The serial run trains the same model on the whole global batch.

# %%
show_source(demo.train)

# %%
STEPS = 25
parallel = run_demo(demo.train, 4, 2, STEPS, needs="build_groups, parallelize_2d and train_step_2d "
                                                   "(rtp_course/groups.py)")
serial = demo.train(0, 1, 2, STEPS, parallel=False)
mean_2d = None
if parallel is not None:
    replicas = {res["dp_rank"]: res["losses"] for res in parallel}          # one curve per replica
    mean_2d = [sum(step) / len(replicas) for step in zip(*replicas.values())]
    diffs = [abs(a - b) for a, b in zip(mean_2d, serial["losses"])]
    print(f"replica losses at step 1: {[round(v[0], 4) for v in replicas.values()]}; "
          f"their mean {mean_2d[0]:.6f}, serial {serial['losses'][0]:.6f}")
    print(f"largest difference over {STEPS} steps: {max(diffs):.1e}")
plots.loss_curves({"serial, batch 32": serial["losses"], "2D: 2 replicas x TP 2 (mean of replicas)": mean_2d},
                  title="2D-parallel and serial training",
                  styles={"2D: 2 replicas x TP 2 (mean of replicas)": {"linestyle": "--", "linewidth": 2.5}})
plt.show()

# %% [markdown]
# Each replica's loss is the mean over *its* 16 sequences, so the two differ; their mean is the
# serial loss on all 32, step after step.
#
# What did each rank hold and send? Every rank stores $1/T$ of the model (and of its gradients and
# optimizer state), like TP; every step it does TP's two all-reduces per block, of activation size,
# inside its node, plus **one** all-reduce per parameter tensor across replicas, of size $1/T$ of
# the model: DP's traffic divided by $T$.
#
# ## 5. Check your work
#
# The checker builds the groups with `tp_size=2` on 2 and 4 ranks (and asks for `tp_size=3`,
# which divides neither, expecting a `ValueError` before any group is made), then trains the
# course's BERT-like classifier 2D-parallel with `tp_size=2` for two SGD steps and two Adam steps
# against serial training on the concatenated batches. The graded checks add the other layouts
# of 4 ranks and the GPT-like language model.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("groups")          # world sizes 2 and 4

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["groups"], gpus=GPUS)

# %% [markdown]
# ## 6. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/groups.py` and awards up to 15 points, in proportion to the checks that pass. In
# your copy the cell is empty: the grader puts the tests back. Use the check cell of section 5 to
# know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e6_groups", "locked": true, "points": 15.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("groups")
### END HIDDEN TESTS

# %% [markdown]
# ## Where to go from here
#
# You have built, from `dist.all_reduce` up: data parallelism, Megatron's tensor parallelism,
# rotation-based RTP and their 2D combination, each checked against the serial model. Directions
# to explore next:
#
# * **Pipeline parallelism** splits the model by layers across groups of ranks and keeps them
#   busy with micro-batches (GPipe, 1F1B schedules): the third dimension of 3D parallelism.
# * **Sequence parallelism** (Korthikanti et al., 2022) also splits the LayerNorm and dropout
#   activations that TP keeps whole, replacing each all-reduce by a reduce-scatter and an
#   all-gather (notebook 05's two ring collectives).
# * **RTP across replicas**: RTP (notebook 06) is a drop-in for DDP, so it can take DP's place
#   in the 2D layout, sharding weights across replicas as well.
# * PyTorch's own building blocks: `torch.distributed.device_mesh.init_device_mesh("cuda", (D, T))`
#   builds exactly these groups, and `torch.distributed.tensor.parallel` applies column- and
#   row-wise plans to a model.
