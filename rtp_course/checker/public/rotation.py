"""Public checks for E4 `rotation`: the ring rotation and the ring collectives built from it.

Rank r holds a known tensor (its value says whose it is); after one rotation
it must hold rank r-1's (clockwise) or rank r+1's (counterclockwise). The
communication is part of the contract: one send and one receive per rotation,
never a collective, and N-1 rotations for a ring all-gather / reduce-scatter.
That rotate_async returns before the transfer is done is checked by ORDER, not
by timing: ranks 1..N-1 post their rotation and then raise a flag (ctx.flag: no
data crosses), while rank 0 waits for those flags before posting its own. A rotate_async that
waits for its transfer never gets to set its key, since rank 0 has sent nothing.
"""
from __future__ import annotations

import torch

from rtp_course.checker.common import rand, randint, randn
from rtp_course.checker.registry import Check, CommRule
from rtp_course.runtime import commlog

DIRECTIONS = ("clockwise", "counterclockwise")
ASYNC_WAIT_S = 5.0   # how long rank 0 waits for the other ranks to come back from rotate_async
SEND, RECV = "send|isend", "recv|irecv"


def value(rank: int) -> torch.Tensor:
    """Rank r's tensor [2, 3]: 100 r + 0..5 plus a fraction drawn from rank r's own key, so a
    wrong source shows in the numbers and no other rank can make it (checker.inputs)."""
    return (torch.arange(6, dtype=torch.float64).view(2, 3) + 100 * rank
            + rand(20, 2, 3, owner=rank) / 2)


def int_value(rank: int) -> torch.Tensor:
    """Rank r's int64 tensor [4]: 100 r + a number below 100 from rank r's own key."""
    return 100 * rank + randint(21, 100, 4, owner=rank)


def uneven_value(rank: int) -> torch.Tensor:
    """Rank r's tensor of r + 1 rows: r plus a fraction from rank r's own key."""
    return rank + rand(22, rank + 1, 2, owner=rank) / 2


def source(rank: int, world: int, direction: str) -> int:
    """The rank whose tensor `rank` receives in one rotation."""
    return (rank - 1) % world if direction == "clockwise" else (rank + 1) % world


def p2p_rules(phase: str, world: int, rotations: int, hint: str) -> list:
    """`rotations` rotations in `phase`: that many sends and receives, no collective."""
    if world == 1:
        return [CommRule(phase, "*", 0, "with one rank there is nobody to talk to: no "
                         "communication, the result is a copy of the input")]
    return [CommRule(phase, "collective", 0, "rule 'Point-to-point only': a rotation is "
                     "isend/irecv or batch_isend_irecv: no all_gather, broadcast, all_reduce..."),
            CommRule(phase, RECV, rotations, hint),
            CommRule(phase, SEND, rotations, hint)]


ONE_ROTATION = ("one rotation is exactly one send (to the next rank) and one receive (from the "
                "previous rank) per rank")
NEW_TENSOR = ("rule 'Never modify the caller's tensor': send it (or a contiguous copy) and receive "
              "into a NEW buffer (torch.empty of the received shape)")
STUCK = ("every rank waits for its peer (the ranks' calls are listed above): each transfer "
         "needs its other half posted on the peer, and a blocking dist.send on every rank "
         "waits for receivers that are themselves sending. Post the receive and the send "
         "together (dist.batch_isend_irecv with two P2POps, or irecv and isend), then wait on "
         "every work")
WAIT_ALL = ("rule 'Wait on EVERY work': wait() on each work you started, the send's as well as "
            "the receive's (batch_isend_irecv returns one per P2POp), before the transfer is "
            "done for the caller; a send buffer may be reused only once its work completed "
            "(NCCL may still read it)")
NEVER_WAITED = "transfers never waited"


def record_unwaited(ctx, key_phase: str, started_in: str) -> None:
    """The p2p transfers started in phase `started_in` whose work was neither waited nor seen
    completed (is_completed() True) by now."""
    ctx.record_value(f"{key_phase}/{NEVER_WAITED}",
                     [f"{e.kind} at {e.where}" for e in commlog.events()
                      if e.phase == started_in and not e.completed])


DIRECTION = ("clockwise: rank r sends to (r + 1) % N and receives from (r - 1) % N; "
             "counterclockwise the reverse. Compute r and N in the group "
             "(dist.get_rank(group), dist.get_world_size(group)), then translate the peers "
             "with dist.get_global_rank(group, peer)")


def _pair(peers):
    """What ring_peers returned, as (int, int) when it is a pair of ranks, else its repr."""
    try:
        dst, src = peers
        if all(int(p) == p for p in (dst, src)):
            return (int(dst), int(src))
    except Exception:  # noqa: BLE001 - anything else is reported as it is
        pass
    return repr(peers)[:80]


