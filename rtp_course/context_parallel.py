"""Exercise E8: ring attention, context parallelism on the rotation primitive of E4.

Notebook: notebooks/10_context_parallel.ipynb. Check: `rtp-course check context_parallel`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E8.1  section 1: `block_attention`, `merge_blocks`
    E8.2  section 2: `ring_attention_forward` (causal=False)
    E8.3  section 3: `zigzag_shard`, `zigzag_unshard`, and causal=True in `ring_attention_forward`
    E8.4  section 4: `ring_attention_backward`

A long sequence does not fit one device: its activations grow with its length S, and the
attention scores with S^2. CONTEXT PARALLELISM cuts the SEQUENCE over the N ranks of
`group`: rank r holds the queries, keys and values of its own tokens only,

    q, k, v: [batch, heads, seq_local, head_dim]       (S = N * seq_local tokens in all;
                                                         every rank's blocks have one shape)

Every query attends to every key (or, causal, to every earlier one), so every rank needs every
rank's keys and values. RING ATTENTION passes them around the ring of E4 while it computes with
the block in hand: a rank never holds more than two blocks of keys and values, nor any
S x S matrix. The result is exactly serial attention, F.scaled_dot_product_attention on the
whole sequence (scale 1 / sqrt(head_dim)), for this rank's queries.

ONE BLOCK AT A TIME (E8.1). A query's scores are s_j = (q . k_j) / sqrt(head_dim), and

    out = sum_j exp(s_j) v_j / sum_j exp(s_j)          lse = log sum_j exp(s_j)

block_attention(q, k, v, mask) gives (out, lse) over the keys of one block. Two blocks'
results merge EXACTLY, without their scores (the log-sum-exp trick, "online softmax"):

    lse = log(exp(lse_a) + exp(lse_b))
    out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

(exp(lse_b) is block b's sum of exp(s_j): each block weighs its share of the total.) Never form
exp(lse) itself: a score of a few hundred overflows (exp(710) is inf in float64, exp(89) in
float32). Rescale by the RUNNING MAX m = max(lse_a, lse_b): w_a = exp(lse_a - m) and
w_b = exp(lse_b - m) are at most 1, lse = m + log(w_a + w_b), out = (out_a w_a + out_b w_b) /
(w_a + w_b). Inside a block the same holds for the row's max score (torch.logsumexp does it).
A masked score is -inf (exp(-inf) = 0). A row that sees no key of a block has out 0 and
lse -inf there, never NaN: it then weighs nothing in a merge (and with m = -inf, use m = 0).

THE RING (E8.2), forward on rank r (each rank's own q, k, v):

    out = 0, lse = -inf                     # nothing seen yet (a block merged in replaces it)
    for i in 0..N-1:
        s = (r - i) % N                     # the k, v in hand are rank s's block
        if i < N-1: start rotating k and v to a ring neighbour (rotate_async); here CLOCKWISE:
                    rank s-1's block arrives (either direction is allowed: counterclockwise,
                    the block in hand is rank (r + i) % N's, and the causal cases follow s)
        out, lse = merge_blocks(out, lse, *block_attention(q, k, v, ...))   # overlaps it
        wait for the arriving block; drop the one used
    N-1 rotations of k and of v (two messages per step, or one buffer holding both).

CAUSAL, BALANCED: ZIG-ZAG (E8.3). With causal=True the query at position p sees the keys at
positions <= p. Cut in N contiguous pieces, rank N-1 would do about 2N - 1 times the work of
rank 0. Zig-zag sharding cuts the sequence into 2N chunks of c = S / 2N tokens, and rank r
holds chunks r and 2N-1-r, in that order:

    N = 2:  rank 0: chunks 0, 3   rank 1: chunks 1, 2
    N = 3:  rank 0: chunks 0, 5   rank 1: chunks 1, 4   rank 2: chunks 2, 3

Rank r's local token j is at position r*c + j (j < c) or (2N-1-r)*c + j - c (j >= c): the
positions grow with j. Every rank's queries see c^2 (2N-1) + c (c+1) keys in all. With rank
s's block in hand (chunks s and 2N-1-s), rank r's queries (chunks r and 2N-1-r) see:

    s == r   the block causally: local query j sees local key j' <= j (a lower triangle)
    s < r    the block's first chunk, whole, from every query; its second chunk: nothing
    s > r    the whole block, from the second chunk of the queries only; the first: nothing

Off the diagonal that is half a block of work, on every rank. (A mask from the positions,
q_pos >= k_pos, on the whole block, gives the same results for twice the work: allowed.)
`zigzag_shard` cuts a full tensor that way, `zigzag_unshard` puts the shards back in order.
Every rank must pass its tensors in this layout when causal=True (the checker does).

BACKWARD (E8.4). out = P v with P = softmax(scores). From dout = dL/dout:

    dv_j = sum_i P_ij dout_i                   dP_ij = dout_i . v_j
    dS_ij = P_ij (dP_ij - delta_i)             delta_i = dout_i . out_i  (= sum_j P_ij dP_ij)
    dq_i = sum_j dS_ij k_j / sqrt(d)           dk_j = sum_i dS_ij q_i / sqrt(d)

P_ij = exp(s_ij - lse_i), RECOMPUTED block by block from the lse of forward: nothing of size
S x S is kept. Rank r computes dq of its own queries, but its queries contribute to the dk and
dv of EVERY block, which belong to the block's owner: they travel as E5's accumulators do.

    for k in 0..N-1:
        s = (r + k) % N                     # k, v now come COUNTERCLOCKWISE, from rank r+1
        if k < N-1: start rotating k and v counterclockwise
        dq += this block's part; dk_s, dv_s = this rank's queries' part of block s's gradients
        if k > 0: add the accumulators of block s that came from rank r+1 (posted last step)
        start rotating dk_s and dv_s counterclockwise (rank r-1 holds block s next)
        wait for the arriving block
    After N-1 block moves and N accumulator moves, the accumulators of block r are home, with
    every rank's part: they are this rank's dk and dv.

`RingAttention` (given) is the torch.autograd.Function around the two: its forward saves q,
k, v, out and lse; its backward calls ring_attention_backward. `ring_attention(q, k, v,
causal, group)` applies it: use it as you would F.scaled_dot_product_attention.

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes',
'Send buffers'.
* Results: every rank's out is serial attention's (F.scaled_dot_product_attention on the whole
  sequence, is_causal=causal) for its own queries, also for scores in the thousands; after
  backward, q.grad, k.grad and v.grad are the serial gradients of this rank's tokens; and an
  attention layer built on ring_attention trains as the serial one (weights after SGD and Adam
  steps), also when it is called twice before one backward: each call returns tensors of its
  own, which a later call leaves as they are. Results come in the dtype of q. Compared at
  world sizes 1 to 4.
* Layout: zigzag_shard returns chunks r and 2N-1-r of 2N, concatenated in that order, so
  every rank's queries see as many keys as any other's; zigzag_unshard is its inverse, on every
  rank.
* Communication: forward moves each other rank's k and v to this rank once, and nothing
  else: N-1 rotations of k and of v (or of one buffer with both), between ring neighbours.
  Backward: at most N-1 rotations of k and v and N of their gradient accumulators (fewer bytes
  are fine), between ring neighbours. block_attention, merge_blocks and zigzag_shard only
  compute; zigzag_unshard gathers every rank's shard once (E4's ring_all_gather, or any
  all-gather). With one rank, ring attention sends nothing.
* Point-to-point only: in ring_attention the blocks and accumulators travel by rotation (E4's
  rotate_async or rotate; dist.isend / dist.irecv will do): no all_gather, broadcast,
  all_reduce... of k, v or their gradients.
* Overlap: start a block's rotation BEFORE computing with it: in forward, between posting each
  receive and waiting for it, the rank does the step's work with the block in hand (a product:
  q k^T, P v, attention), not any op: another operation (an exp, a stray add), views,
  allocations and copies do not count; in backward, the blocks' rotations overlap the same way
  (the accumulators may be waited at once).
* Memory: the received blocks alive at any moment are at most the one in hand and the one
  arriving in forward, plus two accumulators in backward; none is kept after forward (keep no
  list of them on the autograd context: backward rotates the blocks again), and after
  backward only the accumulators that came home, as the gradients of k and v.
* New tensors: ring attention never writes into the tensors it is given (q, k, v; grad_out,
  out and lse in backward): they are the caller's, and RingAttention saves q, k, v for
  backward. Give each arriving block a name of its own (k, v = the handles' wait()), or copy
  it into a buffer you made; return new tensors.
* Group: r and N are this rank's place in `group` and its size (dist.get_rank(group),
  dist.get_world_size(group)); the group's ranks need not be consecutive (your E4 functions
  translate the peers).
* Raises: zigzag_shard raises ValueError when 2N does not divide the length along `dim`, before
  anything else.
"""
import torch
import torch.distributed as dist

