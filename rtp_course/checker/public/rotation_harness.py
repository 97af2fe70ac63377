"""What the rotation checks share: each rank's known tensors, the rules of a rotation, hints."""
from __future__ import annotations
import torch
from rtp_course.checker.common import rand, randint, randn
from rtp_course.checker.registry import Check, CommRule
from rtp_course.runtime import asked, commlog


DIRECTIONS = ("clockwise", "counterclockwise")


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


NEW_TENSOR = ("rule 'New tensors': never modify the caller's tensor; send it (or a contiguous "
              "copy) and receive into a NEW buffer (torch.empty of the received shape), which "
              "is what you return (with one rank: tensor.clone())")


STUCK = ("every rank waits for its peer (the ranks' calls are listed above): each transfer "
         "needs its other half posted on the peer, and a blocking dist.send on every rank "
         "waits for receivers that are themselves sending. Post the receive and the send "
         "together (dist.batch_isend_irecv with two P2POps, or irecv and isend), then wait on "
         "every work")


WAIT_ALL = ("rule 'Wait on every work': wait() on each work you started, the send's as well as "
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


BAD_DIRECTION = ("rule 'Raises': ring_peers (and so rotate) must raise ValueError for a direction other than "
                 "'clockwise' / 'counterclockwise', with a message naming both, before any "
                 "communication")


def rs_input(rank: int, world: int) -> torch.Tensor:
    """Global rank `rank`'s input to a reduce-scatter over `world` ranks: its own key's."""
    return randn(40 + world, 2 * world, 2 * world + 1, owner=rank)


NEW = "returned a new tensor, not the input or a view of it"


def others(world_size: int) -> list:
    """Every rank but rank 1: a group whose ranks are not consecutive, whose group ranks
    differ from its global ones ({0, 2}, {0, 2, 3})."""
    return [r for r in range(world_size) if r != 1]


def bad_direction(call) -> tuple:
    """(the exception `call` raises, whether its message names both directions)."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - the type is what we judge
        return type(e).__name__, ("counterclockwise" in str(e)
                                  and "clockwise" in str(e).replace("counterclockwise", ""))
    return "nothing", False


class RotationCheck(Check):
    """Run a function of the exercise on each case, {case: (argument, this rank's tensor)};
    per case record the result, the input after the call, whether the result is a new tensor
    (with one rank too), and the transfers never waited. A subclass gives cases(rank, world)
    and expected_case(case, rank, world)."""
    exercise, cpu_budget = "rotation", 20.0
    result = "received"

    def cases(self, rank, world_size) -> dict:
        raise NotImplementedError

    def cases_names(self) -> list:
        return list(self.cases(0, 1))

    def run_cases(self, ctx, fn, with_case=False):
        """fn(x, argument[, case]) on each case; returns the first case's result."""
        first = None
        for case, (arg, t) in self.cases(ctx.rank, ctx.world_size).items():
            x = ctx.to(t)
            with ctx.phase(case):
                y = fn(x, arg, case) if with_case else fn(x, arg)
            first = y if first is None else first
            record_unwaited(ctx, case, case)
            ctx.record(f"{case}/{self.result}", y)
            ctx.record(f"{case}/input after the call", x)
            ctx.record_value(f"{case}/{NEW}", new_tensor(x, y))
        return first

    def expected_case(self, case, rank, world_size):
        raise NotImplementedError

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {}
            for case, (_, x) in self.cases(r, world_size).items():
                e[f"{case}/{NEVER_WAITED}"] = []
                e[f"{case}/{self.result}"] = self.expected_case(case, r, world_size)
                e[f"{case}/input after the call"] = x
                e[f"{case}/{NEW}"] = True
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        return [rule for case in self.cases_names()
                for rule in p2p_rules(case, world_size, 1, ONE_ROTATION)]


def new_tensor(x, y) -> bool:
    """y shares no memory with x (a view of x, or x itself, does)."""
    if not asked.is_tensor(y):
        return False
    if asked.numel(y) == 0 or asked.numel(x) == 0:
        return y is not x
    return asked.storage_span(y)[0] != asked.storage_span(x)[0]   # torch's, not the objects
