"""Exercise E4: the rotation primitive of RTP, and ring collectives built from it.

Notebook: notebooks/05_ring_rotation.ipynb. Check: `rtp-course check rotation`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E4.1  section 1: `ring_peers`
    E4.2  section 2: `rotate_async`, `RotationHandle`, `rotate`
    E4.3  section 3: `ring_all_gather`
    E4.4  section 4: `ring_reduce_scatter`

The N ranks of a group stand on a ring  0 -> 1 -> ... -> N-1 -> 0.  One ROTATION
moves one tensor per rank one step around the ring, every rank at the same time:

    clockwise:         rank r sends to (r + 1) % N and receives from (r - 1) % N
    counterclockwise:  rank r sends to (r - 1) % N and receives from (r + 1) % N

    N = 4, clockwise:   before  [A, B, C, D]   (rank 0 holds A, ...)
                        after   [D, A, B, C]

RTP (exercise E5) rotates weight shards with this: after k clockwise rotations
rank r holds what rank (r - k) % N had, so after N-1 of them every rank has
seen every shard, while storing only one or two of them at any moment.

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Contiguity',
'Dtypes', 'Send buffers'.
* Results: what each function's docstring says, for every group size.
* Point-to-point only: dist.isend / dist.irecv, or dist.batch_isend_irecv with a
  list of dist.P2POp. No all_gather, broadcast, all_reduce... here.
* Communication: one rotation is, per rank, one send to the next rank and one
  receive from the previous one (the other way round counterclockwise); the ring
  functions make N-1 rotations; with one rank nothing is sent.
* Post together: post the receive and the send TOGETHER, then wait. If every rank
  first calls a blocking dist.send, every rank waits for a receiver that never
  comes: a deadlock (gloo's send does not return until the peer receives). A
  separate dist.isend and dist.irecv are NOT together on NCCL, non-blocking as
  they are: a rank's operations on a group run one after the other on the group's
  stream, so with every rank's irecv posted first, every rank waits in it (gloo
  runs them at once and hides this). Two ways are together: one
  dist.batch_isend_irecv holding both (the course's way), or rank-parity order
  (even ranks send then receive, odd ranks receive then send).
* Wait on every work you start, the send's as well as the receive's, before the
  function that finishes the transfer returns (wait() for rotate_async; the
  function itself otherwise). A send's buffer may be reused only once its work is
  complete. batch_isend_irecv returns ONE handle on NCCL: wait on every handle it
  returns (for w in works: w.wait()), never unpack them.
* Group: r and N are GROUP ranks: dist.get_rank(group), dist.get_world_size(group),
  and a group's ranks need not be consecutive. The p2p calls take GLOBAL ranks:
  translate the peers with dist.get_global_rank(group, peer) when a group is given.
* New tensors: never modify the caller's tensor; return a NEW tensor (with one
  rank: a clone), never the input, a view of it, or a buffer kept for the next call.
* Receivers allocate the buffer, so they must know what arrives: by default the
  same shape and dtype as what they send; with uneven shards the caller passes
  recv_shape, and recv_dtype when the source sends another dtype.
* Raises: a direction other than the two in DIRECTIONS raises ValueError naming
  both, before any communication; ring_reduce_scatter raises ValueError when N does
  not divide the size.
Nothing here is differentiable (send `tensor.detach()`).
"""
import torch
import torch.distributed as dist

DIRECTIONS = ("clockwise", "counterclockwise")


def ring_peers(direction="clockwise", group=None):
    """Return (destination, source) of this rank for one rotation, as GLOBAL ranks.

    clockwise: ((r + 1) % N, (r - 1) % N); counterclockwise: the reverse, where r
    and N are this rank's place in `group` and the group's size (the world when
    group is None). With one rank, both are the rank itself. Two ints; it only
    computes (no communication). A direction other than the two in DIRECTIONS
    raises ValueError, and the message names both valid values.

    Checked on its own, before everything that uses it (`rotation.ring_peers`):
    both directions at 1 to 4 ranks, and on the group of every rank but rank 1
    ({0, 2}, {0, 2, 3}), whose group ranks differ from the global ones.
    """
    raise NotImplementedError("[E4.1] ring_peers: validate `direction`, compute the group-rank peers "
                              "with % N, translate them with dist.get_global_rank(group, peer)")


