"""What the context-parallel checks share: each rank's own blocks, the zig-zag layout, serial
attention (the parent's answers), the communication rules of a ring attention, and hints.

A rank's q, k, v (and its upstream gradient, its tokens) are drawn from its own key
(`owner=r`): another rank can only have them by communication. The parent puts every rank's
blocks where the layout says (contiguous for causal=False, zig-zag for causal=True) and runs
F.scaled_dot_product_attention on the whole sequence.
"""
from __future__ import annotations

import functools
import weakref

import torch
import torch.nn.functional as F

from rtp_course.checker.common import randn
from rtp_course.checker.public.flyweight_harness import ComputeMarks, is_work, some_overlap
from rtp_course.checker.registry import Bound, Check, CommRule
from rtp_course.course import BY_MODULE, requirements, todo
from rtp_course.runtime import asked, commlog

# head_dim 5: sqrt(5) = 2.236 and 5 are no world size (1 to 4) and no length (3 and 4 tokens a
# rank, 3N or 4N in all), so a scale left out is not read as a sum over the ranks (issue 47:
# with head_dim 4, a dk missing its 1/sqrt(d) was "2 x ... (2 = the world size)")
BATCH, HEADS, HEAD_DIM = 2, 2, 5
RECV, SEND = "recv|irecv", "send|isend"
LARGE = 1000.0      # a query scaled so: scores in the thousands, exp() of them overflows
EXERCISE = "context_parallel"
ONLY_COMPUTES = "{} only computes: no communication"


class Marks(ComputeMarks):
    """flyweight_harness.ComputeMarks without torch._disable_dynamo around __torch_dispatch__,
    whose first call imports torch._dynamo (1.5 s of CPU a rank, `trains=False`: not preloaded);
    nothing is compiled here. A torch with no unwrapped function keeps it: slower, same marks."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False

    __torch_dispatch__ = getattr(ComputeMarks.__torch_dispatch__, "__wrapped__",
                                 ComputeMarks.__torch_dispatch__)


PRODUCTS = ("mm", "bmm", "baddbmm", "addmm", "addbmm", "matmul", "dot", "mv", "einsum",
            "linear", "_scaled_dot_product", "scaled_dot_product")


class BlockMarks(Marks):
    """Marks, and ("block", index) for receive `index` whose buffer (or a view) is then an operand
    of a product (q k^T, P v, dS k): arriving accumulators are only added. The c10d receive op
    dispatched as a receive is posted gives its buffer (paired in posting order)."""
    _kinds = {}

    def __enter__(self):
        self.buffers, self.matched = {}, 0     # storage address -> receive index
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = self._kinds.get(func)
        if kind is None:
            name = str(func).lower()
            op = name.split(".")[1] if "." in name else name
            kind = self._kinds[func] = ("recv" if name.startswith("c10d.recv") else "product"
                                        if op.startswith(PRODUCTS) else "")
        trace = commlog.STATE.trace
        if kind and trace is not None:
            flat = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,))
                    if isinstance(t, torch.Tensor)]
            if kind == "recv":
                posted = [i for k, i in trace if k in ("irecv", "recv")]
                if self.matched < len(posted) and flat:
                    self._track(flat[0], posted[self.matched])
                self.matched += 1
            else:
                trace.extend(("block", self.buffers[p]) for p in
                             {asked.storage_span(t)[0] for t in flat} if p in self.buffers)
        return Marks.__torch_dispatch__(self, func, types, args, kwargs)

    def _track(self, t, index):
        address = asked.storage_span(t)[0]
        if address:
            self.buffers[address] = index

            def drop(buffers=self.buffers):    # a later tensor may take the freed address
                if buffers.get(address) == index:
                    del buffers[address]
            weakref.finalize(t, drop)


def blocks_overlapped(trace) -> bool:
    """Every receive that brought a k/v block (BlockMarks) had some of the step's work (a
    product, `is_work`: not any op) between its post and its first wait; where no block
    receive was recognised, at least one receive had."""
    blocks = {i for kind, i in trace if kind == "block"}
    if not blocks:
        return some_overlap(trace)
    for at, (kind, index) in enumerate(trace):
        if kind == "recv" and index in blocks:
            return False            # a blocking receive waits at once
        if kind != "irecv" or index not in blocks:
            continue
        for later in trace[at + 1:]:
            if is_work(later):
                break
            if later == ("wait", index):
                return False
    return True


def required_first(run):
    """A check's run where a stub of another exercise its task requires (course table: E4's
    rotate_async) says "implement rotation.rotate_async in rtp_course/rotation.py first"."""
    def wrapped(self, ctx):
        try:
            return run(self, ctx)
        except NotImplementedError as e:
            where = todo.locate(e)
            needed = {ex.module for ex in BY_MODULE.values() for t in ex.tasks
                      if t.id in requirements(self.task)} - {self.exercise}
            if where is not None and where[0] in needed:
                e.args = (todo.message(e),)
            raise
    return wrapped


def blocks(seed: int, rank: int, length: int, scale_q: float = 1.0, shape=None) -> tuple:
    """Global rank `rank`'s own (q, k, v), [BATCH, HEADS, length, HEAD_DIM]: its key's."""
    b, h, d = shape or (BATCH, HEADS, HEAD_DIM)
    q, k, v = (randn(seed + i, b, h, length, d, owner=rank) for i in range(3))
    return q * scale_q, k, v


def upstream(seed: int, rank: int, shape) -> torch.Tensor:
    """dL/d out of global rank `rank`'s queries (the loss is (out * upstream).sum())."""
    return randn(seed + 7, *shape, owner=rank)


