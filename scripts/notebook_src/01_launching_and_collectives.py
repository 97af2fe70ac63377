# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Launching processes and making them talk
#
# Distributed training runs **one process per GPU** (or, on a laptop, a few processes on the
# CPU). Each process runs the same program on its own share of the work, and the processes
# exchange tensors through a small set of *collective* operations.
#
# In this notebook you will
#
# * learn the vocabulary: process group, rank, world size, local rank, backend;
# * start processes three ways: from Python (`spawn`), with `torchrun`, and with Slurm's `srun`;
# * run every collective used in this course on tiny tensors and **see who holds what**
#   before and after;
# * watch a deadlock happen, find where each process was stuck, and fix it;
# * submit a job to a Slurm cluster from the notebook.
#
# There is no exercise to implement here, but everything later builds on it.

# %%
import os
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist

from rtp_course.notebook import plots
from rtp_course.notebook.demos import collectives, hello, show_source, where_waiting
from rtp_course.runtime.launcher import RankHung, launch

# %% [markdown]
# ## 1. Vocabulary
#
# | word | meaning | in code |
# |---|---|---|
# | **process group** | a set of processes that communicate together; the default one contains all of them (the *world*) | `dist.init_process_group(...)`, `dist.new_group(ranks)` |
# | **world size** $N$ | the number of processes in the group | `dist.get_world_size(group)` |
# | **rank** | a process's number in the group, $0 \dots N-1$ | `dist.get_rank(group)` |
# | **local rank** | its number *on its own machine*; selects the GPU | `LOCAL_RANK`, `torch.cuda.set_device(local_rank)` |
# | **backend** | the library that moves the bytes | `"nccl"` for GPUs, `"gloo"` for CPUs |
# | **rendezvous** | how the processes find each other at start-up: a host and port everyone knows (`MASTER_ADDR`, `MASTER_PORT`), or a key-value store | `init_method=`, `store=` |
#
# **NCCL** (NVIDIA's collective library) moves GPU tensors over NVLink and InfiniBand and is what
# you use on a GPU cluster. **Gloo** works on CPU tensors over TCP: slower, but it runs
# everywhere, which is why this course's checkers default to it on machines without GPUs. The
# same program runs on both; only the backend name and the tensors' device change. That is
# why every tensor your code makes must be made on the device of the data it meets
# (`torch.empty(shape, dtype=x.dtype, device=x.device)`, `x.new_empty(shape)`,
# `torch.empty_like(x)`): on a GPU run, a tensor made without `device=` sits in CPU memory, and
# CUDA refuses to mix it with GPU tensors, NCCL to send it. On a CPU everything is on one device,
# so the checkers treat such tensors as a GPU run would (the rule 'Device' in every exercise):
# the bug shows on your laptop, not first on the cluster.
#
# Every process runs the same code. It decides what to do from its rank: which slice of the
# data to read, which shard of the weights to hold, whom to send to.

# %% [markdown]
# ## 2. Starting processes
#
# ### 2.1 From Python: `spawn` and `rtp_course.runtime.launcher.launch`
#
# `torch.multiprocessing.spawn(fn, nprocs=N)` starts $N$ fresh Python processes and calls
# `fn(i, ...)` in process $i$. Each one then joins the process group. The course wraps this in
# `launch(fn, world_size)`, which also sets up the rendezvous on a free port, initialises the
# group (gloo on CPU, NCCL when there is one GPU per rank), returns every rank's result, and,
# importantly, **never hangs**: after `timeout` seconds it reports where each stuck rank was
# and ends it.
#
# One catch: *spawn* starts new interpreters, which import `fn` by its module and name. A
# function defined in a notebook cell cannot be imported, so the functions we run live in
# `rtp_course/notebook/demos/`. Here is the first one:

# %%
show_source(hello.hello)

# %%
for info in launch(hello.hello, 4):
    print(info)

