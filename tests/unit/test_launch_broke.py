"""A group whose own connections break before any rank imported the code under test is the
machine's doing: it is launched again once, then "not graded", never an error of the code."""
import json

from rtp_course.checker import group
from rtp_course.checker.watchdog import Stuck
from rtp_course.runtime.launcher import RankFailed

BROKE = RankFailed(2, "Traceback ...\ntorch.distributed.DistNetworkError: Broken pipe")


def test_a_broken_store_before_any_import_is_the_machines(tmp_path):
    assert group._connections_broke(BROKE, tmp_path, 4, None)


def test_once_the_code_under_test_runs_it_is_the_codes(tmp_path):
    (tmp_path / "status.1.json").write_text(json.dumps({"check": "import:comm"}))
    assert not group._connections_broke(BROKE, tmp_path, 4, None)


def test_other_failures_are_never_the_machines(tmp_path):
    assert not group._connections_broke(RankFailed(0, "ValueError: shapes differ"), tmp_path, 2, None)
    assert not group._connections_broke(Stuck("comm.x", {}, {}, "Broken pipe"), tmp_path, 2, None)


def test_a_check_whose_transport_broke_is_run_once_more():
    """Seen under load at 4 ranks: gloo's connectFullMesh lost a peer in a correct check."""
    from rtp_course.checker.verdict import Result
    lost = Result("groups", "build_groups", 4, "error", "rank 3 crashed: [E1127 ProcessGroupGloo."
                  "cpp:67] Gloo connectFullMesh failed with ... Connection closed by peer")
    assert group._transport_broke(lost)
    assert not group._transport_broke(Result("groups", "x", 4, "error", "rank 0 raised ValueError"))
    assert not group._transport_broke(Result("groups", "x", 4, "failed", "Broken pipe in the data"))