def peers(rank: int, world: int, direction: str) -> tuple:
    """(destination, source) of `rank` in a ring of `world` ranks."""
    step = 1 if direction == "clockwise" else -1
    return ((rank + step) % world, (rank - step) % world)


BAD_DIRECTION = ("ring_peers (and so rotate) must raise ValueError for a direction other than "
                 "'clockwise' / 'counterclockwise', with a message naming both, before any "
                 "communication")


class RingPeers(Check):
    """ring_peers both ways on the whole group, on ranks 1..N-1 (global ranks differ from the
    group's), and a bad direction. It only computes: no communication. Runs first: every
    later function of the exercise finds its peers with it."""
    exercise, name = "rotation", "ring_peers"
    timeout = 10.0
    hints = {"": DIRECTION,
             "ranks 1..N-1": "on a group, compute r and N in the group (dist.get_rank(group), "
                             "dist.get_world_size(group)) and return GLOBAL ranks: "
                             "dist.get_global_rank(group, peer)",
             "bad direction": BAD_DIRECTION}

    def run(self, ctx):
        rot, r, n = ctx.impl.rotation, ctx.rank, ctx.world_size
        for direction in DIRECTIONS:
            with ctx.phase(direction):
                found = rot.ring_peers(direction, group=ctx.group)
            ctx.record_value(f"{direction}/(destination, source) of rank {r}", _pair(found))
        if n >= 3:
            sub = ctx.new_group(list(range(1, n)))       # every rank makes it, in the same order
            if r >= 1:
                for direction in DIRECTIONS:
                    with ctx.phase(f"ranks 1..N-1 {direction}"):
                        found = rot.ring_peers(direction, group=sub)
                    ctx.record_value(f"ranks 1..N-1 {direction}/(destination, source) as "
                                     f"global ranks, of rank {r}", _pair(found))
        with ctx.phase("bad direction"):
            try:
                rot.ring_peers("left", group=ctx.group)
                raised, named = "nothing", False
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001 - the type is what we judge
                raised = type(e).__name__
                named = "counterclockwise" in str(e) and "clockwise" in str(e).replace(
                    "counterclockwise", "")
        ctx.record_value("bad direction/exception raised for direction='left'", raised)
        ctx.record_value("bad direction/the message names 'clockwise' and 'counterclockwise'",
                         named)

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {f"{d}/(destination, source) of rank {r}": peers(r, world_size, d)
                 for d in DIRECTIONS}
            if world_size >= 3 and r >= 1:
                for d in DIRECTIONS:
                    dst, src = peers(r - 1, world_size - 1, d)
                    e[f"ranks 1..N-1 {d}/(destination, source) as global ranks, of rank {r}"] = \
                        (dst + 1, src + 1)
            e["bad direction/exception raised for direction='left'"] = "ValueError"
            e["bad direction/the message names 'clockwise' and 'counterclockwise'"] = True
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        phases = [*DIRECTIONS, "bad direction"]
        if world_size >= 3:
            phases += [f"ranks 1..N-1 {d}" for d in DIRECTIONS]
        return [CommRule(phase, "*", 0, "ring_peers only computes the two ranks: no communication")
                for phase in phases]


