# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Data parallelism from scratch (exercise E1)
#
# Data parallelism is the workhorse of distributed training: every GPU holds a full copy of the
# model, each gets a different slice of the batch, and after the backward pass they agree on one
# gradient. PyTorch's `DistributedDataParallel` (DDP) does this; in this notebook you build your
# own, small but exact, and prove that it trains **the same model** as one process would.
#
# Plan:
#
# 1. the math: why the right gradient is the mean of the ranks' gradients;
# 2. giving each rank its slice of the data: `DistributedSampler`;
# 3. **exercise**: `average_gradients`;
# 4. **exercise**: `DataParallel`, a module wrapper that does it automatically;
# 5. checking your work;
# 6. training a CNN on 2 ranks and comparing with serial training;
# 7. learning-rate scaling when the batch grows;
# 8. profiling: where does the time of a step go?
# 9. grading.
#
# You will edit one file: **`rtp_course/data_parallel.py`**. Open it next to this notebook; its
# docstrings repeat what you need.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from rtp_course.notebook import diagrams, plots
from rtp_course.training.data import rank_batch
from rtp_course.notebook.demos import data_parallel as demo
from rtp_course.notebook.demos import run_demo, show_source
from rtp_course.course.impl import default_impl

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. The math: the mean of the per-rank means
#
# Take a global batch of $B$ samples and a loss that averages over them,
# $L = \frac{1}{B}\sum_{i=1}^{B} \ell_i(w)$. Split the batch evenly over $N$ ranks, $B/N$ samples
# each, and let $L_r$ be the mean loss of rank $r$'s samples. Then
#
# $$L = \frac{1}{B}\sum_{r=0}^{N-1} \sum_{i \in \text{rank } r} \ell_i
#     = \frac{1}{N}\sum_{r=0}^{N-1} \underbrace{\frac{N}{B}\sum_{i \in \text{rank } r}\ell_i}_{L_r},
# \qquad\text{so}\qquad
# \frac{\partial L}{\partial w} = \frac{1}{N}\sum_{r=0}^{N-1}\frac{\partial L_r}{\partial w}.$$
#
# Each rank computes $\partial L_r / \partial w$ with an ordinary `backward()` on its own slice. One
# **all-reduce** (sum) of each gradient, divided by $N$, gives every rank the gradient of the whole
# batch, exactly what serial training computes. If all ranks also start from the **same weights**
# and apply the same optimizer step, they stay identical forever, and the $N$ copies behave like
# one model trained on batches $N$ times larger.
#
# Two caveats hide in "evenly": with unequal slices the plain mean is wrong (you would need a
# weighted mean), and any layer that mixes samples of a batch (batch normalisation) sees only its
# rank's slice.
#
# Let us check the identity on one process before using several:

# %%
model, x, y = demo.tiny_problem(batch=8)
F.mse_loss(model(x), y).backward()
full = model.weight.grad.clone()

N = 4
per_rank = []
for r in range(N):
    model.zero_grad()
    xr, yr = rank_batch((x, y), r, N)             # rank r's 2 of the 8 samples
    F.mse_loss(model(xr), yr).backward()
    per_rank.append(model.weight.grad.clone())
print("gradient of the whole batch   :", full)
print("mean of the 4 slices' gradients:", torch.stack(per_rank).mean(0))
print("sum instead of mean (a classic bug):", torch.stack(per_rank).sum(0))

# %% [markdown]
# ## 2. Giving each rank its slice: `DistributedSampler`
#
# In real training the data comes from a `DataLoader`. `torch.utils.data.DistributedSampler` makes
# each rank's loader see a disjoint $1/N$ of the data set: every rank shuffles the indices with the
# **same seed** (so they agree on the order without communicating), then rank $r$ takes every
# $N$-th index starting at $r$. Call `sampler.set_epoch(epoch)` at each epoch to get a new shuffle.
#
# It needs no process group: we can look at what 4 ranks would read, right here.

