"""Public checks for E4 `rotation`: the ring rotation and the ring collectives built from it.

Rank r holds a known tensor (its value says whose it is); after one rotation
it must hold rank r-1's (clockwise) or rank r+1's (counterclockwise). The
communication is part of the contract: one send and one receive per rotation,
never a collective, and N-1 rotations for a ring all-gather / reduce-scatter.
Every function returns a new tensor, at every world size (with one rank too), and a send
buffer stays untouched until its wait (the verdict reads commlog's record of it).
That rotate_async returns before the transfer is done is checked by ORDER, not
by timing: ranks 1..N-1 post their rotation and then raise a flag (ctx.flag: no
data crosses), while rank 0 waits for those flags before posting its own. A rotate_async that
waits for its transfer never gets back, since rank 0 has sent nothing: every rank is then
blocked, and the watchdog reports the hang with this check's hint.
"""
from __future__ import annotations

import torch

from rtp_course.checker.public.rotation_harness import (  # noqa: F401 - also the hidden checks'
    BAD_DIRECTION, DIRECTION, DIRECTIONS, NEVER_WAITED, NEW, NEW_TENSOR, ONE_ROTATION, STUCK,
    WAIT_ALL, RotationCheck, _pair, bad_direction, int_value, new_tensor, others, p2p_rules,
    peers, record_unwaited, rs_input, source, uneven_value, value)
from rtp_course.checker.common import randn
from rtp_course.checker.public.tensor_parallel_harness import raises
from rtp_course.checker.registry import Check, CommRule


class RingPeers(Check):
    """ring_peers both ways on the whole group and on the group of every rank but rank 1
    (global ranks differ from the group's, and are not consecutive). It only computes: no
    communication. Runs first: every later function of the exercise finds its peers with it."""
    exercise, name = "rotation", "ring_peers"
    cpu_budget = 20.0
    hints = {"": DIRECTION,
             "all but rank 1": "rule 'Group': on a group, compute r and N in the group "
                               "(dist.get_rank(group), dist.get_world_size(group)) and return "
                               "GLOBAL ranks: dist.get_global_rank(group, peer); the group's "
                               "ranks need not be consecutive"}

    def run(self, ctx):
        rot, r, n = ctx.impl.rotation, ctx.rank, ctx.world_size
        for direction in DIRECTIONS:
            with ctx.phase(direction):
                found = rot.ring_peers(direction, group=ctx.group)
            ctx.record_value(f"{direction}/(destination, source) of rank {r}", _pair(found))
        if n >= 3:
            sub = ctx.new_group(others(n))       # every rank makes it, in the same order
            if r in others(n):
                for direction in DIRECTIONS:
                    with ctx.phase(f"all but rank 1 {direction}"):
                        found = rot.ring_peers(direction, group=sub)
                    ctx.record_value(f"all but rank 1 {direction}/(destination, source) as "
                                     f"global ranks, of rank {r}", _pair(found))

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {f"{d}/(destination, source) of rank {r}": peers(r, world_size, d)
                 for d in DIRECTIONS}
            members = others(world_size)
            if world_size >= 3 and r in members:
                for d in DIRECTIONS:
                    dst, src = peers(members.index(r), len(members), d)
                    e[f"all but rank 1 {d}/(destination, source) as global ranks, of rank {r}"] = \
                        (members[dst], members[src])
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        phases = [*DIRECTIONS] + ([f"all but rank 1 {d}" for d in DIRECTIONS]
                                  if world_size >= 3 else [])
        return [CommRule(phase, "*", 0, "ring_peers only computes the two ranks: no communication")
                for phase in phases]


class BadDirection(Check):
    """ring_peers and rotate refuse a direction they do not know, before any communication.
    Its own check: a refusal that is missing says nothing about the rotations' other checks."""
    exercise, name, task, isolated = "rotation", "bad_direction", "E4.1", True
    cpu_budget = 20.0
    hints = {"": BAD_DIRECTION}

    def run(self, ctx):
        rot = ctx.impl.rotation
        for fn, call in (("ring_peers", lambda: rot.ring_peers("left", group=ctx.group)),
                         ("rotate", lambda: rot.rotate(ctx.to(value(ctx.rank)), "left",
                                                       group=ctx.group))):
            with ctx.phase(fn):
                raised, named = bad_direction(call)
            ctx.record_value(f"{fn}/exception raised for direction='left'", raised)
            ctx.record_value(f"{fn}/the message names 'clockwise' and 'counterclockwise'", named)

    def expected(self, world_size):
        return {r: {f"{fn}/{what}": want for fn in ("ring_peers", "rotate") for what, want in (
            ("exception raised for direction='left'", "ValueError"),
            ("the message names 'clockwise' and 'counterclockwise'", True))}
            for r in range(world_size)}

    def comm_rules(self, world_size):
        return [CommRule(p, "*", 0, BAD_DIRECTION) for p in ("ring_peers", "rotate")]