class Rotate(Check):
    """rotate() both ways: float and int64 tensors, a bad direction."""
    exercise, name = "rotation", "rotate"
    timeout = 10.0
    hints = {
        "": DIRECTION,
        "deadlock": STUCK,
        NEVER_WAITED: WAIT_ALL,
        "int64": "allocate the receive buffer with the dtype of what arrives (recv_dtype, default "
                 "the input's dtype), not a float",
        "input after the call": NEW_TENSOR,
        "returned a new tensor": "return the receive buffer, a new tensor (with one rank: "
                                 "tensor.clone()), never the input itself",
        "bad direction": BAD_DIRECTION,
    }

    def run(self, ctx):
        rot, r, n = ctx.impl.rotation, ctx.rank, ctx.world_size
        for direction in DIRECTIONS:
            x = ctx.to(value(r))
            keep = x.clone()
            with ctx.phase(direction):
                y = rot.rotate(x, direction, group=ctx.group)
            record_unwaited(ctx, direction, direction)
            ctx.record(f"{direction}/received", y)
            ctx.record(f"{direction}/input after the call", x)
            ctx.record_value(f"{direction}/returned a new tensor",
                             isinstance(y, torch.Tensor) and y is not x
                             and (y.numel() == 0 or y.data_ptr() != x.data_ptr()))
        with ctx.phase("int64"):
            y = rot.rotate(ctx.to(int_value(r)), group=ctx.group)
        ctx.record("int64/received", y)
        with ctx.phase("bad direction"):
            try:
                rot.rotate(ctx.to(value(r)), "left", group=ctx.group)
                raised, named = "nothing", False
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001 - the type is what we judge
                raised = type(e).__name__
                named = "counterclockwise" in str(e) and "clockwise" in str(e).replace(
                    "counterclockwise", "")
        ctx.record_value("bad direction/exception raised for direction='left'", raised)
        ctx.record_value("bad direction/the message names 'clockwise' and 'counterclockwise'",
                         named)

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {}
            for direction in DIRECTIONS:
                e[f"{direction}/received"] = value(source(r, world_size, direction))
                e[f"{direction}/input after the call"] = value(r)
                e[f"{direction}/returned a new tensor"] = True
                e[f"{direction}/{NEVER_WAITED}"] = []
            e["int64/received"] = int_value((r - 1) % world_size)
            e["bad direction/exception raised for direction='left'"] = "ValueError"
            e["bad direction/the message names 'clockwise' and 'counterclockwise'"] = True
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        rules = []
        for phase in (*DIRECTIONS, "int64"):
            rules += p2p_rules(phase, world_size, 1, ONE_ROTATION)
        rules.append(CommRule("bad direction", "*", 0, self.hints["bad direction"]))
        return rules


class RotateUneven(Check):
    """rotate() with recv_shape: rank r sends r + 1 rows and receives as many as its source has."""
    exercise, name = "rotation", "rotate_uneven"
    timeout = 10.0
    hints = {"": "with recv_shape the receive buffer must have THAT shape (what the source "
                 "sends), not the shape of the tensor this rank sends", "deadlock": STUCK}

    def run(self, ctx):
        r, n = ctx.rank, ctx.world_size
        for direction in DIRECTIONS:
            src = source(r, n, direction)
            with ctx.phase(f"uneven {direction}"):
                y = ctx.impl.rotation.rotate(ctx.to(uneven_value(r)), direction,
                                             group=ctx.group, recv_shape=(src + 1, 2))
            ctx.record(f"uneven {direction}/received", y)

    def expected(self, world_size):
        return {r: {f"uneven {d}/received": uneven_value(source(r, world_size, d))
                    for d in DIRECTIONS} for r in range(world_size)}

    def comm_rules(self, world_size):
        return [rule for d in DIRECTIONS
                for rule in p2p_rules(f"uneven {d}", world_size, 1, ONE_ROTATION)]


class RotateAsync(Check):
    """rotate_async returns before its transfer is done, and wait() then gives the tensor."""
    exercise, name = "rotation", "rotate_async"
    timeout = 10.0 + 2 * ASYNC_WAIT_S
    hints = {
        "": DIRECTION,
        "deadlock": STUCK,
        "rotate_async/returned": "rotate_async must only POST the transfers (isend/irecv or "
                                 "batch_isend_irecv) and return a handle at once: ranks 1..N-1 "
                                 "called it while rank 0 had sent nothing yet, and did not get "
                                 "back from it. Do not wait() inside rotate_async; the caller "
                                 "waits later, after computing",
        "rotate_async/is_completed": "is_completed() must not block and must say False while the "
                                     "data has not arrived: all(w.is_completed() for w in works)",
        "wait/received": "wait() returns the receive buffer once every transfer is done: "
                         "the tensor of rank r-1 (clockwise)",
        NEVER_WAITED: WAIT_ALL,
    }

    def run(self, ctx):
        rot, r, n = ctx.impl.rotation, ctx.rank, ctx.world_size
        x = ctx.to(value(r))
        if r == 0 and n > 1:
            # the other ranks come back from rotate_async although rank 0 has not sent (a
            # timeout: they are blocked inside rotate_async)
            arrived = ctx.wait_flags(range(1, n), ASYNC_WAIT_S)
            ctx.record_value("rotate_async/returned before the transfer was done (ranks 1..N-1)",
                             arrived)
        try:
            with ctx.phase("rotate_async"):
                handle = rot.rotate_async(x, "clockwise", group=ctx.group)
                if r == 1:  # receives from rank 0, which has not posted anything yet
                    ctx.record_value("rotate_async/is_completed() before the source sent",
                                     bool(handle.is_completed()))
        finally:  # an exception is reported as such: rank 0 need not wait for this flag
            if r > 0:
                ctx.flag()
        with ctx.phase("wait"):
            ctx.record("wait/received", handle.wait())
        record_unwaited(ctx, "wait", "rotate_async")

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {}
            if r == 0 and world_size > 1:
                e["rotate_async/returned before the transfer was done (ranks 1..N-1)"] = True
            if r == 1:
                e["rotate_async/is_completed() before the source sent"] = False
            e["wait/received"] = value((r - 1) % world_size)
            e[f"wait/{NEVER_WAITED}"] = []
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        return (p2p_rules("rotate_async", world_size, 1, ONE_ROTATION)
                + [CommRule("wait", "*", 0, "wait() only waits: the transfers were posted by "
                            "rotate_async")])