def zigzag_positions(rank: int, world: int, length: int) -> list:
    """Sequence positions of rank `rank`'s `length` tokens (chunks rank and 2N-1-rank)."""
    c = length // 2
    return (list(range(rank * c, (rank + 1) * c))
            + list(range((2 * world - 1 - rank) * c, (2 * world - rank) * c)))


def positions(rank: int, world: int, length: int, causal: bool) -> list:
    """Where rank `rank`'s tokens sit: zig-zag for causal attention, contiguous otherwise."""
    if causal:
        return zigzag_positions(rank, world, length)
    return list(range(rank * length, (rank + 1) * length))


def assemble(parts: list, causal: bool, dim: int = 2) -> torch.Tensor:
    """The whole sequence from every rank's part (in group order), along `dim`."""
    world, length = len(parts), parts[0].shape[dim]
    full = torch.empty(*parts[0].shape[:dim], world * length, *parts[0].shape[dim + 1:],
                       dtype=parts[0].dtype)
    for r, part in enumerate(parts):
        index = torch.tensor(positions(r, world, length, causal))
        full.index_copy_(dim, index, part)
    return full


def rows(full: torch.Tensor, rank: int, world: int, causal: bool, dim: int = 2) -> torch.Tensor:
    """Rank `rank`'s tokens of a whole-sequence tensor."""
    length = full.shape[dim] // world
    return full.index_select(dim, torch.tensor(positions(rank, world, length, causal)))


def serial_attention(q, k, v, causal: bool, grads=None):
    """F.scaled_dot_product_attention on the whole sequence; with `grads` (dL/d out), also
    the gradients of q, k and v: (out, (dq, dk, dv))."""
    if grads is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal), None
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    (out * grads).sum().backward()
    return out.detach(), (q.grad, k.grad, v.grad)


def partial(q, k, v, mask=None):
    """(out, lse) of q over one block of keys, serial: what block_attention must return."""
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)      # rows that see nothing: 0
    return probs @ v, lse


def naive_merge(out_a, lse_a, out_b, lse_b):
    """merge_blocks without the running max, as a known mistake: exact for small scores, inf /
    inf = NaN once exp(lse) overflows."""
    w_a, w_b = torch.exp(lse_a), torch.exp(lse_b)
    total = w_a + w_b
    out = (out_a * w_a.unsqueeze(-1) + out_b * w_b.unsqueeze(-1))
    return out / total.masked_fill(total == 0, 1.0).unsqueeze(-1), torch.log(total)


def naive_ring(q, k_blocks, v_blocks):
    """What ring attention with naive_merge gives for q over the blocks (non-causal)."""
    out = torch.zeros_like(q)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    for k, v in zip(k_blocks, v_blocks):
        out, lse = naive_merge(out, lse, *partial(q, k, v))
    return out, lse


NO_MAX = "the blocks merged without the running max (exp(lse) overflows)"


def pair(result):
    """(out, lse) as returned, or (None, None) when it is not a pair."""
    try:
        out, lse = result
        return out, lse
    except (TypeError, ValueError):
        return None, None


