# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Pipeline parallelism: stages, GPipe and 1F1B (exercise E9)
#
# Data parallelism copies the model; tensor parallelism (notebooks 03-06) cuts every layer's
# weights and pays a collective inside every layer. **Pipeline parallelism** cuts the model **by
# depth**: rank $r$ of $N$ holds a *stage*, a run of consecutive layers, and the only messages are
# the activations flowing forward between neighbouring stages and their gradients flowing back:
# point-to-point, small, once per stage boundary. That is why it scales across nodes, where
# tensor parallelism's all-reduces would be too slow, and why "3D parallelism" (data x tensor x
# pipeline) is how the largest models train.
#
# Its cost is time: a stage waits for its input. With one batch, $N - 1$ of the $N$ ranks are idle
# at any moment. Cutting the batch into $M$ **micro-batches** (GPipe, Huang et al. 2019,
# arXiv 1811.06965) fills the pipe; what is left idle is the **bubble**,
#
# $$\text{bubble} = \frac{N - 1}{M + N - 1}.$$
#
# More micro-batches shrink it, but GPipe keeps every micro-batch's activations until its
# backward: $M$ of them. **1F1B** (PipeDream-Flush, Narayanan et al. 2021, arXiv 2104.04473) runs
# the same micro-batches in another order: same bubble, at most $N$ micro-batches alive.
#
# In this notebook you
#
# 1. **implement** the stages: which layers each rank holds;
# 2. **implement** GPipe: all forwards, then all backwards, gradients exactly serial training's;
# 3. **implement** 1F1B: warm-up, steady state, cool-down, at most $N - r$ micro-batches held;
# 4. **implement** DP x PP: pipelines side by side, their gradients averaged;
# 5. check your work;
# 6. get graded;
# 7. compose DP x TP x PP on 8 processes from your own E1, E3 and E9 (the capstone, not graded).
#
# You will edit **`rtp_course/pipeline.py`**.

# %%
import matplotlib.pyplot as plt

from rtp_course.checker import check
from rtp_course.course.impl import default_impl
from rtp_course.notebook import pipeline_schedule as ps
from rtp_course.notebook import where_checks_run
from rtp_course.notebook.demos import pipeline as demo
from rtp_course.notebook.demos import run_demo

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E9.1 · Stages: `stage_layers`, `PipelineStage`
#
# The model is an `nn.Sequential` of $L$ blocks, each mapping $[b, D]$ to $[b, D]$ (here
# `Linear(8, 8)` + `Tanh`; a transformer's decoder layers are the same shape). Stage $r$ of $N$
# holds blocks
#
# $$\lfloor rL/N \rfloor \;\ldots\; \lfloor (r+1)L/N \rfloor - 1,$$
#
# consecutive runs that together hold every block once (with $L = 6$, $N = 4$: 1, 2, 1 and 2
# blocks). Slicing the `nn.Sequential` (`model[start:stop]`) keeps the model's own modules, so
# the caller's optimizer steps the very parameters the stage trains. $r$ and $N$ are this
# rank's place in `group` and its size (`dist.get_rank(group)`, `dist.get_world_size(group)`),
# never the world's. The stage knows its neighbours as **global** ranks,
# `dist.get_global_rank(group, r ± 1)`, for the point-to-point calls. The checker builds both on
# the world and on the group of ranks $1 \ldots N - 1$, where group rank 0 is global rank 1.
#
# **Your task.** Implement `stage_layers(num_layers, group)` and `PipelineStage(model, group)`.
# The cell runs 4 ranks: each builds its stage of an 8-block model, receives the activation from
# the previous stage, runs its blocks and sends the result on; the last compares with the serial
# model.

# %%
out = run_demo(demo.stage_demo, 4, needs="stage_layers and PipelineStage (rtp_course/pipeline.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"stage {r}: blocks {res['blocks']} (the rule: {res['expected']})"
              + (f"; output against serial: {res['error']:.1e}" if "error" in res else ""))

