# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Ring rotation and overlap (exercise E4)
#
# Tensor parallelism (notebook 04) splits every weight over the ranks and exchanges
# *activations* with all-reduces. Rotated Tensor Parallelism (RTP, notebook 06) takes another
# road: every rank keeps only its own shard of each weight, and the shards it does not store
# **travel around a ring of ranks**, one step at a time, while each rank computes with the shard
# it currently holds. The single communication primitive it needs is the **rotation**: every rank
# passes one tensor to its neighbour, at the same time.
#
# In this notebook you
#
# 1. put the ranks on a ring and name each rank's neighbours;
# 2. **implement** one rotation, blocking and asynchronous;
# 3. **implement** an all-gather made of $N-1$ rotations;
# 4. **implement** a reduce-scatter made of $N-1$ rotations;
# 5. check your work;
# 6. watch, on a timeline recorded in a real run, a transfer hide behind computation;
# 7. get graded.
#
# You will edit **`rtp_course/rotation.py`**.

# %%
import matplotlib.pyplot as plt
import torch

from rtp_course.notebook import diagrams, plots, timeline, trace
from rtp_course.notebook.demos import rotation as demo
from rtp_course.notebook.demos import run_demo, show_source
from rtp_course.course.impl import default_impl

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E4.1 · The ring: `ring_peers`
#
# Put the $N$ ranks of a group on a ring, $0 \to 1 \to \dots \to N-1 \to 0$. One **rotation**
# moves one tensor per rank one step along the ring, every rank at once:
#
# | direction | rank $r$ sends to | rank $r$ receives from |
# |---|---|---|
# | clockwise | $(r+1) \bmod N$ | $(r-1) \bmod N$ |
# | counterclockwise | $(r-1) \bmod N$ | $(r+1) \bmod N$ |
#
# With 4 ranks holding $[A, B, C, D]$, a clockwise rotation leaves $[D, A, B, C]$: rank 0 now
# holds what rank 3 had. After $k$ clockwise rotations, rank $r$ holds what rank $(r-k) \bmod N$
# started with, so after $N-1$ of them **every rank has seen every tensor**, while holding only one
# at a time. That is the whole trick of RTP.
#
# **Group ranks and global ranks.** $r$ and $N$ are positions *in the group*
# (`dist.get_rank(group)`, `dist.get_world_size(group)`). The point-to-point calls, however, take
# **global** ranks: with a sub-group, translate each peer with `dist.get_global_rank(group, peer)`
# (with `group=None` the two coincide). In notebook 08 the ring of a tensor-parallel group is
# ranks $\{2, 3\}$ of a world of 4: rank 2's clockwise neighbour is global rank 3, not 1.
#
# **Your task.** In `rtp_course/rotation.py`, implement `ring_peers(direction, group)`: it returns
# `(destination, source)` as global ranks, and raises a `ValueError` naming both valid directions
# for anything else. The cell below asks every rank of 4 for its peers.

# %%
out = run_demo(demo.peers, 4, needs="ring_peers (rtp_course/rotation.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}:  " + "   ".join(f"{d}: sends to {dst}, receives from {src}"
                                          for d, (dst, src) in res.items()))

# %% [markdown]
# Expected: clockwise, rank 0 sends to 1 and receives from 3; counterclockwise, the reverse.
#
# ## 2. Task E4.2 · One rotation: `rotate_async`, `RotationHandle` and `rotate`
#
# A rotation is a send *and* a receive on every rank. How you post them matters:
#
# * If every rank first calls a blocking `dist.send`, every rank waits for a receiver that never
#   comes, because its neighbour is itself stuck in `send`: a **deadlock** (notebook 01 showed
#   one). Post the receive and the send **together**, then wait for both:
#   `dist.batch_isend_irecv([dist.P2POp(dist.isend, t, dst, group), dist.P2POp(dist.irecv, buf, src, group)])`
#   returns a list of *work* objects, one per transfer.
# * The receiver allocates the buffer (`torch.empty`), so it must know the shape and dtype of what
#   arrives. By default it is the same as what it sends; RTP's uneven shards pass `recv_shape`.
# * Never modify the caller's tensor; return a new one. Send `tensor.detach()`: nothing here is
#   differentiable (RTP will decide what a rotation means for gradients).
# * With $N=1$ there is nobody to talk to: return a clone.
#
# **`rotate_async`** starts the rotation and returns at once a **`RotationHandle`** holding the
# works and both buffers (the send buffer must stay alive until the send completes). The handle's
# `wait()` waits on **every** work, the send's too, and returns the received tensor (a send whose
# work is dropped unwaited may never be delivered with gloo, and NCCL may still be reading its
# buffer; the checker tells you if a work was never waited); `is_completed()`
# polls without blocking. Calling `wait()` twice must be safe: forget the works once waited.
# **`rotate`** is simply `rotate_async(...).wait()`.
#
# Why asynchronous? Because while the bytes travel, the rank can compute with what it already
# has. Section 6 measures how much that buys.
#
# The next cell rotates each rank's two values once in each direction on 4 ranks. Colours say
# which rank a value started on.