WRITTEN = "the caller's q, k, v the call wrote into"
WRITTEN_HINT = ("rule 'New tensors': ring attention wrote into the tensors it was given (a "
                "k.copy_(arrived) or k[...] = ... to hold the next block, a q.mul_(scale)): "
                "they are the caller's, and RingAttention saves them for backward, which then "
                "computes with the blocks you wrote there, not with this rank's own. Give each "
                "arriving block a name of its own (k, v = the handles' wait()), or copy it into "
                "a buffer you made; scale into a new tensor (q * scale)")


def inputs_as_given(**tensors) -> dict:
    """{name: (tensor, a copy of it now)}: what written() compares after the call."""
    return {name: (t, t.detach().clone()) for name, t in tensors.items()}


def written(given: dict) -> str:
    """The names of the given tensors the call changed ("none"): rule 'New tensors'."""
    changed = [name for name, (t, copy) in given.items()
               if not (t.shape == copy.shape and torch.equal(t.detach(), copy))]
    return ", ".join(changed) or "none"


def record_held(ctx, phase: str, base: int) -> None:
    """Received bytes alive at `phase`'s peak and at its end, beyond those alive before."""
    ctx.record_value(f"{phase}/received bytes held at peak",
                     commlog.STATE.peak_recv.get(phase, base) - base)
    ctx.record_value(f"{phase}/received bytes still held after {phase.split()[-1]}",
                     commlog.STATE.live_recv - base)


FORWARD_KEPT = "bytes kept after forward besides its output"


def kept_bound(kv: int) -> Bound:
    """Rule 'Memory' at the storage level (memory.kept_bytes): what forward may leave alive
    besides its output, whatever holds it (the received-bytes count follows receive buffers,
    not a copy of them): autograd's saved lse and small bookkeeping, less than half a block of
    k and v (one received k or v, copied, is half a block)."""
    return Bound(high=kv // 2 - 1, what=f"the saved lse and small bookkeeping, less than a "
                                         f"received block of k or of v; a block of k and v is "
                                         f"{kv} bytes")


def block_bytes(length: int, dtype=torch.float64, shape=None) -> int:
    """Bytes of one rank's k and v blocks together."""
    b, h, d = shape or (BATCH, HEADS, HEAD_DIM)
    return 2 * b * h * length * d * torch.empty(0, dtype=dtype).element_size()


def neighbours(members: list, g: int) -> tuple:
    """The ring neighbours of group rank g, as global ranks."""
    n = len(members)
    return tuple(sorted({members[(g - 1) % n], members[(g + 1) % n]}))


FORWARD = ("rule 'Communication': forward brings every other rank's k and v to this rank "
           "exactly once, and nothing else: N-1 rotations of k and of v (or of one buffer with "
           "both), from a ring neighbour; with one rank nothing is sent")
BACKWARD = ("rule 'Communication': backward rotates k and v at most N-1 times and their "
            "gradient accumulators at most N times (at most 4N-2 messages and the bytes of 2N-1 "
            "blocks of k and v), between ring neighbours; with one rank nothing is sent")
P2P_ONLY = ("rule 'Point-to-point only': k, v and their gradients travel by rotation "
            "(rotate_async: point-to-point), never by a collective (all_gather, broadcast, "
            "all_reduce ...)")


def forward_rules(phase: str, members: list, g: int, kv: int) -> list:
    """One forward of ring attention on group rank g of the group of global ranks `members`."""
    n = len(members)
    if n == 1:
        return [CommRule(phase, "*", 0, "with one rank there is nothing to rotate")]
    near = neighbours(members, g)
    return [CommRule(phase, "collective", 0, P2P_ONLY),
            CommRule(phase, RECV, Bound(n - 1, 2 * (n - 1)), FORWARD,
                     nbytes=Bound((n - 1) * kv, (n - 1) * kv), peers=near),
            CommRule(phase, SEND, Bound(n - 1, 2 * (n - 1)), FORWARD, peers=near)]


def backward_rules(phase: str, members: list, g: int, kv: int, calls: int = 1) -> list:
    """The backward of `calls` forwards of ring attention (one backward pass through both)."""
    n = len(members)
    if n == 1:
        return [CommRule(phase, "*", 0, "with one rank there is nothing to rotate")]
    near = neighbours(members, g)
    return [CommRule(phase, "collective", 0, P2P_ONLY),
            CommRule(phase, RECV, Bound(0, calls * (4 * n - 2)), BACKWARD,
                     nbytes=Bound(0, calls * (2 * n - 1) * kv), peers=near),
            CommRule(phase, SEND, Bound(0, calls * (4 * n - 2)), BACKWARD, peers=near)]