# %% [markdown]
# ## 2. Task E9.2 · GPipe: `gpipe`
#
# Cut the batch of $B$ rows into $M$ micro-batches of $b = B / M$ rows (`inputs.chunk(M)`). Each
# stage runs the $M$ forwards, receiving each activation from the previous stage and sending its
# output to the next; then the $M$ backwards, receiving the gradient of its output from the next
# stage and sending the gradient of its input back. The last stage computes each micro-batch's
# loss **divided by $M$**: `loss_fn` averages over a micro-batch's $b$ rows, so
#
# $$\sum_{i=1}^{M} \frac{1}{M b}\sum_{j \in i} \ell_j = \frac{1}{B}\sum_{j=1}^{B} \ell_j,$$
#
# the whole batch's mean, and the $M$ backward passes **add** their gradients in `.grad`, exactly
# serial training's gradients on the whole batch. Every rank is given the whole batch (the first
# stage reads the inputs, the last the targets).
#
# The timeline below is the ideal one (a backward costs twice a forward): stage $r$ starts $r$
# forwards late, and the last stage's first backward waits for its last forward.

# %%
fig, axes = plt.subplots(2, 1, figsize=(11, 5))
ps.draw(ps.simulate(4, 1, ps.gpipe_order), "one batch, N = 4:", axes[0])
ps.draw(ps.simulate(4, 6, ps.gpipe_order), "GPipe, N = 4, M = 6:", axes[1])
plt.tight_layout()
plt.show()

# %% [markdown]
# The step lasts $(M + N - 1)(t_F + t_B)$, of which each stage works $M (t_F + t_B)$: the bubble is
# $(N - 1)/(M + N - 1)$ whatever the costs of a forward and a backward. The table compares the
# formula with the ideal timeline:

# %%
for m in (1, 2, 4, 8, 16, 32):
    sim = ps.bubble(ps.simulate(4, m, ps.gpipe_order))
    print(f"N = 4, M = {m:>2}: bubble {sim:6.1%} (formula {(4 - 1) / (m + 4 - 1):6.1%}), "
          f"activations of {m} micro-batches held on stage 0")

# %% [markdown]
# **Point-to-point under NCCL.** A rank's operations on a group run one after the other on one
# CUDA stream, and a send does not finish before its receive runs on the peer. GPipe is a chain:
# stage $r$ receives what $r - 1$ sends, so a single send or receive at a time is fine. Where two
# neighbours must send to each other at once, post both halves in **one**
# `dist.batch_isend_irecv` (section 3 needs this), and wait on every work it returns (rule
# 'Wait on every work'; an `isend` too). Every point-to-point call takes `group=stage.group`
# and the peer's **global** rank (`stage.prev`, `stage.next`). The backwards may run in any
# order once every forward ran; the returned loss is detached.
#
# **Your task.** Implement `gpipe(stage, inputs, targets, loss_fn, num_microbatches, group)`. The
# cell runs one step on 4 stages with 6 micro-batches: every stage's gradient error against
# serial training, the loss error on the last stage, the order of each stage's forwards and
# backwards, how many micro-batches' activations it held at once, and its point-to-point calls.

# %%
gpipe_out = run_demo(demo.schedule_demo, 4, "gpipe", 6, needs="gpipe (rtp_course/pipeline.py)")
if gpipe_out is not None:
    print(demo.describe(gpipe_out, "gpipe"))

# %% [markdown]
# ## 3. Task E9.3 · 1F1B: `one_f_one_b`
#
# GPipe's memory grows with $M$, and $M$ must be large for a small bubble. 1F1B starts each
# micro-batch's backward as early as possible. Stage $r$ runs $w = \min(N - r - 1, M)$ **warm-up**
# forwards, then alternates one forward and one backward of the **oldest** micro-batch (the
# **steady state**, $M - w$ of each), then the $w$ backwards left (**cool-down**):
#
#     N = 4, M = 6   stage 0:  F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5       (w = 3)
#                    stage 3:  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5       (w = 0)
#
# A micro-batch's activations are freed by its backward, so stage $r$ never holds more than
# $\min(N - r, M)$ of them, and the bubble is GPipe's:

# %%
fig, ax = plt.subplots(figsize=(11, 2.6))
ps.draw(ps.simulate(4, 6, ps.one_f_one_b_order), "1F1B, N = 4, M = 6:", ax)
plt.tight_layout()
plt.show()

# %% [markdown]
# In the steady state stage $r$ sends an activation to $r + 1$ **while** $r + 1$ sends a gradient
# to $r$. Two blocking sends would each wait for the other's receive: a deadlock on NCCL (the
# checker replays your calls under NCCL's rules and reports it). Post together: the send of the
# forward's output with the receive of the gradient you need next, and the send of the
# backward's input gradient with the receive of the next activation, each pair in one
# `dist.batch_isend_irecv` (or even stages first sending, odd stages first receiving).
# **Required** is only what NCCL needs: two neighbours never both wait in a send to each other,
# so of each such pair at least one side posts its receive with its send (one batch) or before
# it. Batching every pair on every stage is the recommended way to be sure.
#
# A backward without `retain_graph` frees what autograd saved for it (rule 'Memory'): keeping
# references to a micro-batch's input and output after its backward holds no activations.
#
# The checker's **'subgroup'** check (task E9.3) runs `gpipe`, then `one_f_one_b`, on the group of
# every rank but rank 1: $\{0, 2\}$ at 3 ranks, $\{0, 2, 3\}$ at 4. Its ranks are not
# consecutive: stage 1 is global rank 2, whose previous stage is global rank 0. A point-to-point
# call without `group=stage.group`, a neighbour given as a group rank, or $r$ and $N$ taken from
# the world fail there.
#
# **Your task.** Implement `one_f_one_b(...)`, with the same arguments and results as `gpipe`.
# The cell runs it as above, then draws both schedules from the ranks' own clocks. On CPU
# processes sharing a few cores, with blocks this small, the transfers take longer than the
# compute and the widths are noise: the order, and who waits for whom, is what to read.

# %%
ofob_out = run_demo(demo.schedule_demo, 4, "one_f_one_b", 6,
                    needs="one_f_one_b (rtp_course/pipeline.py)")
if ofob_out is not None:
    print(demo.describe(ofob_out, "one_f_one_b"))
runs = [(name, res) for name, res in (("GPipe", gpipe_out), ("1F1B", ofob_out)) if res is not None]
if runs:
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.6 * len(runs)), squeeze=False)
    for ax, (name, res) in zip(axes[:, 0], runs):
        ps.draw(ps.measured(res), f"{name}, measured:", ax, xlabel="seconds", bubble_shown=False)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# Memory of the two schedules, per stage: GPipe holds all $M$ micro-batches on every stage, 1F1B
# holds $N - r$ on stage $r$ (stage 0 is the one that bounds the device's memory):

# %%
for name, order in (("GPipe", ps.gpipe_order), ("1F1B", ps.one_f_one_b_order)):
    print(f"{name:>5}, N = 4, M = 8: micro-batches held per stage "
          f"{list(ps.held(ps.simulate(4, 8, order)).values())}")

