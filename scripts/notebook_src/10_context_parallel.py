# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · Ring attention: context parallelism on the rotation (exercise E8)
#
# Everything so far split the **model** (tensor parallelism, RTP) or the **batch** (data
# parallelism). Neither helps when a single sequence is too long: a transformer layer's
# activations grow with the sequence length $S$, and its attention scores with $S^2$. At
# $S = 128\,000$ tokens, one head's score matrix in bfloat16 is 32 GB.
#
# **Context parallelism** splits the **sequence** over the $N$ ranks of a group: each rank holds
# the queries, keys and values of $S/N$ tokens. Everything in a transformer but attention works on
# each token alone, so it runs unchanged on the rank's tokens. Attention needs every key and value
# for every query: **ring attention** (Liu, Zaharia and Abbeel, *Ring Attention with Blockwise
# Transformers*, arXiv 2310.01889) passes the blocks of keys and values around the ring of
# notebook 05 while each rank computes with the block in hand, and merges the partial results
# exactly, with the **log-sum-exp trick** that FlashAttention uses inside one GPU. No rank ever
# holds more than two blocks of keys and values, nor any $S \times S$ matrix.
#
# It is RTP's pattern with other tensors: there, weight shards travel and each rank keeps its own
# batch; here, key/value blocks travel and each rank keeps its own queries. The backward pass
# even sends the gradients of the keys and values home as RTP's accumulators.
#
# In this notebook you
#
# 1. **implement** attention over one block of keys, and the exact merge of two blocks' results;
# 2. **implement** ring attention's forward pass;
# 3. **implement** the zig-zag sharding that balances **causal** attention, and causal ring
#    attention on it;
# 4. **implement** the backward pass;
# 5. check your work;
# 6. watch the rotations hide behind the compute on a profiler timeline;
# 7. get graded.
#
# You will edit **`rtp_course/context_parallel.py`**; it uses your `rtp_course/rotation.py`
# (notebook 05).

# %%
import matplotlib.pyplot as plt

from rtp_course.checker import check
from rtp_course.notebook import diagrams, timeline, trace, where_checks_run
from rtp_course.notebook.demos import context_parallel as demo
from rtp_course.notebook.demos import run_demo
from rtp_course.course.impl import default_impl

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. Task E8.1 · One block at a time: `block_attention` and `merge_blocks`
#
# Take one query $q$ and keys $k_1, \dots, k_n$ with values $v_1, \dots, v_n$. Its scores are
# $s_j = q \cdot k_j / \sqrt{d}$ and its output is
#
# $$\text{out} = \frac{\sum_j e^{s_j} v_j}{Z}, \qquad Z = \sum_j e^{s_j}.$$
#
# Cut the keys into two blocks $A$ and $B$. Then $Z = Z_A + Z_B$, and with each block's own
# output $\text{out}_A = \sum_{j \in A} e^{s_j} v_j / Z_A$:
#
# $$\text{out} = \frac{Z_A\, \text{out}_A + Z_B\, \text{out}_B}{Z_A + Z_B}.$$
#
# So a block's result is enough, as long as it comes with its **log-sum-exp**
# $\text{lse}_A = \log Z_A$: with $\text{lse} = \log(e^{\text{lse}_A} + e^{\text{lse}_B})$,
#
# $$\text{out} = e^{\text{lse}_A - \text{lse}}\, \text{out}_A + e^{\text{lse}_B - \text{lse}}\, \text{out}_B .$$
#
# The two weights are each block's share of the total, and they add up to 1. The merge is exact,
# in any order, and it never needs the scores again.
#
# **Never form $e^{\text{lse}}$ itself.** $e^{710}$ is infinite in float64 ($e^{89}$ in float32),
# and scores of a few hundred are ordinary in a trained model. Subtract the **running max**
# $m = \max(\text{lse}_A, \text{lse}_B)$ first: $w_A = e^{\text{lse}_A - m}$ and
# $w_B = e^{\text{lse}_B - m}$ are at most 1, and
#
# $$\text{lse} = m + \log(w_A + w_B), \qquad \text{out} = \frac{w_A\, \text{out}_A + w_B\, \text{out}_B}{w_A + w_B}.$$
#
# Inside a block the same trick gives $\text{lse}_A = m_A + \log \sum_{j \in A} e^{s_j - m_A}$ with
# $m_A$ the row's largest score: `torch.logsumexp` does it. This is the **online softmax** of
# FlashAttention: keep a running max $m$, a running sum $\ell = \sum e^{s_j - m}$ and the running
# (unnormalised) output; when a block raises the max, rescale what you have by $e^{m_\text{old} -
# m_\text{new}}$. Merging normalised results with their lse, as here, is the same computation in
# another order.
#
# Masks: a masked score is $-\infty$, and $e^{-\infty} = 0$. A row that sees **no** key of a block
# has $Z_A = 0$: $\text{out}_A = 0$ and $\text{lse}_A = -\infty$, so that it weighs nothing in a
# merge. Make sure such rows give 0 and $-\infty$, not NaN ($-\infty - (-\infty)$ is NaN).
#
# **Your task.** In `rtp_course/context_parallel.py`, implement `block_attention(q, k, v, mask)`
# (returns `(out, lse)`) and `merge_blocks(out_a, lse_a, out_b, lse_b)`. The cell splits 7 keys in
# blocks of 3 and 4 and merges them, with ordinary scores, then with scores in the thousands:

# %%
for scale in (1.0, 1000.0):
    out = run_demo(demo.blocks_demo, 1, scale, needs="block_attention and merge_blocks "
                                                      "(rtp_course/context_parallel.py)")
    if out is None:
        break
    res = out[0]
    print(f"scores up to {res['max_score']:.0f}: merged against attention over all the keys: "
          f"largest difference {res['error']:.1e}")
    print(f"   lse of block A {[round(x, 2) for x in res['lse_a']]}\n"
          f"   lse of block B {[round(x, 2) for x in res['lse_b']]}\n"
          f"   merged lse     {[round(x, 2) for x in res['lse']]}\n"
          f"   serial lse     {[round(x, 2) for x in res['serial_lse']]}")

# %% [markdown]
# The merged lse is always a little above the larger of the two: $\log(e^a + e^b) = \max(a, b) +
# \log(1 + e^{-|a - b|})$. With large scores the two blocks' lse are far apart, and the block with
# the larger one takes (almost) all the weight.
#
# ## 2. Task E8.2 · The ring: `ring_attention_forward`
#
# Rank $r$ holds $Q_r, K_r, V_r$: $[\text{batch}, \text{heads}, S/N, d]$. It needs every rank's
# $K_s, V_s$. As in notebook 05 the blocks rotate **clockwise**: at step $i$ rank $r$ holds rank
# $s = (r - i) \bmod N$'s block. At each step:
#
# ```python
# if i < N - 1:                          # start passing the block on (rotate_async)...
#     incoming = rotate_async(K), rotate_async(V)
# out, lse = merge_blocks(out, lse, *block_attention(Q, K, V))    # ...compute meanwhile
# K, V = incoming[0].wait(), incoming[1].wait()                     # the next block
# ```
#
# starting from $\text{out} = 0$, $\text{lse} = -\infty$ on every row (nothing seen yet). After $N$
# steps every block has been merged once: $N - 1$ rotations of $K$ and of $V$. The left grid shows
# who holds which block at each step (the right one is section 4's):

# %%
diagrams.ring_attention_schedule(4)
plt.show()

# %% [markdown]
# Per rank, that is $2(N-1)$ blocks received, $(N-1)/N$ of the whole sequence's keys and values,
# one at a time; the scores computed at once are $(S/N)^2$ per head instead of $S^2$.
#
# **Your task.** Implement `ring_attention_forward(q, k, v, causal=False, group=None)` for
# `causal=False` (section 3 adds the causal case). `ring_attention(q, k, v, causal, group)` is
# given: it wraps your forward (and, in section 4, your backward) in a `torch.autograd.Function`.
# The cell runs it on 4 ranks, each with its own 4 tokens of a 16-token sequence, and compares
# every rank's output with `F.scaled_dot_product_attention` on the whole sequence:

# %%
out = run_demo(demo.ring_demo, 4, False, 4, 2, 8, False,
               needs="ring_attention_forward (rtp_course/context_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %% [markdown]
# Expected: errors around $10^{-7}$ (float32), $3 \times 2$ receives on each rank ($K$ and $V$
# of the 3 other ranks), at most 2 blocks held at once: the one in hand and the one arriving.
#
# ## 3. Task E8.3 · Causal attention, balanced: `zigzag_shard`, `zigzag_unshard`
#
# With a causal mask, query $p$ sees the keys at positions $\le p$ only. Cut the sequence in $N$
# contiguous pieces and the work is unfair: rank 0's queries see only their own block, rank
# $N-1$'s see everything, so rank $N-1$ computes about $2N-1$ times as many scores as rank 0, and
# every other rank waits for it at each step. (Exactly: with $b$ tokens a rank, rank 0 has
# $b(b+1)/2$ unmasked scores and rank $N-1$ has $b^2(N-1) + b(b+1)/2$, a ratio of
# $1 + 2b(N-1)/(b+1)$, which tends to $2N-1$ for long pieces: the figure's $b = 4$, $N = 4$ give
# $1 + 24/5 = 5.80$.)
#
# **Zig-zag sharding** cuts the sequence into $2N$ chunks of $c = S/2N$ tokens and gives rank $r$
# chunks $r$ and $2N-1-r$: one early, one late. The rows of the causal mask below are coloured by
# the rank holding that query; under each mask, every rank's number of unmasked scores:

# %%
diagrams.causal_work(4, chunk=2)
plt.show()

# %% [markdown]
# Zig-zag gives every rank $c^2(2N-1) + c(c+1)$ unmasked scores. It balances every step too. Rank
# $r$'s local token $j$ sits at position $rc + j$ ($j < c$) or $(2N-1-r)c + j - c$: positions grow
# with $j$. With rank $s$'s block in hand (its chunks $s$ and $2N-1-s$):
#
# * $s = r$: the block itself, causally: local query $j$ sees local key $j' \le j$, a lower
#   triangle;
# * $s < r$: chunk $s$ comes before both of the rank's chunks, chunk $2N-1-s$ after both: every
#   query sees the block's **first half**, whole, and nothing of its second;
# * $s > r$: chunk $r$ comes before both of the block's chunks, chunk $2N-1-r$ after both: only the
#   queries' **second half** sees the block, all of it.
#
# Off the diagonal, every rank does half a block of work at every step. (Masking the whole block
# by positions, $p_q \ge p_k$, gives the same results with twice the work; it is allowed. Masking
# every block with the lower triangle of *local* indices is not: positions are global.)
#
# **Your task.** Implement `zigzag_shard(x, dim, group=None)` (this rank's two chunks, in that
# order; `ValueError` if $2N$ does not divide the length), `zigzag_unshard(x_local, dim,
# group=None)` (every rank's shards back in sequence order, on every rank: gather them with
# your `ring_all_gather`, then reorder), and `causal=True` in `ring_attention_forward`.

# %%
out = run_demo(demo.zigzag_demo, 4, needs="zigzag_shard and zigzag_unshard "
                                          "(rtp_course/context_parallel.py)")
if out is not None:
    for r, res in enumerate(out):
        print(f"rank {r} holds positions {res['positions']}; unsharded: {res['unsharded']}")

# %% [markdown]
# Now causal ring attention, each rank holding its zig-zag shard (made by your `zigzag_shard`):

# %%
out = run_demo(demo.ring_demo, 4, True, 4, 2, 8, False,
               needs="causal ring_attention_forward and zigzag_shard "
                     "(rtp_course/context_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %% [markdown]
# ## 4. Task E8.4 · The backward pass: `ring_attention_backward`
#
# With $P = \text{softmax}(S)$ row by row and $\text{out} = PV$, the gradients from
# $\text{dout} = \partial L / \partial\, \text{out}$ are
#
# $$dV_j = \sum_i P_{ij}\, \text{dout}_i, \qquad dP_{ij} = \text{dout}_i \cdot v_j, \qquad
# dS_{ij} = P_{ij}\,(dP_{ij} - \delta_i), \quad \delta_i = \text{dout}_i \cdot \text{out}_i,$$
#
# $$dq_i = \frac{1}{\sqrt d} \sum_j dS_{ij}\, k_j, \qquad dk_j = \frac{1}{\sqrt d} \sum_i dS_{ij}\, q_i .$$
#
# ($\delta_i = \sum_j P_{ij}\, dP_{ij}$: the softmax's backward, computed once from the output.)
# Every term needs $P_{ij} = e^{s_{ij} - \text{lse}_i}$ of one block only, so backward
# **recomputes** it block by block from the lse that forward saved: nothing of size $S \times S$
# is kept, as FlashAttention does.
#
# Rank $r$ computes $dq$ of its own queries entirely: it sums over every block, which visit it
# again (this time **counterclockwise**: step $k$ holds rank $(r + k) \bmod N$'s block). But its
# queries also contribute to $dk$ and $dv$ of **every** block, and those belong to the block's
# owner. They travel as RTP's gradient accumulators (notebook 06): rank $r$ adds its part of block
# $s$'s gradients to the accumulators of block $s$ that arrive from rank $r+1$ and passes them to
# rank $r-1$, which holds block $s$ next. After $N-1$ block moves and $N$ accumulator moves, the
# accumulators of block $r$ come home to rank $r$ with every rank's contribution: its $dk$, $dv$.
# The right grid of section 2 shows the schedule. The causal cases of section 3 hold in backward
# too: they decide which scores of the block in hand count.
#
# **Your task.** Implement `ring_attention_backward(grad_out, q, k, v, out, lse, causal, group)`,
# returning $(dq, dk, dv)$. The given `RingAttention` calls it. The cell compares every rank's
# gradients with those of serial attention, causal:

# %%
out = run_demo(demo.ring_demo, 4, True, 4, 2, 8, True,
               needs="ring_attention_backward (rtp_course/context_parallel.py)")
if out is not None:
    print(demo.describe(out))

# %% [markdown]
# Backward received, per rank, $N - 1$ blocks of $K$ and $V$ and $N$ of accumulators: $2N - 1$
# blocks, and held at most 4 at once (the block in hand and the one arriving, the accumulators
# arriving and the ones being added to), which rule 'Memory' allows. The counts are in blocks of
# $K$ and $V$ **together**: $K$, $V$, $dK$ and $dV$ each weigh half a block, so a count such as
# 3.5 means that at the peak one of the four halves was not alive (say, the $dV$ that arrived
# was already added and dropped when the next $dK$ receive was posted): fewer is fine.
#
# ## 5. Check your work
#
# The checker runs every function on 1 to 4 ranks, each with its own tokens, against serial
# attention: outputs (also with scores in the thousands), the gradients of $q$, $k$ and $v$, and
# a one-layer attention block trained with SGD and Adam steps; the zig-zag layout and its balance;
# and the structure: only point-to-point transfers with the two ring neighbours carry blocks,
# their number and bytes, the overlap (between posting a receive and waiting for it, your rank
# computes), and the received blocks held at once.

# %%
print(where_checks_run())   # NCCL on a machine with 4 GPUs or more, else CPU and gloo
report = check("context_parallel")          # world sizes 1, 2, 3 and 4

# %% [markdown]
# On a cluster, the same check on GPUs through Slurm (notebook 01, section 5): set `USE_SLURM`.

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import check_on_slurm
    check_on_slurm(["context_parallel"], gpus=GPUS)

# %% [markdown]
# ## 6. Overlap: a timeline
#
# `demo.attention_timeline` runs causal ring attention on 512 tokens a rank (4 heads of 64) under
# `torch.profiler`, forward then backward. Each rotation your code starts with `rotate_async` is
# timed from posting to completion, and named by what it carries: a block of keys and values, or
# gradient accumulators (`rtp_course/notebook/trace.py`, as in notebooks 05 and 06).

# %%
RANKS = 2          # try 3 or 4 on a machine with that many free cores
out = run_demo(demo.attention_timeline, RANKS, timeout=180,
               needs="ring_attention (rtp_course/context_parallel.py)")
if out is not None:
    # each phase from its own start; the titles and the lines below: the slowest rank's times
    timeline.plot_phases(out, RANKS, names={"weight rotation": "k, v block in flight",
                                            "accumulator rotation": "dk, dv accumulators in flight"})
    path = trace.write_trace([res["events"] for res in out], "traces/10_ring_attention.json")
    print(f"the whole profiler trace: {path} (open it in ui.perfetto.dev)")

# %% [markdown]
# How to read it: each timeline starts at its own phase's start, and its title is the phase's
# time on the slowest rank; the line printed under it says, on that rank, how long transfers were
# in flight in that time and for how much of it the rank was computing. In forward, each orange
# bar (a block of $K$ and $V$ in flight) should lie under a blue one (the rank attending with the
# block in hand), and the `wait()` that follows should be short. In backward the green bars (accumulators) start after each step's compute: they carry its
# result, and hide behind the next step's compute. With causal attention every step but the first
# is half a block of work: long sequences hide the rotations best, since compute grows with the
# square of the block's tokens and the transfer only linearly. On a CPU the transfers need cores
# too (notebook 05, section 6); on GPUs NCCL moves them on its own stream.
#
# ## 7. Grading
#
# The cell below is read-only and graded after you submit: it runs the public and hidden checks on
# your `rtp_course/context_parallel.py` (and the `rotation.py` it uses) and awards up to 20
# points, in proportion to the checks that pass. In your copy the cell is empty: the grader puts
# the tests back. Use the check cell of section 5 to know where you stand.

# %% deletable=false editable=false nbgrader={"grade": true, "grade_id": "e8_context_parallel", "locked": true, "points": 20.0, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
from rtp_course.instructor.grading import grade
grade("context_parallel")
### END HIDDEN TESTS

# %% [markdown]
# ## What's next
#
# Context parallelism composes with the others: a group of ranks splits the sequence, and
# data parallelism (notebook 02) runs across such groups, the gradients of the replicated weights
# summed over both (the checker's attention layer did that sum for you). Real systems add what
# this notebook left out: grouped-query attention (fewer key/value heads, so cheaper rotations),
# FlashAttention kernels for each block, and all-to-all schemes (DeepSpeed-Ulysses) that swap the
# sequence split for a head split inside attention.