# %% [markdown]
# Four processes (four different `pid`s), ranks 0 to 3, one world. The all-reduce of a tensor of
# ones gave 4 on every rank: each rank contributed its 1 and received the sum.
#
# ### 2.2 From the shell: `torchrun`
#
# On a single machine with several GPUs, or on several machines, you normally do not spawn from
# Python. A launcher starts the processes and tells each who it is through **environment
# variables**:
#
# ```bash
# # one machine, 4 processes (one per GPU)
# torchrun --standalone --nproc-per-node=4 train.py
#
# # two machines, 4 GPUs each; run this on both, pointing at the first one
# torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=node001:29500 train.py
# ```
#
# torchrun sets `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT` in each
# process. The program then calls `dist.init_process_group("nccl")`, which reads them. The course's
# `rtp_course.runtime.launcher.init_from_env()` does that, plus picking the backend and the GPU:

# %%
from rtp_course.runtime import launcher
show_source(launcher.init_from_env)

# %% [markdown]
# `rtp_course/notebook/demos/hello.py` has a `main()` that does exactly this. Let us run it with torchrun
# on 2 CPU processes (`python -m torch.distributed.run` is torchrun):

# %%
cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
       "-m", "rtp_course.notebook.demos.hello"]
print("$", " ".join(cmd[2:]).replace("torch.distributed.run", "torchrun", 1))
with tempfile.TemporaryDirectory() as logs:  # torchrun leaves its log folder in $TMPDIR otherwise
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": logs}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
print("".join(sorted(line + "\n" for line in done.stdout.splitlines() if line.startswith("[")))
      or done.stderr[-2000:])

# %% [markdown]
# ### 2.3 On a cluster: Slurm's `srun`
#
# On a Slurm cluster, `srun` itself starts one *task* per GPU and sets `SLURM_PROCID` (the rank),
# `SLURM_NTASKS` (the world size) and `SLURM_LOCALID` (the local rank). `init_from_env()` reads
# those when torchrun's variables are absent, and takes the first host of the job as the
# rendezvous address:
#
#     #!/bin/bash
#     #SBATCH --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --time=00:10:00
#     srun python -m rtp_course.notebook.demos.hello
#
# The course's templates in `slurm/` use both styles: `slurm/check.sbatch` (one node, the checker
# starts its own workers) and `slurm/train_multinode.sbatch` (one `torchrun` per node, started by
# `srun`). In all three ways, the *program* is the same: read who you are, join the group, work,
# leave the group (`dist.destroy_process_group()`).

# %% [markdown]
# ## 3. Collectives, one at a time
#
# A **collective** is an operation that *every* rank of a group calls, each with its own tensor.
# To make the pictures readable, rank $r$ starts with values $10(r+1) + i$: rank 0 holds 10, 11,
# ...; rank 1 holds 20, 21, ...; so a number tells you where it came from. In the pictures, a
# cell's colour is the rank its value came from; **grey hatched** cells hold a sum of several
# ranks' values; empty cells are buffers waiting to be filled.
#
# Starting processes takes seconds while these collectives take microseconds, so we run all of
# them in one launch of 4 ranks and then look at them one by one.

# %%
results = launch(collectives.run_all, 4)


def picture(name, **kwargs):
    before, after = collectives.states(results, name)
    plots.collective(before, after, title=f"dist.{name}" if name != "send_recv" else "dist.send / dist.recv",
                     **kwargs)
    plt.show()


# %% [markdown]
# ### 3.1 `broadcast`: one rank's tensor, copied to all
#
# The source rank's tensor overwrites every other rank's tensor (which must have the same shape
# and dtype). Use: making all ranks start from the **same weights** (notebook 02).

# %%
show_source(collectives.broadcast)
picture("broadcast", empty=0)

# %% [markdown]
# ### 3.2 `all_reduce`: everyone gets the sum
#
# Every rank ends with the element-wise sum (or max, min, product) of all ranks' tensors, **in
# place**: the input is overwritten. Use: averaging gradients in data parallelism; summing partial
# results in tensor parallelism.
#
# Cost: the ring algorithm sends and receives about $2\,\frac{N-1}{N}$ times the tensor's
# bytes per rank, almost independent of $N$. That is why all-reduce scales to thousands of GPUs.