class WaitTwice(Check):
    """A handle after wait(): is_completed() is True, and a second wait() gives the same tensor."""
    exercise, name = "rotation", "wait_twice"
    timeout = 10.0
    hints = {
        "": DIRECTION,
        "deadlock": "the second wait() waited on the works again, and gloo can block on a "
                    "finished work: forget them after the first wait (and keep the result)",
        "is_completed": "after wait(), is_completed() must be True",
        "second wait": "a second wait() must return the same tensor, without waiting on the "
                       "works again (forget them after the first wait)",
    }

    def run(self, ctx):
        with ctx.phase("rotate_async"):
            handle = ctx.impl.rotation.rotate_async(ctx.to(value(ctx.rank)), group=ctx.group)
            y = handle.wait()
        ctx.record_value("rotate_async/is_completed() after wait()", bool(handle.is_completed()))
        with ctx.phase("second wait"):
            again = handle.wait()
        ctx.record_value("second wait/returned the same tensor", again is y)

    def expected(self, world_size):
        return {r: {"rotate_async/is_completed() after wait()": True,
                    "second wait/returned the same tensor": True} for r in range(world_size)}

    def comm_rules(self, world_size):
        return [CommRule("second wait", "*", 0, self.hints["second wait"])]


class RingAllGather(Check):
    """ring_all_gather along dims 0, 1 and -1: rank order, N-1 rotations."""
    exercise, name = "rotation", "ring_all_gather"
    dims = (0, 1, -1)
    timeout = 10.0
    hints = {
        "": DIRECTION,
        "deadlock": STUCK,
        "output": "after k clockwise rotations rank r holds x_{(r-k) % N}: store it at position "
                  "(r - k) % N, and concatenate in RANK order (not in arrival order)",
        "input after the call": NEW_TENSOR,
        NEVER_WAITED: WAIT_ALL,
    }

    def run(self, ctx):
        rot = ctx.impl.rotation
        for dim in self.dims:
            x = ctx.to(value(ctx.rank))
            with ctx.phase(f"ring_all_gather dim={dim}"):
                y = rot.ring_all_gather(x, dim=dim, group=ctx.group)
            record_unwaited(ctx, f"ring_all_gather dim={dim}", f"ring_all_gather dim={dim}")
            ctx.record(f"ring_all_gather dim={dim}/output", y)
            ctx.record(f"ring_all_gather dim={dim}/input after the call", x)

    def expected(self, world_size):
        return {r: {k: v for dim in self.dims for k, v in (
            (f"ring_all_gather dim={dim}/output",
             torch.cat([value(q) for q in range(world_size)], dim)),
            (f"ring_all_gather dim={dim}/input after the call", value(r)),
            (f"ring_all_gather dim={dim}/{NEVER_WAITED}", []))}
            for r in range(world_size)}

    def comm_rules(self, world_size):
        return [rule for dim in self.dims for rule in p2p_rules(
            f"ring_all_gather dim={dim}", world_size, world_size - 1,
            "exactly N-1 rotations (one send and one receive each): after N-1 every rank has "
            "seen every piece, an N-th only brings back its own")]


def rs_input(rank: int, world: int) -> torch.Tensor:
    """Global rank `rank`'s input to a reduce-scatter over `world` ranks: its own key's."""
    return randn(40 + world, 2 * world, 2 * world + 1, owner=rank)


NOT_A_VIEW = "returned a new tensor, not a view of the input"


def new_tensor(x, y) -> bool:
    """y shares no memory with x (a view of x, or x itself, does)."""
    if not isinstance(y, torch.Tensor):
        return False
    if y.numel() == 0 or x.numel() == 0:
        return y is not x
    return y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