from .rotation import ring_all_gather, rotate_async  # noqa: F401 - your E4 functions, for you


def block_attention(q, k, v, mask=None):
    """Attention of q over one block of keys: (out, lse).

    q: [batch, heads, Lq, d]; k, v: [batch, heads, Lk, d]; mask: None, or a bool tensor
    [Lq, Lk] where True means "may attend" (as F.scaled_dot_product_attention reads it).
    Returns out [batch, heads, Lq, d] = softmax(q k^T / sqrt(d), masked) v and
    lse [batch, heads, Lq], the log of the sum of exp(scores) of each row: stable for scores in
    the thousands; a row whose keys are all masked gets out 0 and lse -inf (not NaN).
    Only computes (no communication); q's dtype and device.
    """
    raise NotImplementedError("[E8.1] block_attention: scores = q @ k^T * d**-0.5, -inf where the "
                              "mask is False; lse = torch.logsumexp(scores, -1); out = exp(scores "
                              "- lse) @ v, with lse taken as 0 on rows where it is -inf")


def merge_blocks(out_a, lse_a, out_b, lse_b):
    """Merge two blocks' results: (out, lse) of the attention over the keys of both.

    out_*: [batch, heads, L, d], lse_*: [batch, heads, L], as block_attention returns them
    (lse -inf and out 0 on rows that saw no key of that block). Stable for lse in the
    thousands: rescale by the running max, never form exp(lse). Only computes.
    """
    raise NotImplementedError("[E8.1] merge_blocks: m = max(lse_a, lse_b) (0 where -inf); w = exp(lse "
                              "- m) for each; lse = m + log(w_a + w_b); out = (out_a w_a + out_b "
                              "w_b) / (w_a + w_b), 0 where no key was seen")