class Rotate(RotationCheck):
    """rotate() both ways: float and int64 tensors, a transposed (non-contiguous) input, and
    a second call that must leave the first call's result as it was."""
    name = "rotate"
    hints = {"": DIRECTION, "deadlock": STUCK, NEVER_WAITED: WAIT_ALL,
             "int64": "allocate the receive buffer with the dtype of what arrives (recv_dtype, "
                      "default the input's dtype), not a float",
             "input after the call": NEW_TENSOR, NEW: NEW_TENSOR,
             "first result after a second call": NEW_TENSOR + "; never a buffer kept (on the "
                                                 "module, in a default argument) for the next call",
             "error/transposed": "rule 'Contiguity': the input is a transposed view: send "
                                 "tensor.contiguous() (a copy only when it is not contiguous)"}

    def cases(self, r, world_size):
        return {"clockwise": ("clockwise", value(r)),
                "counterclockwise": ("counterclockwise", value(r)),
                "int64": ("clockwise", int_value(r)),
                "transposed": ("clockwise", value(r).T.contiguous().T)}

    def run(self, ctx):
        first = self.run_cases(ctx, lambda x, d: ctx.impl.rotation.rotate(x, d, group=ctx.group))
        with ctx.phase("again"):
            ctx.impl.rotation.rotate(ctx.to(value(ctx.rank) + 1), group=ctx.group)
        ctx.record("again/first result after a second call", first)

    def expected_case(self, case, r, world_size):
        src = source(r, world_size, "counterclockwise" if case == "counterclockwise" else "clockwise")
        return int_value(src) if case == "int64" else value(src)

    def expected(self, world_size):
        exp = super().expected(world_size)
        for r, e in exp.items():
            e["again/first result after a second call"] = value(source(r, world_size, "clockwise"))
        return exp

    def comm_rules(self, world_size):
        return [rule for phase in (*self.cases_names(), "again")
                for rule in p2p_rules(phase, world_size, 1, ONE_ROTATION)]


class RotateUneven(RotationCheck):
    """rotate() with recv_shape (rank r sends r + 1 rows and receives as many as its source
    has) and with recv_dtype (odd ranks send float32, even ones the check's dtype)."""
    name = "rotate_uneven"
    hints = {"": "rule 'Receivers allocate': with recv_shape the receive buffer must have THAT "
                 "shape (what the source sends), not the shape of the tensor this rank sends; "
                 "with recv_dtype, that dtype", "deadlock": STUCK}

    @staticmethod
    def dtype_of(rank):
        return torch.float32 if rank % 2 else None

    def cases(self, r, world_size):
        return {f"uneven {d}": (d, uneven_value(r)) for d in DIRECTIONS} | {
            "recv_dtype": ("clockwise", value(r))}

    def run(self, ctx):
        r, n = ctx.rank, ctx.world_size

        def call(x, direction, case):
            src = source(r, n, direction)
            if case == "recv_dtype":
                x = x.to(self.dtype_of(r) or x.dtype)
                return ctx.impl.rotation.rotate(x, direction, group=ctx.group,
                                                recv_dtype=self.dtype_of(src) or ctx.dtype)
            return ctx.impl.rotation.rotate(x, direction, group=ctx.group,
                                            recv_shape=(src + 1, 2))
        self.run_cases(ctx, call, with_case=True)

    def expected_case(self, case, r, world_size):
        if case == "recv_dtype":
            src = source(r, world_size, "clockwise")
            return value(src).to(self.dtype_of(src) or torch.float64)
        return uneven_value(source(r, world_size, case.split()[1]))


class RotateAsync(Check):
    """rotate_async returns before its transfer is done, and wait() then gives the tensor."""
    exercise, name = "rotation", "rotate_async"
    cpu_budget = 20.0
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
        NEW: NEW_TENSOR,
        NEVER_WAITED: WAIT_ALL,
    }

    def run(self, ctx):
        rot, r, n = ctx.impl.rotation, ctx.rank, ctx.world_size
        x = ctx.to(value(r))
        ctx.warm_up_ring()   # on NCCL a pair's first transfer blocks: not what is judged here
        if r == 0 and n > 1:
            # the other ranks come back from rotate_async although rank 0 has not sent; if
            # they are blocked inside it, the watchdog stops the hang and quotes the hint
            ctx.wait_flags(range(1, n), "rotate_async/returned",
                           "to get back from rotate_async (which must return before rank 0 "
                           "has sent anything)")
            ctx.record_value("rotate_async/returned before the transfer was done (ranks 1..N-1)",
                             True)
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
            y = handle.wait()
        ctx.record("wait/received", y)
        ctx.record_value(f"wait/{NEW}", new_tensor(x, y))
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
            e[f"wait/{NEW}"] = True
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
    cpu_budget = 20.0
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


