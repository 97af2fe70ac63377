"""What a check's verdict is when the watchdog stopped its group (diagnosis.diagnose on a
watchdog.Stuck): a busy machine or a budget others spent is never a failing verdict; a budget
of its own is too slow; a hang names its cause, the check's meeting, the ranks' statuses,
the check's own deadlock hint, then the generic one, in that order."""
from rtp_course.checker import budgets as B
from rtp_course.checker.diagnosis import diagnose
from rtp_course.course.messages import say
from rtp_course.checker.registry import Check
from rtp_course.checker.verdict import NOT_GRADED
from rtp_course.checker.types import RankStatus
from rtp_course.checker.watchdog import Stuck


class Rotate(Check):
    exercise, name = "rotation", "rotate"
    hints = {"deadlock": "the check's deadlock hint", "ordered": "the meeting's hint"}


class Plain(Check):
    exercise, name = "rotation", "rotate"


def in_send(r, **more):
    return {"check": "rotation.rotate", "phase": "clockwise", "call": "dist.send",
            "family": "send", "peer": (r + 1) % 2, **more}


SENDS = {0: in_send(0), 1: in_send(1)}


def parsed(statuses: dict) -> dict:
    """The statuses as the watchdog reads them (the rank's JSON, parsed)."""
    return {r: RankStatus.parse(st) for r, st in statuses.items()}


def stopped(reason, statuses=SENDS, check=Rotate(), why="why"):
    return diagnose(check, 2, None, Stuck(check.id, {}, parsed(statuses), why, reason, 7.0, 1.5),
                    {})


def test_a_busy_machine_is_not_graded_and_says_run_it_again():
    result = stopped("busy", why=B.BUSY)
    assert result.status == "busy" and result.status in NOT_GRADED and not result.never_returned
    assert result.message.startswith(B.BUSY)


def test_a_budget_other_checks_spent_is_not_run_not_failed():
    for reason in ("exercise", "run"):
        result = stopped(reason)
        assert result.status == "notrun" and result.message == "not run to the end: why", result


def test_its_own_budget_fails_it_as_too_slow():
    for reason in ("own", "slow", "import"):
        result = stopped(reason)
        assert result.status == "failed" and result.hint == B.SLOW_HINT, result
        assert result.details["stopped"] == reason
        assert result.never_returned == (reason != "import")    # the import, not a function
        assert "stopped after 7 s; at that moment rank 0 waited in dist.send" in result.message


def test_a_rank_over_its_disk_cap_is_an_error_of_that_rank():
    stuck = Stuck("rotation.rotate", {}, parsed(SENDS), "rank 1 wrote 600 MB", reason="disk",
                  rank=1)
    result = diagnose(Rotate(), 2, None, stuck, {})
    assert (result.status, result.rank) == ("error", 1) and "nothing to write" in result.hint


def test_a_hang_is_a_deadlock_with_where_each_rank_waited():
    result = stopped("hang", check=Plain())
    assert result.status == "deadlock" and result.never_returned
    assert result.message == ("deadlock: why; rank 0 waited in dist.send during phase "
                              "'clockwise'; rank 1 waited in dist.send during phase 'clockwise'")


def test_a_hangs_hint_the_checks_meeting_then_the_statuses_then_the_checks_then_stuck_hint():
    meeting = {0: in_send(0), 1: dict(in_send(1), family="harness", hint_key="ordered")}
    assert stopped("hang", meeting).hint == "the meeting's hint"
    assert stopped("hang").hint == say("hang.blocking-sends")
    unknown = {r: dict(in_send(r), family="all_reduce", call="all_reduce") for r in (0, 1)}
    assert stopped("hang", unknown).hint == "the check's deadlock hint"
    assert stopped("hang", unknown, check=Plain()).hint == say("hang.stuck")


def test_collectives_that_differ_are_named_before_where_the_ranks_waited():
    def waiting(r, given):
        return dict(in_send(r), family="all_reduce", call="all_reduce",
                    last_collective={"nth": 1, "group": "g", "family": "all_reduce",
                                     "kind": "all_reduce", "given": given,
                                     "where": f"rotation.py:{r}", "phase": "clockwise"})
    result = stopped("hang", {0: waiting(0, "[4] float64"), 1: waiting(1, "[4] float32")})
    assert result.status == "deadlock" and "collective calls do not match" in result.message
    assert "same collective calls" in result.hint