class RotationHandle:
    """An in-flight rotation, returned by rotate_async.

    Holds the p2p work objects (what dist.isend / irecv / batch_isend_irecv
    return), the receive buffer, and the send buffer (it must stay alive until
    the send completes).
    """

    def __init__(self, works, received, sent):
        raise NotImplementedError("[E4.2] RotationHandle.__init__: store the works and both buffers")

    def is_completed(self):
        """True when every transfer of this rotation has finished (does not block)."""
        raise NotImplementedError("[E4.2] RotationHandle.is_completed: all(w.is_completed() ...)")

    def wait(self):
        """Block until the rotation is done; return the received tensor.

        Calling wait() twice must be safe: forget the works once waited (with
        gloo, waiting again on a finished work can block forever).
        """
        raise NotImplementedError("[E4.2] RotationHandle.wait: wait on every work (once), then return "
                                  "the receive buffer")


def rotate_async(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    """Start one rotation of `tensor` and return a RotationHandle WITHOUT waiting.

    tensor: [*] this rank's tensor (any dtype, on the device of the backend).
    recv_shape, recv_dtype: what this rank receives; default: like `tensor`.
    Returns at once, before the transfer completes, so the caller can compute
    while the data moves (handle.wait() later gives the received tensor).
    Communication: one send of `tensor` to the destination, one receive from the
    source. With N = 1 nothing is sent: the handle holds tensor.clone().
    """
    raise NotImplementedError("[E4.2] rotate_async: peers from ring_peers; allocate the receive buffer "
                              "(torch.empty of recv_shape); dist.batch_isend_irecv([P2POp(isend, "
                              "...), P2POp(irecv, ...)]); return a RotationHandle, do NOT wait")


def rotate(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    """One blocking rotation: the tensor received from the previous rank (clockwise)
    or from the next rank (counterclockwise). A new tensor; `tensor` is untouched.

    Example, N = 3, clockwise: rank 0 gets rank 2's tensor, rank 1 gets rank 0's.
    """
    raise NotImplementedError("[E4.2] rotate: rotate_async(...).wait()")


def ring_all_gather(tensor, dim=0, group=None):
    """torch.cat([x_0, ..., x_{N-1}], dim) on every rank, from N-1 rotations only.

    x_q is rank q's `tensor`; all have the same shape. After k clockwise
    rotations, rank r holds x_{(r - k) % N}: put each piece at its rank's place
    (rank order, not arrival order). Exactly N-1 rotations: the N-th would bring
    back your own tensor.
    """
    raise NotImplementedError("[E4.3] ring_all_gather: parts[r] = tensor; N-1 times rotate clockwise "
                              "and store the result at parts[(r - k) % N]; torch.cat(parts, dim)")


def ring_reduce_scatter(tensor, dim=0, group=None):
    """Rank r returns sum over ranks q of chunk r of x_q, from N-1 rotations only.

    x_q is rank q's `tensor`, cut in N equal chunks along dim (ValueError if its
    size is not divisible by N). Idea: a partial sum travels around the ring
    and each rank it visits adds its own chunk of the same index; choose where
    each sum starts so that after N-1 clockwise rotations rank r holds the
    complete sum of chunk r. Do not modify `tensor`.
    """
    raise NotImplementedError("[E4.4] ring_reduce_scatter: a partial sum started on rank q ends, N-1 "
                              "clockwise steps later, on rank q-1: so start the chunk (r-1) % N, "
                              "and after each rotation add your chunk of the index you now hold")