class RingAllGather(RotationCheck):
    """ring_all_gather along dims 0, 1 and -1: rank order, N-1 rotations."""
    name, result = "ring_all_gather", "output"
    dims = (0, 1, -1)
    hints = {"": DIRECTION, "deadlock": STUCK, NEVER_WAITED: WAIT_ALL, NEW: NEW_TENSOR,
             "output": "after k clockwise rotations rank r holds x_{(r-k) % N}: store it at "
                       "position (r - k) % N, and concatenate in RANK order (not in arrival "
                       "order)",
             "input after the call": NEW_TENSOR}

    def cases(self, r, world_size):
        return {f"ring_all_gather dim={dim}": (dim, value(r)) for dim in self.dims}

    def run(self, ctx):
        self.run_cases(ctx, lambda x, dim: ctx.impl.rotation.ring_all_gather(x, dim=dim,
                                                                             group=ctx.group))

    def expected_case(self, case, r, world_size):
        return torch.cat([value(q) for q in range(world_size)], int(case.split("=")[1]))

    def comm_rules(self, world_size):
        return [rule for case in self.cases_names() for rule in p2p_rules(
            case, world_size, world_size - 1,
            "exactly N-1 rotations (one send and one receive each): after N-1 every rank has "
            "seen every piece, an N-th only brings back its own")]


class RingReduceScatter(RotationCheck):
    """ring_reduce_scatter along dims 0 and 1 (rank r gets the sum of every rank's chunk r),
    and the ValueError for a size N does not divide."""
    name, result = "ring_reduce_scatter", "output"
    hints = {"": DIRECTION, "deadlock": STUCK, NEVER_WAITED: WAIT_ALL,
             "output": "rank r must end with sum_q chunk_r(x_q). A partial sum started on rank q "
                       "reaches rank q-1 after N-1 clockwise rotations, so rank r starts the sum "
                       "of chunk (r-1) % N, and after the k-th rotation adds its own chunk "
                       "(r-1-k) % N",
             "input after the call": NEW_TENSOR + " (add into a new tensor, not into a chunk view)",
             NEW: "rule 'New tensors': x.chunk(N, dim)[r] is a view of the caller's tensor "
                  "(with one rank, the tensor itself); return a copy (.clone()) or a tensor "
                  "you allocated",
             "uneven size": "rule 'Raises': the size along dim must be divisible by N; "
                            "otherwise raise ValueError (the docstring), instead of cutting "
                            "uneven chunks"}
    UNEVEN = "uneven size/a size N does not divide raises"

    def cases(self, r, world_size):
        x = rs_input(r, world_size)
        return {"ring_reduce_scatter dim=0": (0, x),
                "ring_reduce_scatter dim=1": (1, x.T.contiguous())}

    def run(self, ctx):
        rot = ctx.impl.rotation
        self.run_cases(ctx, lambda x, dim: rot.ring_reduce_scatter(x, dim=dim, group=ctx.group))
        if ctx.world_size > 1:
            x = ctx.to(randn(72, 2 * ctx.world_size + 1, 3))   # 2N + 1 rows: N never divides
            with ctx.phase("uneven size"):
                ctx.record_value(self.UNEVEN, raises(lambda: rot.ring_reduce_scatter(
                    x, dim=0, group=ctx.group))[0])

    def expected_case(self, case, r, world_size):
        dim = int(case.split("=")[1])
        xs = [rs_input(q, world_size) for q in range(world_size)]
        xs = xs if dim == 0 else [x.T.contiguous() for x in xs]
        return sum(x.chunk(world_size, dim)[r] for x in xs)

    def expected(self, world_size):
        exp = super().expected(world_size)
        for e in exp.values():
            if world_size > 1:
                e[self.UNEVEN] = "ValueError"
        return exp

    def comm_rules(self, world_size):
        return [rule for case in self.cases_names() for rule in p2p_rules(
            case, world_size, world_size - 1, "exactly N-1 rotations of the travelling partial "
                                              "sum")] + [CommRule("uneven size", "*", 0,
                                                                  self.hints["uneven size"])]


class Subgroup(Check):
    """Every function on the group of every rank but rank 1 ({0, 2}, {0, 2, 3}): group ranks
    differ from global ranks and are not consecutive, so the peers must be translated."""
    exercise, name = "rotation", "subgroup"
    task = "E4.2"       # where the peers are translated to global ranks
    world_sizes = (3, 4)
    cpu_budget = 20.0
    hints = {"": "rule 'Group': use the group's rank and size (dist.get_rank(group), "
                 "dist.get_world_size(group)) for the ring, and translate the peers to GLOBAL "
                 "ranks for the p2p calls with dist.get_global_rank(group, peer): the group's "
                 "ranks need not be consecutive", "deadlock": STUCK}

    def members(self, world_size):
        return [others(world_size)]

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