def held_bounds(phase: str, kv: int, backward: bool) -> dict:
    """What rule 'Memory' allows a rank to hold of what it received, in `phase`."""
    end = phase.split()[-1]
    if not backward:
        return {f"{phase}/received bytes held at peak": Bound(
                    high=2 * kv, what=f"2 blocks of k and v: the one in hand and the arriving "
                                      f"one; a block is {kv} bytes"),
                f"{phase}/received bytes still held after {end}": Bound(
                    high=0, what="every received block dropped once used")}
    return {f"{phase}/received bytes held at peak": Bound(
                high=4 * kv, what=f"blocks in hand and arriving, accumulators arriving and "
                                  f"being added to; a block of k and v is {kv} bytes"),
            f"{phase}/received bytes still held after {end}": Bound(
                high=kv, what="only the accumulators that came home, as the gradients of k "
                              "and v")}


HINTS = {
    WRITTEN: WRITTEN_HINT,
    "error": "an exception in ring attention usually means a block is not the one you think: "
             "forward step i holds rank (r - i) % N's k and v (they came CLOCKWISE, from rank "
             "r-1); backward step k holds rank (r + k) % N's (COUNTERCLOCKWISE, from r+1); "
             "every rank's blocks have the same shape",
    "deadlock": "ranks wait for each other: every rank must make the same rotations in the same "
                "order, whatever its data (N-1 of k and of v in forward; in backward N-1 of k "
                "and v and N of their accumulators), and wait() on each handle",
    "output": "every rank's out must be serial attention's for its own queries: forward step i "
              "holds rank (r - i) % N's k and v rotating CLOCKWISE ((r + i) % N's if "
              "counterclockwise); start from out 0, "
              "lse -inf on every row and merge each block's block_attention with "
              "merge_blocks: after N steps every block was merged exactly once",
    "large scores": "scores in the thousands: exp() of them overflows (inf, then NaN). Never "
                    "form exp(lse) or exp(score): subtract the running max first (merge_blocks: "
                    "m = max(lse_a, lse_b), weights exp(lse_a - m), exp(lse_b - m))",
    "compute while": "rule 'Overlap': no overlap: a block's receive was waited on before any "
                     "compute. Start rotating the k and v in hand (rotate_async), compute with "
                     "them, and only then wait() for the next block",
    "backward/compute while each k/v block": "rule 'Overlap': \"in backward, the blocks' "
        "rotations overlap the same way (the accumulators may be waited at once)\": a k/v "
        "block's receive was waited on before any compute. Start rotating the k and v in hand "
        "(rotate_async), compute this step's gradients with them, and only then wait() for the "
        "next block",
    "received bytes held at peak": "rule 'Memory': at most the received block in hand and the "
                                   "arriving one in forward (plus the arriving accumulators and "
                                   "the ones being added to in backward): drop each received "
                                   "block as soon as it is used, never keep them in a list",
    FORWARD_KEPT: "rule 'Memory': after forward the rank holds memory it did not hold before, "
                  "besides its output: a copy of a received block (k.clone(), a buffer it was "
                  "copied into, a numpy array) counts as the block itself. Keep none for "
                  "backward: it rotates the blocks again and recomputes the scores from the "
                  "saved lse",
    "received bytes still held": "rule 'Memory': received blocks were still alive after the "
                                 "pass: drop each once used; keep none on the autograd context "
                                 "for backward (it rotates the blocks again and recomputes the "
                                 "scores from the saved lse)",
    "grad q": "dq_i = sum over EVERY block of sum_j dS_ij k_j / sqrt(d), with P = exp(scores - "
              "lse) recomputed per block from forward's final lse, dS = P (dP - delta), dP = "
              "dout v^T, delta = (dout * out).sum(-1); backward step k holds rank (r + k) % N's "
              "k and v (they come COUNTERCLOCKWISE, from rank r+1)",
    "grad k": "this rank's dk and dv collect the contributions of EVERY rank's queries: the "
              "accumulators of block s travel COUNTERCLOCKWISE with it, each rank adds its "
              "queries' part (dk_s = dS^T q / sqrt(d), dv_s = P^T dout) and passes them on, and "
              "after N moves (one more than the blocks) they are home: those are dk and dv",
}
HINTS["grad v"] = HINTS["grad k"]

