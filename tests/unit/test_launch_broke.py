"""A group whose own connections break before any rank imported the code under test is the
machine's doing: it is launched again once, then "not graded", never an error of the code."""
import json

from rtp_course.checker import group
from rtp_course.checker.watchdog import Stuck
from rtp_course.runtime.launcher import RankFailed

BROKE = RankFailed(2, "Traceback ...\ntorch.distributed.DistNetworkError: Broken pipe")


def test_a_broken_store_before_any_import_is_the_machines():
    assert group._connections_broke(BROKE, {"began": False})


def test_once_the_code_under_test_runs_it_is_the_codes():
    assert not group._connections_broke(BROKE, {"began": True})


def test_what_a_rank_wrote_does_not_decide_it(tmp_path):
    """A rank that rewrote its status file (it names no check) and printed a transport's
    words: the parent's own record says the code under test ran, so the failure is its own."""
    (tmp_path / "status.0.json").write_text(json.dumps({"call": None}))
    assert not group._connections_broke(BROKE, {"began": True, "rundir": str(tmp_path)})


def test_other_failures_are_never_the_machines():
    assert not group._connections_broke(RankFailed(0, "ValueError: shapes differ"), {})
    assert not group._connections_broke(Stuck("comm.x", {}, {}, "Broken pipe"), {})


def test_a_check_whose_transport_broke_is_run_once_more():
    """Seen under load at 4 ranks: gloo's connectFullMesh lost a peer in a correct check."""
    from rtp_course.checker.verdict import Result
    lost = Result("groups", "build_groups", 4, "error", "rank 3 crashed: [E1127 ProcessGroupGloo."
                  "cpp:67] Gloo connectFullMesh failed with ... Connection closed by peer")
    assert group._transport_broke(lost)
    assert not group._transport_broke(Result("groups", "x", 4, "error", "rank 0 raised ValueError"))
    assert not group._transport_broke(Result("groups", "x", 4, "failed", "Broken pipe in the data"))


class _Ended:
    def __init__(self, exitcode):
        self.exitcode = exitcode


def test_a_rank_that_crashed_is_named_not_the_peer_that_lost_its_store(tmp_path):
    """Seen under load: rank 0 (which serves a confined group's store) died of SIGSEGV while
    rank 1 still made a subgroup; rank 1's store then failed and it was killed in the teardown.
    The grade must name rank 0's segfault, not rank 1's fallout."""
    from rtp_course.runtime import launcher
    (tmp_path / "error.1.txt").write_text(
        "Traceback ...\ntorch.distributed.DistNetworkError: Failed to recv, got 0 bytes. "
        "Connection was likely closed. Did the remote server shutdown or crash?\n")
    rank, trace, code = launcher._first_failure(tmp_path, [_Ended(-11), _Ended(-9)], 1)
    assert (rank, code) == (0, -11) and "SIGSEGV" in trace


def test_an_error_of_its_own_is_named_before_the_fallout(tmp_path):
    from rtp_course.runtime import launcher
    (tmp_path / "error.0.txt").write_text("Traceback ...\nRuntimeError: Connection closed by peer")
    (tmp_path / "error.1.txt").write_text("Traceback ...\nValueError: shapes differ")
    rank, trace, _ = launcher._first_failure(tmp_path, [_Ended(1), _Ended(1)], 0)
    assert rank == 1 and "shapes differ" in trace


def test_a_rank_that_leaves_after_its_own_failed_check_charges_no_later_check(tmp_path):
    """Rank 2 raised in ring_all_gather and left (its peers were inside a call it abandoned);
    ranks 0 and 1 had already set up the next check, which was charged with the crash."""
    check = type("C", (), {"id": "rotation.rotate_bfloat16"})
    for rank, at in ((0, check.id), (1, check.id), (2, "rotation.ring_all_gather")):
        (tmp_path / f"status.{rank}.json").write_text(json.dumps({"check": at, "phase": "done"}))
    left = RankFailed(2, "...", exit_code=3)
    assert not group._started(tmp_path, 3, check, left)
    assert group._started(tmp_path, 3, check, RankFailed(1, "...", exit_code=3))
    assert group._started(tmp_path, 3, check)          # no one rank ended it: any rank's word