class RingReduceScatter(Check):
    """ring_reduce_scatter along dims 0 and 1: rank r gets the sum of every rank's chunk r."""
    exercise, name = "rotation", "ring_reduce_scatter"
    timeout = 10.0
    hints = {
        "": DIRECTION,
        "deadlock": STUCK,
        "output": "rank r must end with sum_q chunk_r(x_q). A partial sum started on rank q "
                  "reaches rank q-1 after N-1 clockwise rotations, so rank r starts the sum of "
                  "chunk (r-1) % N, and after the k-th rotation adds its own chunk (r-1-k) % N",
        "input after the call": NEW_TENSOR + " (add into a new tensor, not into a chunk view)",
        NEVER_WAITED: WAIT_ALL,
        NOT_A_VIEW: "rule 'return a NEW tensor': x.chunk(N, dim)[r] is a view of the caller's "
                    "tensor (with one rank, the tensor itself); return a copy (.clone()) or a "
                    "tensor you allocated",
    }

    def run(self, ctx):
        rot, r, n = ctx.impl.rotation, ctx.rank, ctx.world_size
        for dim in (0, 1):
            x = ctx.to(rs_input(r, n)) if dim == 0 else ctx.to(rs_input(r, n).T.contiguous())
            with ctx.phase(f"ring_reduce_scatter dim={dim}"):
                y = rot.ring_reduce_scatter(x, dim=dim, group=ctx.group)
            record_unwaited(ctx, f"ring_reduce_scatter dim={dim}", f"ring_reduce_scatter dim={dim}")
            ctx.record(f"ring_reduce_scatter dim={dim}/output", y)
            ctx.record(f"ring_reduce_scatter dim={dim}/input after the call", x)
            ctx.record_value(f"ring_reduce_scatter dim={dim}/{NOT_A_VIEW}", new_tensor(x, y))

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {}
            for dim in (0, 1):
                xs = [rs_input(q, world_size) for q in range(world_size)]
                xs = xs if dim == 0 else [x.T.contiguous() for x in xs]
                e[f"ring_reduce_scatter dim={dim}/output"] = sum(
                    x.chunk(world_size, dim)[r] for x in xs)
                e[f"ring_reduce_scatter dim={dim}/input after the call"] = xs[r]
                e[f"ring_reduce_scatter dim={dim}/{NEVER_WAITED}"] = []
                e[f"ring_reduce_scatter dim={dim}/{NOT_A_VIEW}"] = True
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        return [rule for dim in (0, 1) for rule in p2p_rules(
            f"ring_reduce_scatter dim={dim}", world_size, world_size - 1,
            "exactly N-1 rotations of the travelling partial sum")]


class Subgroup(Check):
    """Every function on the group of global ranks 1..N-1 (rank 0 stays out): group ranks
    differ from global ranks, so the peers must be translated."""
    exercise, name = "rotation", "subgroup"
    task = "E4.2"       # where the peers are translated to global ranks
    world_sizes = (3, 4)
    timeout = 10.0
    hints = {"": "use the group's rank and size (dist.get_rank(group), dist.get_world_size(group)) "
                 "for the ring, and translate the peers to GLOBAL ranks for the p2p calls with "
                 "dist.get_global_rank(group, peer)", "deadlock": STUCK}

    def members(self, world_size):
        return [list(range(1, world_size))]

    def run(self, ctx):
        rot = ctx.impl.rotation
        groups = [(m, ctx.new_group(m)) for m in self.members(ctx.world_size)]
        mine = [(m, g) for m, g in groups if ctx.rank in m]
        if not mine:
            return
        members, group = mine[0]
        x = ctx.to(value(ctx.rank))
        for direction in DIRECTIONS:
            with ctx.phase(f"subgroup {direction}"):
                ctx.record(f"subgroup {direction}/received", rot.rotate(x, direction, group=group))
        with ctx.phase("subgroup rotate_async"):
            handle = rot.rotate_async(x, "clockwise", group=group)
            ctx.record("subgroup rotate_async/received", handle.wait())
        with ctx.phase("subgroup ring_all_gather"):
            ctx.record("subgroup ring_all_gather/output", rot.ring_all_gather(x, group=group))
        with ctx.phase("subgroup ring_reduce_scatter"):
            y = rot.ring_reduce_scatter(ctx.to(rs_input(ctx.rank, len(members))), group=group)
            ctx.record("subgroup ring_reduce_scatter/output", y)

    def expected(self, world_size):
        exp = {r: {} for r in range(world_size)}
        for members in self.members(world_size):
            n = len(members)
            for g, r in enumerate(members):
                e = exp[r]
                for direction in DIRECTIONS:
                    e[f"subgroup {direction}/received"] = value(members[source(g, n, direction)])
                e["subgroup rotate_async/received"] = value(members[(g - 1) % n])
                e["subgroup ring_all_gather/output"] = torch.cat([value(q) for q in members])
                e["subgroup ring_reduce_scatter/output"] = sum(
                    rs_input(q, n).chunk(n)[g] for q in members)
        return exp