# %%
for direction in ("clockwise", "counterclockwise"):
    out = run_demo(demo.one_rotation, 4, direction,
                   needs="rotate_async, RotationHandle and rotate (rtp_course/rotation.py)")
    if out is None:
        break
    plots.collective({r: res[0] for r, res in enumerate(out)},
                     {r: res[1] for r, res in enumerate(out)}, title=f"one {direction} rotation")
    plt.show()

# %% [markdown]
# Clockwise, every value moved down one row (rank $r$ got rank $r-1$'s), and rank 0 got rank 3's:
# the ring wraps around. Counterclockwise, the other way.
#
# Now the asynchronous part. Each rank rotates an 8 MiB tensor once (untimed: it connects the
# ring), then starts a second rotation and immediately asks whether it is finished. Rank 0
# starts that second rotation 200 ms late, so rank 1's source has not sent anything when rank
# 1's `rotate_async` returns:

# %%
out = run_demo(demo.async_probe, 2, needs="rotate_async and RotationHandle (rtp_course/rotation.py)")
if out is not None:
    for r, res in enumerate(out):
        late = f"started {res['late_ms']:.0f} ms late" if res["late_ms"] else \
            f"its source, rank {res['source']}, started late"
        print(f"rank {r} ({late}): rotate_async returned after {res['returned_after_ms']:.2f} ms, "
              f"completed then: {res['done_when_returned']};  the tensor was there after "
              f"{res['arrived_after_ms']:.1f} ms, completed then: {res['done_after_wait']};  "
              f"received rank {res['received_from']}'s tensor; second wait() gives the same "
              f"tensor: {res['again']}")

# %% [markdown]
# Look at rank 1. Its `rotate_async` returns in a fraction of a millisecond and its handle is not
# completed: it cannot be, rank 0 had not sent yet. Its tensor is there about 200 ms later, when
# rank 0 sends. A handle that is already completed when it comes back there means the call
# waited: look for a `wait()` inside `rotate_async`. Between the two moments, the rank is free
# to compute. Rank 0, the late one, finds its peer ready: its own transfer may finish at once
# (on a GPU, an NVLink copy of 8 MiB takes microseconds), which says nothing about waiting.
#
# Why the untimed first rotation? NCCL connects two ranks at their first transfer, and that
# setup blocks the calling rank until its peer takes part. On a GPU the first `rotate_async` of
# a fresh group may therefore return late, in any correct implementation. The checker connects
# the ring the same way before its `rotate_async` check holds a rank back.
#
# ## 3. Task E4.3 · Ring all-gather from rotations: `ring_all_gather`
#
# All-gather (notebook 01) gives every rank the concatenation $[x_0, x_1, \dots, x_{N-1}]$ of all
# ranks' tensors. With rotations: keep your own $x_r$, then rotate $N-1$ times clockwise; after
# the $k$-th rotation you hold $x_{(r-k) \bmod N}$, so store it at position $(r-k) \bmod N$ (rank
# order, not arrival order). The $N$-th rotation would bring back your own tensor: stop at $N-1$.
#
# Each rank sends and receives $N-1$ pieces of size $|x|$: that is the minimum for an all-gather,
# and it is how NCCL's *ring* algorithm does it. Every link of the ring is busy at every step, and
# nobody talks to more than two neighbours.
#
# **Your task:** implement `ring_all_gather(tensor, dim=0, group=None)` with your `rotate` only (the
# checker verifies that no collective is called). The picture shows, for 4 ranks, what each rank
# holds after each rotation (made with your `rotate`); then your result is compared with
# `dist.all_gather`.