# %%
dataset = list(range(16))                          # any data set of 16 samples
for epoch in (0, 1):
    print(f"epoch {epoch}")
    for r in range(4):
        sampler = DistributedSampler(dataset, num_replicas=4, rank=r, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        print(f"  rank {r} reads samples {list(sampler)}")

# %% [markdown]
# Each epoch, the four ranks together read every sample exactly once. (When the data set size is
# not divisible by $N$, the sampler repeats a few samples so that all ranks get the same number of
# batches: a rank with one batch fewer would skip an all-reduce and **deadlock** the others.)
#
# With `num_replicas=1` the same sampler gives the whole shuffled order: this is how we will
# build a serial run that sees exactly the same samples at each step as the $N$ ranks together.

# %% [markdown]
# ## 3. Task E1.1 · `average_gradients`
#
# One step of data parallelism, for 2 ranks: each holds a **replica** of the same model and reads
# its own slice of the batch, so each computes a different **local gradient**. One **all-reduce**
# sums them (then divide by $N$); with the same mean gradient, every rank takes the **same step**
# and the replicas stay identical.

# %%
diagrams.data_parallel_step(2)
plt.show()

# %% [markdown]
# In **`rtp_course/data_parallel.py`**, implement
#
# ```python
# def average_gradients(model, group=None) -> None
# ```
#
# After `loss.backward()`, replace every parameter's `.grad` by its mean over the ranks of
# `group`, in place:
#
# * for each parameter `p` whose `p.grad` is not `None`: `dist.all_reduce(p.grad, group=group)`
#   (a sum), then divide by `dist.get_world_size(group)`;
# * pass `group` to every call: later exercises average over a sub-group of the ranks
#   (notebook 08), and `group=None` means the whole world.
#
# When you have saved the file, run the next cell. It starts 2 ranks; each computes the gradient
# of its half of the batch, then calls your function.

# %%
out = run_demo(demo.gradient_demo, 2, needs="average_gradients (rtp_course/data_parallel.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: local gradient {res['local']}  ->  after averaging {res['averaged']}")
    print(f"serial gradient of the whole batch:         {full}")
    ok = all(torch.allclose(res["averaged"], full, atol=1e-6) for res in out)
    print("equal to the serial gradient on every rank:", ok)

# %% [markdown]
# (The notebook runs your code from the file on disk, in fresh processes, so there is no need to
# restart the kernel after an edit: just run the cell again.)
#
# ## 4. Task E1.2 · `DataParallel`
#
# Calling `average_gradients` by hand works, but is easy to forget and cannot overlap
# communication with the rest of the backward pass. Real DDP hides it inside the model: the same
# step, with each gradient's all-reduce started by a hook as soon as backward has produced it.

# %%
diagrams.data_parallel_step(2, in_hooks=True)
plt.show()

# %% [markdown]
# Implement the class `DataParallel(module, group=None)` in the same file:
#
# **Construction.** Make all ranks start from rank 0's weights: `dist.broadcast` every parameter
# **and buffer** (e.g. batch-norm running statistics) of `module` from the first rank of the
# group. `src` is a *global* rank: for a sub-group use `dist.get_global_rank(group, 0)`, for
# `group=None` simply `0`. Broadcast inside `torch.no_grad()` (it writes into the tensors in place).
#
# **Backward.** After `loss.backward()` returns, every `.grad` must already be averaged. Register
# a hook on each parameter that requires a gradient:
#
# ```python
# p.register_post_accumulate_grad_hook(hook)   # autograd calls hook(p) once p.grad is complete
# ```
#
# and let the hook all-reduce `p.grad` over `group` and divide by the world size. Autograd visits
# the parameters in the same order on every rank, so the ranks' all-reduces pair up.
#
# **Forward** is given: it calls the wrapped module, with no communication. Keep the wrapped
# module in `self.module` (the checks read it).
#
# The demo below builds the model with a **different seed on each rank**, wraps it, and runs one
# backward step without calling anything else.

# %%
out = run_demo(demo.wrap_demo, 2, needs="DataParallel (rtp_course/data_parallel.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: weight before wrapping {res['before']}  after {res['after']}")
    print("same weights on both ranks after wrapping:", torch.equal(out[0]["after"], out[1]["after"]))
    print("same gradients on both ranks after backward:", torch.equal(out[0]["grad"], out[1]["grad"]))

# %% [markdown]
# PyTorch's real DDP adds two important optimisations to this design: it groups gradients into
# ~25 MB **buckets** (one all-reduce per bucket rather than per tensor: fewer, larger messages), and
# launches each bucket's all-reduce **asynchronously** while backward continues computing the
# gradients of earlier layers. The arithmetic is the same as yours.
#
# ## 5. Check your work
#
# The checker runs your `average_gradients` and `DataParallel` on 1, 2, 3 and 4 ranks and compares
# outputs, gradients and weights after two SGD and two Adam steps with serial training. If
# something is wrong, it says which check, phase, rank and tensor, by how much, and gives a hint.

# %%
from rtp_course.checker import check
from rtp_course.notebook import where_checks_run

print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("data_parallel")          # world sizes 1, 2, 3 and 4

# %% [markdown]
# On a cluster you can run the same check on GPUs through Slurm (see notebook 01, section 5):
# set `USE_SLURM = True`, and `GPUS` to the number of GPUs to use.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import submit_check
    job = submit_check(["data_parallel"], gpus=GPUS)
    job.wait()
    print(job.summary())

# %% [markdown]
# ## 6. Training a CNN on 2 ranks
#
# Time for a real model: the convolutional network of the PyTorch MNIST example (1.2 million
# parameters), trained with Adam on synthetic digit images. `demo.train` is an ordinary training
# loop with three additions, exactly as you would write it with PyTorch's DDP:
# a `DistributedSampler`, the `DataParallel` wrapper, and nothing else.

# %%
show_source(demo.train)

# %% [markdown]
# We train on 2 ranks with 16 images each (a global batch of 32), and serially with batches of 32
# drawn in the same order. The data-parallel loss of a step is the mean of the two ranks' losses.

# %%
STEPS, PER_RANK, RANKS = 25, 16, 2
parallel = run_demo(demo.train, RANKS, STEPS, PER_RANK, needs="DataParallel (rtp_course/data_parallel.py)")
serial = demo.train(0, 1, STEPS, RANKS * PER_RANK, parallel=False)

dp_loss = None
if parallel is not None:
    dp_loss = [sum(losses) / RANKS for losses in zip(*(res["losses"] for res in parallel))]
    diffs = [abs(a - b) for a, b in zip(dp_loss, serial["losses"])]
    weight_diff = max((parallel[0]["weights"][k] - v).abs().max().item()
                      for k, v in serial["weights"].items())
    print(f"loss difference at step 1: {diffs[0]:.1e}, at step 2: {diffs[1]:.1e}, "
          f"largest over {STEPS} steps: {max(diffs):.1e}")
    print(f"largest weight difference after {STEPS} steps: {weight_diff:.1e}")
plots.loss_curves({"serial, batch 32": serial["losses"], "2 ranks x 16 (your DataParallel)": dp_loss},
                  title="the same training, on 1 process and on 2",
                  styles={"2 ranks x 16 (your DataParallel)": {"linestyle": "--", "linewidth": 2.5}})
plt.show()

# %% [markdown]
# The curves lie on top of each other. They are not *bit*-identical, and should not be:
# floating-point addition is not associative, and the all-reduce adds the ranks' partial gradients
# in a different order from the serial backward, so the gradients differ in their last digits
# (about $10^{-7}$ relative). At step 1 the weights are identical, and the losses differ only in
# their last digits (the printed difference at step 1): the mean of two ranks' means over 16
# images adds in another order than one mean over 32. The tiny gradient differences then
# accumulate. Adam amplifies them where a gradient is close to zero: it
# divides each gradient by its running magnitude, so a rounding difference there becomes a step of
# up to the learning rate. That is why the weights end up differing in the third or fourth decimal
# while the losses still agree. A real bug looks nothing like this: it shows at the first step,
# and it is large.
#
# ## 7. Learning-rate scaling
#
# With $N$ ranks of $b$ samples each, every step now averages over $Nb$ samples, and an epoch
# takes $N$ times fewer steps. With the same learning rate, the model makes less progress per
# sample seen. The **linear scaling rule** (Goyal et al., 2017): when the batch grows $k$ times,
# multiply the learning rate by $k$, so that one large step moves about as far as $k$ small ones
# did. It holds for SGD up to a limit (in their ImageNet experiments, batches of about 8000
# images), usually with a **warm-up**: start small and ramp up the rate over the first steps, because early gradients
# change fast. For Adam, the rate is usually scaled by less (often $\sqrt{k}$).
#
# Three serial SGD runs of a small MLP on the same 3072 digits make the point: batch 16, then
# batch 64 with the same rate, then batch 64 with 4 times the rate.

# %%
runs = demo.lr_scaling_runs([("batch 16, lr 0.05", 16, 0.05),
                             ("batch 64, lr 0.05", 64, 0.05),
                             ("batch 64, lr 0.2 (x4)", 64, 0.2)])
fig, ax = plt.subplots(figsize=(7, 4))
for label, (seen, loss) in runs.items():
    ax.plot(seen, loss, marker="o", label=label)
ax.set_xlabel("training samples seen")
ax.set_ylabel("held-out loss")
ax.set_title("the same samples, seen in larger batches")
ax.grid(True, alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# With the same rate, batch 64 falls behind (4 times fewer steps); with 4 times the rate it
# catches up. Notice the bump early in the scaled run: a large rate is risky while the first
# gradients are large, which is exactly what warm-up is for. In data parallelism, "batch 64" is "4 ranks of 16", so **when you add ranks, revisit
# the learning rate** (or keep the global batch fixed and shrink the per-rank batch).
#
# ## 8. Profiling: where does the time go?
#
# `torch.profiler` records every operator a process runs, with its time. We profile 3 training
# steps of the CNN on 2 ranks with your `DataParallel`, marking the forward, backward and
# optimizer phases with `record_function`, and look at rank 0's table.

# %%
summary = run_demo(demo.profile_step, 2, needs="DataParallel (rtp_course/data_parallel.py)")
summary = summary[0] if summary is not None else None
if summary is not None:
    print(f"{summary['num_params']:,} parameters in {summary['num_tensors']} tensors: "
          f"{summary['num_tensors']} all-reduces of {summary['grad_bytes'] / 1e6:.1f} MB "
          f"in total per step\n")
    print("the most expensive events (times include the events nested inside):")
    print(demo.profile_table(summary, limit=8))
    print("\nthe phases and the communication:")
    print(demo.profile_table(summary, names=["forward", "backward (", "optimizer step",
                                             "all_reduce", "allreduce"]))

# %% [markdown]
# How to read it:
#
# * **`forward`, `backward (with the all-reduces)`, `optimizer step`** are our `record_function`
#   labels: the three phases over 3 steps. Backward costs about twice the forward (it computes a
#   gradient for both the input and the weight of every layer), plus the all-reduces.
# * **`c10d::allreduce_`** is the call your hook makes: one per parameter tensor per step. Its
#   *CPU* time is small because it only launches the work.
# * **`gloo:all_reduce`** is the communication itself, from launch to completion. It includes
#   time spent **waiting for the other rank** to reach the same all-reduce, so it measures
#   imbalance as well as bandwidth.
# * The all-reduces run inside `torch::autograd::AccumulateGrad`: your hook fires right after
#   each gradient is accumulated, and here it blocks until the all-reduce has finished.
#
# On GPUs with NCCL, the same table (with `ProfilerActivity.CUDA` added) shows `nccl:all_reduce`
# kernels running on a separate stream, ideally **overlapped** with the backward kernels of the
# next layers: that overlap, plus bucketing, is what makes DDP nearly free on a fast network. To
# look at a timeline, `prof.export_chrome_trace("trace.json")` writes a file that
# https://ui.perfetto.dev opens.
#
# ## 9. Grading
#
# The cell below is read-only and graded after you submit: it runs the public checks and hidden
# ones (more shapes, world sizes and steps) on your `rtp_course/data_parallel.py` and awards up to
# 10 points, in proportion to the checks that pass. In your copy the cell is empty: the grader
# puts the tests back. Use the check cell of section 5 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e1_data_parallel", "locked": true, "points": 10.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("data_parallel")
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# Data parallelism replicates the model, so it cannot train a model that does not fit on one GPU.
# Notebook **03** starts splitting the model itself: tensor parallelism, and the two small
# communication functions, $f$ and $g$, on which it rests.