CAUSAL = ("causal=True on the zig-zag layout: rank r holds chunks r and 2N-1-r; with rank s's "
          "block in hand: s == r, the lower triangle of LOCAL indices (positions grow with the "
          "index); s < r, the block's first half from every query (and none of its second); "
          "s > r, the whole block from the second half of the queries only. A causal mask on "
          "the LOCAL indices of every block (tril) is wrong off the diagonal: positions are "
          "global. Whose block is in hand at forward step i: s = (r - i) % N")



# ---------------------------------------------------------------- known mistakes of the ring
# What a ring with a known mistake gives, serially, from every group rank's own blocks (`parts`:
# [(q, k, v)] in group order): registry.Like lookalikes, so that the report names the mistake
# ("it equals what ... gives") instead of the generic hint. Each mistake is parametrised by the
# ring steps: at step i rank g HOLDS rank (g + held * i) % N's block (held -1: k and v rotate
# clockwise, from r-1; +1: counterclockwise) and TAKES it for rank (g + believed * i) % N's (the
# causal case follows the belief); in backward the accumulators come from rank g + acc.
def one_thread(compute):
    """`compute` on one torch thread: tiny ops, where a second thread only waits for a busy
    core (the parent computes expected values while the ranks run)."""
    @functools.wraps(compute)
    def wrapped(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return compute(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)
    return wrapped


def merge(out_a, lse_a, out_b, lse_b):
    """merge_blocks, serial: the attention over both blocks' keys (0 and -inf where none)."""
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(m == float("-inf"), 0.0)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    total = w_a + w_b
    lse = m + torch.log(total)
    total = total.masked_fill(total == 0, 1.0)
    return (out_a * w_a.unsqueeze(-1) + out_b * w_b.unsqueeze(-1)) / total.unsqueeze(-1), lse


def _case(s: int, r: int, swapped: bool = False) -> str:
    """Which causal case rank r applies to rank s's block: own, early (s < r), late (s > r)."""
    if s == r:
        return "own"
    return "early" if (s < r) != swapped else "late"


@one_thread
def ring_forward(parts, g, held=-1, believed=-1, swapped=False, me=None):
    """(out, lse) of group rank g's queries from a CAUSAL ring forward (zig-zag layout) at step i
    holding rank (g + held * i) % N's block and taking it for (me + believed * i) % N's, with the
    cases s < r and s > r exchanged where `swapped`; `me`: the r it takes for its own (g; a
    global rank where dist.get_rank() was called without the group). The defaults: the right
    forward."""
    n, q = len(parts), parts[g][0]
    me = g if me is None else me
    length = q.shape[-2]
    half = length // 2
    out = torch.zeros_like(q)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    for i in range(n):
        _, k, v = parts[(g + held * i) % n]
        case = _case((me + believed * i) % n, me, swapped)
        if case == "own":
            o, lo = partial(q, k, v, torch.ones(length, length, dtype=torch.bool).tril())
        elif case == "early":
            o, lo = partial(q, k[..., :half, :], v[..., :half, :])
        else:
            late, late_lse = partial(q[..., half:, :], k, v)
            o = torch.cat([torch.zeros_like(q[..., :half, :]), late], dim=-2)
            lo = torch.cat([torch.full_like(late_lse[..., :half], float("-inf")), late_lse], -1)
        out, lse = merge(out, lse, o, lo)
    return out, lse


def _block_grads(q, k, v, dout, lse, delta, mask=None):
    """One block's part of (dq, dk, dv), its probabilities recomputed from the final lse."""
    scale = q.shape[-1] ** -0.5
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.exp(scores - lse.unsqueeze(-1))
    ds = p * (dout @ v.transpose(-2, -1) - delta.unsqueeze(-1))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, p.transpose(-2, -1) @ dout


@one_thread
def ring_backward(parts, douts, causal, held=1, believed=1, acc=1):
    """[(dq, dk, dv)] of every group rank from a ring backward whose step k holds rank
    (g + held * k) % N's block, takes it for (g + believed * k) % N's, and adds its part to the
    accumulators that came from rank g + acc (acc 1: COUNTERCLOCKWISE, from r+1), which go on to
    g - acc; after N moves the ones arriving are dk and dv. Forward as ring_forward's right one
    (or serial, non-causal). The defaults: the right backward."""
    n = len(parts)
    saved = []
    for g, (q, _, _) in enumerate(parts):
        if causal:
            out, lse = ring_forward(parts, g)
        else:
            ks = torch.cat([p[1] for p in parts], -2)
            vs = torch.cat([p[2] for p in parts], -2)
            out, lse = partial(q, ks, vs)
        saved.append((lse, (douts[g] * out).sum(-1)))
    dq = [torch.zeros_like(p[0]) for p in parts]
    sent = [None] * n          # the accumulators each rank sent at the last step
    for step in range(n):
        now = []
        for g, (q, _, _) in enumerate(parts):
            _, k, v = parts[(g + held * step) % n]
            (lse, delta), dout = saved[g], douts[g]
            half = q.shape[-2] // 2
            dk_s, dv_s = torch.zeros_like(k), torch.zeros_like(v)
            case = _case((g + believed * step) % n, g) if causal else "all"
            if case in ("all", "own"):
                mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril() \
                    if causal else None
                gq, gk, gv = _block_grads(q, k, v, dout, lse, delta, mask)
                dq[g] += gq
                dk_s, dv_s = dk_s + gk, dv_s + gv
            elif case == "early":
                gq, gk, gv = _block_grads(q, k[..., :half, :], v[..., :half, :], dout, lse, delta)
                dq[g] += gq
                dk_s[..., :half, :] += gk
                dv_s[..., :half, :] += gv
            else:
                gq, gk, gv = _block_grads(q[..., half:, :], k, v, dout[..., half:, :],
                                          lse[..., half:], delta[..., half:])
                dq[g][..., half:, :] += gq
                dk_s, dv_s = dk_s + gk, dv_s + gv
            if step > 0:
                came = sent[(g + acc) % n]
                dk_s, dv_s = dk_s + came[0], dv_s + came[1]
            now.append((dk_s, dv_s))
        sent = now
    return [(dq[g], *sent[(g + acc) % n]) for g in range(n)]


FORWARD_INDEX_HINT = (
    "the block in hand is the one that arrived: rotating CLOCKWISE, rank r receives from r-1, so "
    "at forward step i it holds rank s = (r - i) % N's k and v; rotating COUNTERCLOCKWISE (from "
    "r+1) it holds rank (r + i) % N's. Take s from the direction you rotate: the causal case "
    "(s == r, s < r, s > r) follows it. With two ranks both formulas give the same rank, which "
    "is why only 3 and 4 ranks fail")
SWAPPED_HINT = (
    "the two off-diagonal causal cases are exchanged. Rank s's block holds chunks s and 2N-1-s, "
    "yours chunks r and 2N-1-r: for s < r, chunk s comes before both of yours and chunk 2N-1-s "
    "after both, so EVERY query sees the block's FIRST half (k[..., :c, :], c = seq_local / 2) "
    "and nothing of its second; for s > r, both of its chunks come after your chunk r and "
    "before your chunk 2N-1-r, so only the SECOND half of your queries (q[..., c:, :]) sees "
    "the whole block, and the first half sees none of it")
# (held, believed, swapped, cause, hint). The block index of the other direction gives the
# same output whichever way k and v rotate: step i's (block, case) pairs are step N-i's of the
# other (r - i, r + i), so one cause names both
FORWARD_MISTAKES = (
    (-1, 1, False, "the block in hand at step i taken for rank (r + i) % N's while k and v "
                   "rotate CLOCKWISE (it is (r - i) % N's), or for (r - i) % N's while they "
                   "rotate COUNTERCLOCKWISE", FORWARD_INDEX_HINT),
    (-1, -1, True, "the causal cases s < r and s > r exchanged (the block's first half for s > "
                   "r, the second half of the queries for s < r)", SWAPPED_HINT))


@one_thread
def forward_lookalikes(parts, g, dtype) -> tuple:
    """Like's lookalikes of group rank g's causal forward output: FORWARD_MISTAKES."""
    if len(parts) < 2:
        return ()
    return tuple((ring_forward(parts, g, held, believed, swapped)[0].to(dtype), cause, hint)
                 for held, believed, swapped, cause, hint in FORWARD_MISTAKES)


DIRECTIONS_HINT = (
    "a block and its gradient accumulators travel the SAME way: k, v and the accumulators all "
    "COUNTERCLOCKWISE (the stub's way: backward step k holds rank (r + k) % N's block, from rank "
    "r+1, and the accumulators arriving from r+1 are that block's), or all CLOCKWISE (the block "
    "in hand is then (r - k) % N's). With two ranks both directions reach the same neighbour, "
    "which is why only 3 and 4 ranks fail")
# (held, believed, acc): k and v one way, their accumulators the other. The values cannot tell
# which way each went: without the causal cases all of these give the same gradients (rank g's
# dk collects query rank h's part of block 2h - g, whichever way), so one cause names them
BACKWARD_MISTAKES = ((-1, 1, 1), (-1, -1, 1), (1, 1, -1))
OPPOSITE = ("k and v rotating in backward the opposite way to their gradient accumulators (one "
            "CLOCKWISE, the other COUNTERCLOCKWISE)")


def backward_lookalikes(parts, douts, causal, dtype) -> list:
    """[{"q": ..., "k": ..., "v": ...}] of every group rank: Like's lookalikes of its gradients,
    BACKWARD_MISTAKES."""
    n = len(parts)
    out = [{"q": [], "k": [], "v": []} for _ in range(n)]
    if n < 3:       # with two ranks both directions reach the same neighbour
        return out
    for held, believed, acc in BACKWARD_MISTAKES if causal else BACKWARD_MISTAKES[:1]:
        for g, grads in enumerate(ring_backward(parts, douts, causal, held, believed, acc)):
            for name, d in zip("qkv", grads):
                out[g][name].append((d.to(dtype), OPPOSITE, DIRECTIONS_HINT))
    return out


SCALE_HINT = ("the scores are q k^T / sqrt(d) (d = head_dim), and the gradients through them "
              "carry that scale too: dq = dS k / sqrt(d), dk = dS^T q / sqrt(d) (dv = P^T dout "
              "and dP = dout v^T have none); apply it once, where the scores are formed or at "
              "the end, never both")


def scale_factors(d: int) -> list:
    """Check.factors of attention with head_dim d: the 1/sqrt(d) scale left out, or twice."""
    root = d ** 0.5
    return [(root, f"{root:.4g} = sqrt(head_dim), head_dim = {d}: the 1/sqrt(d) scale left out",
             SCALE_HINT),
            (1 / root, f"1/sqrt(head_dim), head_dim = {d}: the 1/sqrt(d) scale applied twice",
             SCALE_HINT)]


def block_cases():
    """{case: (q, k, v, mask)}: shared data (every rank may draw it)."""
    q, k, v = randn(10, 2, 2, 3, 4), randn(11, 2, 2, 5, 4), randn(12, 2, 2, 5, 4)
    mask = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    return {"block_attention": (q, k, v, None), "masked": (q, k, v, mask),
            "large scores": (q * LARGE, k, v, None)}


EMPTY_ROW = "exp(scores - lse) on a row that sees no key (-inf - (-inf) is NaN)"
EMPTY_MERGE = "weights exp(lse - m) where m = max(lse_a, lse_b) is -inf (-inf - (-inf) is NaN)"


def nan_rows(t, rows, lse=False):
    """`t` (an out [..., L, d], or with lse=True an lse [..., L]) with NaN on the query rows
    where `rows` [L] is True."""
    wrong = t.clone()
    wrong[(..., rows) if lse else (..., rows, slice(None))] = float("nan")
    return wrong


def merge_cases():
    """{case: (q, keys, values, mask, split)}: block a holds the first `split` keys."""
    q, k, v = randn(20, 2, 2, 3, 4), randn(21, 2, 2, 7, 4), randn(22, 2, 2, 7, 4)
    empty = torch.ones(3, 7, dtype=torch.bool)
    empty[0, :3] = False         # row 0 sees nothing of block a
    empty[1, 3:] = False         # row 1 nothing of block b
    empty[2, :] = False          # row 2 nothing at all
    return {"merge_blocks": (q, k, v, None, 3), "large scores": (q * LARGE, k, v, None, 4),
            "empty rows": (q, k, v, empty, 3)}


class RingCheck(Check):
    """What the ring checks share: the groups they run on, every rank's blocks, the bytes of a
    block, and the rules on each group's ranks."""
    exercise = EXERCISE
    cpu_budget = 30.0
    hints = HINTS
    length, shape = 3, None     # tokens per rank; (batch, heads, head_dim) or the default

    def members(self, world_size):
        """The groups as lists of global ranks (None: the check's own group of every rank)."""
        return None

    def groups(self, world_size):
        return self.members(world_size) or [list(range(world_size))]

    def group(self, ctx):
        """This rank's group, or None where it sits out (every rank makes every group)."""
        if self.members(ctx.world_size) is None:
            return ctx.group
        made = [(m, ctx.new_group(m)) for m in self.members(ctx.world_size)]
        return next((g for m, g in made if ctx.rank in m), None)

    def blocks(self, seed, rank, scale=1.0):
        return blocks(seed, rank, self.length, scale, self.shape)

    def kv_bytes(self):
        return block_bytes(self.length, getattr(torch, self.dtype), self.shape)

    def rank_rules(self, members, g) -> list:
        """The rules of group rank g of the group of global ranks `members`."""
        raise NotImplementedError

    def factors(self, world_size):
        d = (self.shape or (BATCH, HEADS, HEAD_DIM))[-1]
        return scale_factors(d)

    def comm_rules(self, world_size):
        rules = {r: [CommRule("*", "*", 0, "this rank is not in the group: nothing to do")]
                 for r in range(world_size)}
        for members in self.groups(world_size):
            for g, r in enumerate(members):
                rules[r] = self.rank_rules(members, g)
                if self.members(world_size) is not None:   # rule 'Group': on its group only
                    rules[r] = [CommRule(x.phase, x.kind, x.count, x.hint, x.nbytes, x.peers,
                                         members=tuple(members)) for x in rules[r]]
        return rules


GROUP = ("rule 'Group': in a group, r and N are the GROUP rank and size (dist.get_rank(group), "
         "dist.get_world_size(group)), and every rotation takes group=group (your rotation "
         "functions translate the peers to global ranks); the group's ranks need not be "
         "consecutive")
GATHER = ("rule 'Communication': zigzag_unshard gathers every other rank's shard once "
          "(ring_all_gather: N-1 rotations, or one all-gather), nothing more")
BLOCK_HINTS = {
    "block_attention": "out = softmax(q k^T / sqrt(d)) v over the block's keys; lse = log sum_j "
                       "exp(s_j) of each row (torch.logsumexp(scores, -1)), shape [batch, "
                       "heads, Lq]",
    "masked": "the mask says True where a query MAY attend: scores -inf where it is False. A "
              "row that sees no key at all gets out 0 and lse -inf, not NaN: exp(scores - lse) "
              "is exp(-inf + inf) there, so take lse as 0 on such rows before exponentiating",
    "large scores": HINTS["large scores"] + "; inside a block, torch.logsumexp and exp(scores "
                    "- lse) are stable"}
MERGE_HINTS = {
    "merge_blocks": "lse = log(exp(lse_a) + exp(lse_b)) and out = out_a exp(lse_a - lse) + "
                    "out_b exp(lse_b - lse): each block weighs its share of the total sum of "
                    "exp(scores); computed with the running max m = max(lse_a, lse_b)",
    "large scores": HINTS["large scores"],
    "empty rows": "a row that saw no key of one block (lse -inf, out 0) takes the other block's "
                  "result as it is; one that saw no key of either keeps out 0 and lse -inf, "
                  "never NaN: where m = max(lse_a, lse_b) is -inf, use 0, and divide only where "
                  "the sum of the weights is not 0"}
ZIGZAG_HINTS = {
    "zigzag_shard": "rule 'Layout': cut the length along dim in 2N equal chunks (x.chunk(2N, "
                    "dim)) and return torch.cat([chunk r, chunk 2N-1-r], dim): chunk r from the "
                    "start, then chunk r from the end",
    "unmasked": "rule 'Layout': with chunks r and 2N-1-r every rank's queries see c^2 (2N-1) + "
                "c (c+1) keys under a causal mask, the same on every rank",
    "zigzag_unshard": "zigzag_unshard is zigzag_shard's inverse: gather every rank's shard (rank "
                      "q's holds chunks q and 2N-1-q), then put each chunk at its place in "
                      "sequence order",
    # the key's own words name zigzag_shard: the longest hint key found wins
    "raises/the exception": "rule 'Raises': zigzag_shard raises ValueError, naming the length "
                            "and 2N, when 2N does not divide the length along dim, before "
                            "anything else: test x.shape[dim] % (2 * N) first (x.chunk(2N, dim) "
                            "of such a length gives fewer or uneven chunks: an IndexError at "
                            "chunk 2N-1-r, or shards of different sizes)"}