# %%
out = run_demo(demo.all_gather_steps, 4, needs="rotate and ring_all_gather (rtp_course/rotation.py)")
if out is not None:
    diagrams.ring_steps([res["steps"] for res in out], title="what each rank holds, 3 clockwise rotations")
    plt.show()
    for r, res in enumerate(out):
        print(f"rank {r}: ring_all_gather -> {res['ring'].tolist()}   "
              f"equal to dist.all_gather: {torch.equal(res['ring'], res['expected'])}")

# %% [markdown]
# ## 4. Task E4.4 · Ring reduce-scatter from rotations: `ring_reduce_scatter`
#
# Reduce-scatter is all-gather's mirror: every rank holds a tensor cut in $N$ chunks, and rank $r$
# must end with $\sum_q x_q^{(r)}$, the sum over ranks of **chunk $r$**. With rotations, a
# *partial sum* travels around the ring and each rank it visits adds its own chunk of the same
# index:
#
# * rank $r$ starts the partial sum of chunk $(r-1) \bmod N$ (its own copy of that chunk);
# * at each of $N-1$ steps, it rotates its partial sum clockwise, receives its left neighbour's,
#   and adds its own chunk of the index that partial sum is for: after the $k$-th rotation that is
#   chunk $(r-1-k) \bmod N$;
# * after $N-1$ steps the sum that arrives at rank $r$ started at rank $r+1$ (chunk $r$) and has
#   visited every rank: it is complete.
#
# Again $N-1$ steps of one chunk each: $(N-1)/N$ of the tensor sent per rank. A ring
# reduce-scatter followed by a ring all-gather is the bandwidth-optimal **all-reduce**, which DDP
# runs on every gradient. In RTP's backward pass you will see the same pattern with gradient
# accumulators that travel around the ring collecting every rank's contribution.
#
# **Your task:** implement `ring_reduce_scatter(tensor, dim=0, group=None)`: `ValueError` if the
# size of `dim` is not divisible by $N$; do not modify `tensor`.

# %%
out = run_demo(demo.reduce_scatter_demo, 4, needs="rotate and ring_reduce_scatter (rtp_course/rotation.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r}: input {res['input'].tolist()} -> chunk {r} of the sum: "
              f"{res['output'].tolist()}   expected {res['expected'].tolist()}")

# %% [markdown]
# ## 5. Check your work
#
# The checker runs every function on 1 to 4 ranks, in both directions, on a sub-group, with
# uneven receive shapes; it records your communication (point-to-point only, $N-1$ rotations for
# the ring collectives, no collective where a rotation is asked) and verifies that
# `rotate_async` returns before the transfer is done.

# %%
from rtp_course.checker import check
from rtp_course.notebook import where_checks_run

print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("rotation")          # world sizes 1, 2, 3 and 4

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.
# `check_on_slurm` submits the job, follows it and prints the report.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["rotation"], gpus=GPUS)

# %% [markdown]
# ## 6. Overlap: a timeline of a real run
#
# RTP's forward pass through one layer is a loop of $N$ steps: compute with the shard in hand,
# pass it on, take the next one. There are two ways to write the step:
#
# ```python
# # sequential                                  # overlapped
# y = compute(x, shard)                         handle = rotate_async(shard)      # start moving
# shard = rotate_async(shard).wait()            y = compute(x, shard)             # meanwhile, compute
#                                               shard = handle.wait()             # usually done already
# ```
#
# Sequential, each step costs compute **plus** transfer. Overlapped, it costs about the
# **larger** of the two: the transfer runs while the rank computes, on the network card and
# (with gloo) a background thread.
#
# `demo.overlap_run` runs both loops on real ranks with your `rotate_async`: each shard is a
# $512 \times 1024$ matrix (2 MiB), and "compute" is a few products $x\,W_s^\top$, as many as
# take about as long as one transfer on this machine (it measures both first). Each rank runs
# under `torch.profiler`: its compute and its blocked `wait()` are `record_function` regions, and
# each transfer is in the trace from `rotate_async` until the handle reports completion (a
# poller thread sees that moment; the profiler does not follow gloo's own thread).
# `rtp_course/notebook/trace.py` does the recording; here is the loop:

# %%
show_source(demo._one_pass)

# %%
RANKS = 2          # try 3 or 4 on a machine with that many free cores
out = run_demo(demo.overlap_run, RANKS, needs="rotate_async and RotationHandle (rtp_course/rotation.py)")
if out is not None:
    runs = {way: [res[way]["intervals"] for res in out] for way in ("sequential", "overlapped")}
    totals = {way: timeline.summary(per_rank) for way, per_rank in runs.items()}
    longest = max(t["total"] for t in totals.values())
    fig, axes = plt.subplots(2, 1, figsize=(10, 1.6 + 1.3 * RANKS), sharex=True)
    for ax, (way, per_rank) in zip(axes, runs.items()):
        timeline.plot_timeline(per_rank, ax=ax, xmax=1.05 * longest,
                               title=f"{way}: {1e3 * totals[way]['total']:.1f} ms")
    fig.tight_layout()
    plt.show()
    print(f"{out[0]['repeats']} products per shard; slowest rank's times in ms:")
    for way, t in totals.items():
        print(f"  {way:>10}: total {1e3 * t['total']:6.1f}   computing {1e3 * t['compute']:6.1f}   "
              f"transfers in flight {1e3 * t['transfer']:6.1f}   blocked in wait() {1e3 * t['wait']:6.1f}   "
              f"transfer during compute {1e3 * t['overlap']:6.1f}")
    print("overlapped:", timeline.overlap_verdict(totals["overlapped"], RANKS))
    path = trace.write_trace([res["overlapped"]["events"] for res in out], "traces/05_overlapped.json")
    print(f"the whole profiler trace of the overlapped run: {path} (open it in ui.perfetto.dev)")

# %% [markdown]
# How to read it: each rank has a lane per kind of region: compute (blue), blocked in `wait()`
# (red hatches), weight rotations in flight (orange, one bar per rotation; the accumulator lane
# stays empty here, it fills in notebook 06). The trace file holds the same regions beside every
# operation torch ran, one process per rank. In the sequential run the orange bars
# sit in gaps of the blue lane: every transfer is paid in full, and the red hatches show the rank
# waiting for it, often for its neighbour who has not posted its send yet. In the overlapped run
# the orange bars lie *under* blue ones: the transfer happened while the rank computed, and the
# `wait()` that follows returns (almost) at once.
#
# Three honest remarks about what you see on a CPU:
#
# * With gloo, a transfer is a copy through the TCP stack by a background thread, which needs a
#   CPU core too. When there are more busy processes than cores (a laptop running 4 ranks, or a
#   CI machine shared with others), transfer and compute slow each other down and the gain
#   shrinks; compute bars get longer in the overlapped run. On GPUs, NCCL moves the bytes over
#   NVLink or the network on its own stream, and the overlap is close to free.
# * What a GPU shows: the host only queues kernels there, and NCCL's `wait()` returns at once
#   (it makes the compute stream wait for the transfer's stream). So on a GPU the recording
#   synchronizes the GPU at the end of every region: a blue bar lasts until its kernels are done,
#   a red one as long as the GPU would stall for the transfer. Over NVLink a 2 MiB shard moves
#   in tens of microseconds, so the demo picks few products per shard and the bars are short.
# * Timings at the millisecond scale are noisy. The demo keeps the fastest of three passes of
#   each loop; run the cell again and the details change, the shape does not.
# * Overlap hides communication only if there is enough compute to hide it behind. For a layer
#   of $b$ tokens and a shard of $m \times k$ weights, compute grows like $b\,m\,k$ and transfer
#   like $m\,k$: large batches hide the rotation well, a batch of one token does not.
#
# ## 7. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/rotation.py` and awards up to 10 points, in proportion to the checks that pass.
# In your copy the cell is empty: the grader puts the tests back. Use the check cell of section 5
# to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e4_rotation", "locked": true, "points": 10.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("rotation")
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# You can now move a shard around the ring while computing with another. Notebook **06** builds
# RTP on it: a layer that holds one shard of its weights, computes the full output by rotating
# the others through in the forward pass, and rotates weights and gradient accumulators back in
# the backward pass, so that each rank ends with the gradient of its own shard.
