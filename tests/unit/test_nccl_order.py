"""NCCL's stream order replayed on recorded programs (runtime/nccl/order.py): which patterns
a GPU run would finish, and which would hang although gloo finished them."""
from rtp_course.runtime.nccl import describe, simulate

G = "g0"


def rank_program(rank: int, world: int, *calls):
    """Steps of one rank: ("isend", peer), ("irecv", peer) async; ("send"|"recv", peer) blocking;
    ("batch", [(fam, peer), ...]) one batch_isend_irecv waited at once; ("all_reduce",) a
    blocking collective; ("wait", k) waits the k-th async call; ("wait_all",) waits them all."""
    steps, ops, handles, batches = [], {}, [], 0

    def post(family, peer, batch=None):
        i = len(ops)
        ops[i] = {"id": i, "family": family, "group": G, "members": list(range(world)),
                  "peer": peer, "batch": batch, "where": f"r{rank}:{i}"}
        steps.append(("post", i))
        return i
    for call in calls:
        kind = call[0]
        if kind in ("isend", "irecv"):
            handles.append([post(kind, call[1])])
        elif kind in ("send", "recv"):
            steps.append(("wait", [post(kind, call[1])]))
        elif kind == "batch":
            batches += 1
            ids = [post(f, p, batches) for f, p in call[1]]
            steps.append(("wait", ids))
        elif kind == "all_reduce":
            steps.append(("wait", [post("all_reduce", None)]))
        elif kind == "wait":
            steps.append(("wait", handles[call[1]]))
        elif kind == "wait_all":
            steps.append(("wait", [i for h in handles for i in h]))
    return steps, ops


def run(world, per_rank):
    return simulate({r: rank_program(r, world, *per_rank(r)) for r in range(world)})


def ring(r, n, step=1):
    return (r + step) % n, (r - step) % n


def test_a_batched_rotation_completes_at_every_world_size():
    for n in (2, 3, 4):
        assert run(n, lambda r: [("batch", [("isend", ring(r, n)[0]), ("irecv", ring(r, n)[1])])]) is None


def test_a_separate_irecv_then_isend_hangs_at_two_ranks():
    found = run(2, lambda r: [("irecv", 1 - r), ("isend", 1 - r), ("wait_all",)])
    assert found is not None
    assert "waits for its irecv from rank 1" in describe(found)


def test_sends_first_on_both_ranks_hang_too():
    assert run(2, lambda r: [("isend", 1 - r), ("irecv", 1 - r), ("wait_all",)]) is not None


def test_a_ring_of_blocking_sends_hangs():
    assert run(3, lambda r: [("send", ring(r, 3)[0]), ("recv", ring(r, 3)[1])]) is not None


def test_an_unbatched_ring_ordered_by_parity_completes():
    def prog(r):
        nxt, prv = ring(r, 4)
        first = [("isend", nxt), ("irecv", prv)] if r % 2 == 0 else [("irecv", prv), ("isend", nxt)]
        return [*first, ("wait_all",)]
    assert run(4, prog) is None


def test_an_unbatched_ring_hangs_on_one_stream():
    def prog(r):
        nxt, prv = ring(r, 3)
        return [("irecv", prv), ("isend", nxt), ("wait_all",)]
    assert run(3, prog) is not None


def test_a_collective_posted_across_a_pending_receive_hangs():
    def prog(r):
        if r == 0:
            return [("isend", 1), ("all_reduce",), ("wait", 0)]
        return [("all_reduce",), ("irecv", 0), ("wait", 0)]
    assert run(2, prog) is not None


def test_a_batch_matches_plain_operations_of_the_peer():
    def prog(r):
        if r == 0:
            return [("batch", [("isend", 1), ("irecv", 1)])]
        return [("irecv", 0), ("isend", 0), ("wait_all",)]
    assert run(2, prog) is None


def test_a_send_to_itself_needs_its_receive_in_the_same_batch():
    assert run(1, lambda r: [("batch", [("isend", 0), ("irecv", 0)])]) is None
    assert run(1, lambda r: [("isend", 0), ("irecv", 0), ("wait_all",)]) is not None


def test_an_unwaited_send_that_nobody_receives_is_not_a_hang():
    assert run(2, lambda r: [("isend", 1 - r)] if r == 0 else []) is None


def test_unknown_groups_are_left_out():
    steps, ops = rank_program(0, 2, ("irecv", 1), ("isend", 1), ("wait_all",))
    for op in ops.values():
        op["group"] = "?"
    assert simulate({0: (steps, ops), 1: (steps, ops)}) is None


def test_a_replay_that_runs_past_its_cpu_budget_stops_and_fails_the_check(monkeypatch):
    """Thousands of calls posted in an order whose replay costs the square of their number
    (the red team's forged program: the grader stalled for hours): the replay stops at
    REPLAY_CPU and the check fails saying why, instead of holding the grading up."""
    import time

    import pytest

    from rtp_course.checker import communication
    from rtp_course.checker.types import Outcome
    from rtp_course.runtime.nccl import order
    calls = 1500
    per_rank = {0: [("isend", 1)] * calls + [("wait_all",)],
                1: [("irecv", 0)] * calls + [("wait_all",)]}
    started = time.process_time()
    assert run(2, per_rank.get) is None                  # the default budget replays it
    whole = time.process_time() - started
    monkeypatch.setattr(order, "REPLAY_CPU", whole / 10)
    with pytest.raises(order.ReplayTooLong):
        run(2, per_rank.get)
    outcomes = {r: Outcome.parse({"status": "ok", "program": {
        "steps": [list(s) for s in steps], "ops": list(ops.values())}})
        for r, (steps, ops) in ((r, rank_program(r, 2, *per_rank[r])) for r in (0, 1))}
    found = communication.nccl_order(outcomes)
    assert found["status"] == "failed" and f"{2 * calls} communication calls" in found["message"]