# %%
show_source(collectives.all_reduce)
picture("all_reduce")

# %% [markdown]
# ### 3.3 `reduce_scatter`: sum, but each rank keeps only its piece
#
# Each rank's input is cut into $N$ chunks; rank $r$ receives the sum of everybody's chunk $r$.
# It moves half the bytes of an all-reduce ($\frac{N-1}{N}$ of the tensor per rank) and leaves
# each rank with $1/N$ of the result. Use: ZeRO and FSDP, where each rank only needs the gradient
# of its own shard.

# %%
show_source(collectives.reduce_scatter)
picture("reduce_scatter", before_chunks=4)

# %% [markdown]
# ### 3.4 `all_gather`: everyone gets everyone's piece
#
# The reverse of a scatter: each rank contributes a piece, and every rank ends with all pieces
# in rank order. Use: assembling a sharded weight (FSDP) or a sharded activation (TP).
#
# Look at the last two pictures together: **reduce-scatter followed by all-gather is an
# all-reduce.** That is exactly how the ring all-reduce works, and why its cost is twice that of
# each half.

# %%
show_source(collectives.all_gather)
picture("all_gather", after_chunks=4)

# %% [markdown]
# ### 3.5 `send` and `recv`: point to point
#
# Not a collective: only two ranks take part. The sender calls `dist.send(t, dst)`, the receiver
# `dist.recv(buffer, src)`, and both block until the transfer is done. Here even ranks send to
# the next odd rank. Use: rotating weight shards around a ring in RTP (notebook 05), pipeline
# parallelism.

# %%
show_source(collectives.send_recv)
picture("send_recv")

# %% [markdown]
# ### 3.6 `all_to_all`: a transpose across ranks
#
# Rank $r$ cuts its tensor into $N$ chunks and sends chunk $j$ to rank $j$; it receives chunk $r$
# from every rank. If you think of the ranks' tensors as the rows of a matrix, all-to-all
# transposes it. Use: mixture-of-experts routing, switching between sequence and head sharding.

# %%
show_source(collectives.all_to_all)
picture("all_to_all", before_chunks=4, after_chunks=4)

# %% [markdown]
# ### Summary
#
# | operation | before (rank $r$) | after (rank $r$) | bytes sent per rank (ring) | used in |
# |---|---|---|---|---|
# | broadcast | $x$ on the source | $x$ | $\approx$ size of $x$ | DP start-up |
# | all_reduce | $x_r$ | $\sum_j x_j$ | $2\frac{N-1}{N}\lvert x\rvert$ | DP gradients, TP forward/backward |
# | reduce_scatter | $x_r$ ($N$ chunks) | chunk $r$ of $\sum_j x_j$ | $\frac{N-1}{N}\lvert x\rvert$ | ZeRO, FSDP gradients |
# | all_gather | piece $p_r$ | $[p_0, \dots, p_{N-1}]$ | $(N-1)\lvert p\rvert$ | FSDP weights, TP activations |
# | send/recv | $x$ on the sender | $x$ on the receiver | $\lvert x\rvert$ | RTP rotation, pipelines |
# | all_to_all | $N$ chunks | chunk $r$ of every rank | $\frac{N-1}{N}\lvert x\rvert$ | mixture of experts |

# %% [markdown]
# ## 4. When it goes wrong: a deadlock
#
# Collectives and point-to-point calls **block** until the other side takes part. If ranks
# disagree about what comes next, they wait for each other forever. The two golden rules:
#
# 1. every rank of a group calls the **same collectives in the same order**, with tensors of
#    matching shapes;
# 2. every `send` has a matching `recv`, and the order of blocking calls cannot make both sides
#    wait first.
#
# Here is a program that breaks rule 2: both ranks begin by receiving.

# %%
show_source(collectives.deadlock)

# %% [markdown]
# On a real cluster this job would sit there until its time limit (NCCL's own timeout is 10
# minutes by default). `launch` gives up after `timeout` seconds, asks each stuck process for its
# Python stack, and reports it. Read the stacks from the bottom up to find *your* line:

# %%
try:
    launch(collectives.deadlock, 2, timeout=5)
except RankHung as e:
    print(f"ranks {e.stuck} did not finish within {e.timeout:.0f} s.")
    for rank in e.stuck:
        print(f"  rank {rank}: {where_waiting(e.stacks[rank])}")
    print("\nthe full stack of rank 0:\n" + e.stacks[0])

# %% [markdown]
# Both ranks wait in `recv` at the same line. The fix is to agree on an order: rank 0 sends first
# while rank 1 receives first. (Later, in notebook 05, you will use the non-blocking
# `isend`/`irecv`, which avoid the problem altogether.) The course's checker uses the same
# mechanism: if your exercise deadlocks, its report says which rank waited in which call.

# %%
show_source(collectives.no_deadlock)
print(launch(collectives.no_deadlock, 2))

# %% [markdown]
# ## 5. Submitting jobs to Slurm from the notebook
#
# On a GPU cluster, the notebook usually runs on a login node without GPUs, and GPU work is
# submitted to the Slurm queue. `rtp_course.cluster.slurm` does that for the course's checker: it submits
# `slurm/check.sbatch` (the same script you could `sbatch` from a shell), follows the job while it
# waits in the queue and runs, and turns the checker's report into text.
#
# ```python
# from rtp_course.cluster.slurm import submit_check
# job = submit_check(["data_parallel"], gpus=4)   # a checker job on 4 GPUs of one node
# job.wait()                                      # live status: PENDING (2nd in queue) -> RUNNING -> COMPLETED
# print(job.summary())                            # the checker's verdict, or why the job failed
# ```
#
# The shell equivalents are `rtp-course submit check data_parallel --gpus 4` and
# `sbatch --ntasks=4 slurm/check.sbatch data_parallel`. Your cluster may require
# `partition=`, `account=` or `qos=`, and `setup="module load ...; source ..."` to activate your
# environment inside the job.
#
# First: is there a Slurm cluster here at all?

# %%
from rtp_course.cluster.slurm import slurm_available, submit_check

have_slurm, why = slurm_available()
print(why)

# %% [markdown]
# If Slurm answered, the next cell submits a checker job for the exercise of notebook 02 (2 ranks
# on CPU, `gpus=0`; on a GPU cluster set `GPUS = 2`). Since you have not implemented it yet, expect
# its report to say "not implemented yet", and Slurm to list the job as FAILED: the checker exits
# with an error status when a check does not pass. Without Slurm, the cell just says so.

# %%
GPUS = 0          # 0: a CPU job with gloo; on a GPU cluster, the number of GPUs to use
if have_slurm:
    job = submit_check(["data_parallel"], gpus=GPUS, world_size=2, time="00:05:00")
    print(f"submitted job {job.job_id}; log: {job.log}")
    job.wait()
    print(job.summary())
else:
    print(f"Skipping the Slurm submission: {why.splitlines()[0]}")
    print("Everything in this course also runs locally: the check cells default to your CPU.")

# %% [markdown]
# ## 6. The rules every exercise follows
#
# From notebook 02 on you implement exercises, and a checker judges them on several processes.
# Each exercise's stub states its own rules in its docstring's **Rules** section; a few hold
# for every exercise, and are stated once, in `rtp_course/course/rules.py`. Every stub names
# the ones that apply to it, and a rejection quotes the rule it enforces (`rule 'Device'`).
# Two of them come from GPUs: the checker runs your code on CPU as NCCL would on GPUs, so
# that a grade earned on a laptop is the grade a GPU gives.

# %%
from IPython.display import Markdown, display

from rtp_course.course import rules

display(Markdown(rules.markdown()))

# %% [markdown]
# ## What's next
#
# You can start processes, put them in a group, and move tensors between them. In notebook **02**
# you will use `broadcast` and `all_reduce` to build data-parallel training from scratch, and
# check it against training on a single process.