def ring_attention_forward(q, k, v, causal=False, group=None):
    """(out, lse) of this rank's queries over the whole sequence, by rotating k and v.

    q, k, v: this rank's blocks, [batch, heads, seq_local, d] (with causal=True: its zig-zag
    shard, seq_local even). out: [batch, heads, seq_local, d], lse: [batch, heads, seq_local],
    both in q's dtype. Not differentiable itself (RingAttention makes it so).
    Communication: N-1 rotations of k and of v (see THE RING), each posted before computing
    with the block in hand.
    """
    raise NotImplementedError("[E8.2] ring_attention_forward: out = zeros, lse = -inf; for each of N "
                              "steps: rotate_async k and v clockwise (not at the last step), merge "
                              "block_attention of the block in hand, then wait() for the next "
                              "block (causal=True, task E8.3: the three cases of CAUSAL)")


def ring_attention_backward(grad_out, q, k, v, out, lse, causal=False, group=None):
    """(dq, dk, dv): the gradients of this rank's q, and of its own k and v blocks.

    grad_out: dL/d out of this rank's queries; q, k, v: this rank's blocks; out, lse: what
    ring_attention_forward returned. Every rank's queries contribute to dk and dv of every
    block: the accumulators travel and come home (see BACKWARD). Same shapes and dtype as q, k, v.
    Communication: at most N-1 rotations of k and v and N of their accumulators.
    """
    raise NotImplementedError("[E8.4] ring_attention_backward: delta = (grad_out * out).sum(-1); N "
                              "steps: rotate k, v counterclockwise, recompute P = exp(scores - lse) "
                              "of the block in hand, dq += ..., add the accumulators of that block "
                              "from rank r+1 to your part and rotate them counterclockwise; the "
                              "last ones to arrive are your dk, dv")


class RingAttention(torch.autograd.Function):
    """Given: ring attention as an autograd function, differentiable in q, k and v. Its forward
    keeps only this rank's own tensors and the lse for backward (never a received block)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, group):
        out, lse = ring_attention_forward(q, k, v, causal, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.group = causal, group
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_attention_backward(grad_out.contiguous(), q, k, v, out, lse,
                                             ctx.causal, ctx.group)
        return dq, dk, dv, None, None


def ring_attention(q, k, v, causal=False, group=None):
    """Given: attention of this rank's queries over the whole sequence sharded over `group`,
    differentiable in q, k and v (the serial equivalent: F.scaled_dot_product_attention of the
    full q, k, v, is_causal=causal, at this rank's rows). With causal=True every rank's blocks
    are its zig-zag shard."""
    return RingAttention.apply(q, k, v, causal, group)


def zigzag_shard(x, dim, group=None):
    """This rank's zig-zag shard of the full tensor `x` (the same on every rank) along `dim`.

    The length along dim is cut in 2N equal chunks; returns torch.cat([chunk r, chunk 2N-1-r],
    dim), a new tensor. ValueError (naming the length and 2N) if 2N does not divide it.
    Only computes (no communication). Example, N = 2, x = [0, 1, ..., 7] on dim 0:
    rank 0 gets [0, 1, 6, 7], rank 1 gets [2, 3, 4, 5].
    """
    raise NotImplementedError("[E8.3] zigzag_shard: check that 2N divides x.shape[dim]; chunks = "
                              "x.chunk(2N, dim); torch.cat([chunks[r], chunks[2N-1-r]], dim)")


def zigzag_unshard(x_local, dim, group=None):
    """The full tensor, in sequence order, from every rank's zig-zag shard, on every rank.

    x_local: this rank's shard (the same shape on every rank). Not differentiable.
    Communication: every rank's shard once (ring_all_gather, or an all-gather), then put the
    2N chunks back in their places. Example, N = 2: [0, 1, 6, 7] and [2, 3, 4, 5] give
    [0, 1, ..., 7] on both ranks.
    """
    raise NotImplementedError("[E8.3] zigzag_unshard: ring_all_gather(x_local, dim, group) holds rank "
                              "q's chunks q and 2N-1-q at pieces 2q and 2q+1 (of 2N): reorder them")