# %% [markdown]
# ## 4. Task E9.4 · DP x PP: `data_parallel_pipeline`
#
# Pipelines compose with data parallelism: $D$ pipelines of $P$ stages on $P \cdot D$ ranks.
# Pipeline $d$ is ranks $dP \ldots dP + P - 1$; the $D$ ranks that hold the same stage $s$
# (ranks $s, s + P, \ldots$) form that stage's **data-parallel group**. Each pipeline trains on its
# own $D$-th of the batch, then every stage averages its gradients over its data-parallel group,
# once per step, as E1's `average_gradients` did (notebook 02):
#
#     P = 2, D = 2:   pipeline 0: ranks 0 -> 1      pipeline 1: ranks 2 -> 3
#                     dp groups:  stage 0: {0, 2}   stage 1: {1, 3}
#
# The pipeline's sends stay inside a pipeline; the all-reduce stays inside a data-parallel
# group. Averaging over the world (or over the pipeline) mixes different stages' gradients:
# the checker names the group each call ran on.
#
# **Your task.** Implement `data_parallel_pipeline(stage, inputs, targets, loss_fn,
# num_microbatches, dp_group)`: `one_f_one_b` on this replica's shard, with `stage.group` (so $r$
# and $N$ are the stage's place in its pipeline; the function's own group argument is
# `dp_group`: $d$ = `dist.get_rank(dp_group)`), then the average on `dp_group`. The checker
# traces each stage's schedule and memory as for `one_f_one_b`. The
# checker runs it with two replicas of one stage (2 ranks), one pipeline of three (3 ranks) and
# two pipelines of two (4 ranks), against serial training on the whole batch.

# %% [markdown]
# ## 5. Check your work
#
# `rtp-course check pipeline` runs your code on 1, 2, 3 and 4 processes. On every stage it
# compares the loss (last stage), the gradients, the gradients after a second call without
# `zero_grad` (added) and the weights after SGD and Adam steps with serial training on the
# whole batch; it records the order of each stage's forwards and backwards (rule 'Schedule'),
# the micro-batches whose activations were alive at once (rule 'Memory', for 1F1B), and every
# send and receive: their count, their peers, and whether NCCL would run them in that order.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("pipeline")

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["pipeline"], gpus=GPUS)

# %% [markdown]
# ## 6. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/pipeline.py` and awards up to 20 points, in proportion to the checks that
# pass. In your copy the cell is empty: the grader puts the tests back. Use the check cell of
# section 5 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e9_pipeline", "locked": true, "points": 20.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("pipeline")
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Capstone · DP x TP x PP on a device mesh
#
# Large models train with the three at once ("3D parallelism"). Here your own code composes them
# on $2 \times 2 \times 2 = 8$ CPU processes, a torch `DeviceMesh` with dimensions
# `("dp", "pp", "tp")`, rank $= 4\,dp + 2\,pp + tp$:
#
# * **tp** (innermost, as notebook 08 laid it out): every block of the model, `Linear(4, 8)`,
#   `Tanh`, `Linear(8, 4)`, `Tanh`, is your E3 pair, `ColumnParallelLinear.from_serial` then
#   `RowParallelLinear.from_serial`, over `mesh["tp"]`;
# * **pp**: the 4 blocks are cut into 2 stages by your `PipelineStage` over `mesh["pp"]`, and
#   your `one_f_one_b` runs 2 micro-batches through them;
# * **dp** (outermost): each of the 2 replicas trains on its half of the global batch of 8 rows,
#   then your E1 `average_gradients(stage, group=mesh["dp"])` averages each stage's gradients.
#
# Two SGD steps, in float64, are compared parameter by parameter with serial training of the
# same model on the same global batch: each replica's loss, every gradient before and after the
# average, and the weights after the steps. The first difference is located (forward, backward,
# average or step; the block where it entered) and named with the exercise to look at.
#
# **What it needs:** E1.1 `average_gradients` (notebook 02), E3.1 `ColumnParallelLinear` and
# E3.2 `RowParallelLinear` (notebook 04, on your E2 `comm`, notebook 03), E9.1 `PipelineStage`
# and E9.3 `one_f_one_b` (sections 1 and 3). Until they are all done the cell says which one to
# implement first, and where it is taught; it grades nothing. The picture shows the mesh: which
# ranks each dimension's groups join, what travels between them, and the calls the run made
# (a call on no group of the mesh is listed in red).

# %%
from rtp_course.notebook import diagrams
from rtp_course.notebook.demos import threed

verdict = threed.capstone()
diagrams.device_mesh(threed.layout(), verdict.traffic if verdict is not None else None)
plt.show()
