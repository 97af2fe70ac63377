"""Which cause a failing check's verdict names, and which hint wins (checker/verdict.py
`compare`): the order of what is judged, an exception's hint chain, a wrong value's cause
against the check's own hint, and what a work let go of or a tag adds. Made-up outcomes."""
import torch

from rtp_course.checker.communication import GROUP, SEND_BUFFERS
from rtp_course.checker.diagnosis import exception_hint
from rtp_course.checker.registry import Check, CommRule, Like
from rtp_course.checker.types import Outcome
from rtp_course.checker.verdict import compare
from rtp_course.course.messages import say

X = torch.linspace(-1.0, 2.0, 12, dtype=torch.float64)
OWN = "the check's own hint"


class Own(Check):
    exercise, name = "comm", "AllGather"
    hints = {"forward": OWN}


class Plain(Check):
    exercise, name = "comm", "AllGather"


def ok(forward=X, backward=X, events=()):
    return Outcome.parse({"status": "ok", "records": {"forward/y": forward, "backward/g": backward},
                          "values": {}, "events": list(events)})


def raised(message, phase="forward", **more):
    return Outcome.parse({"status": "error", "type": "RuntimeError", "message": message,
                          "phase": phase, "where": "comm.py:3", "records": {}, "values": {},
                          "events": [], **more})


EXPECTED = {r: {"forward/y": X, "backward/g": X} for r in (0, 1)}


def event(kind="all_gather", phase="forward", **more):
    return {"kind": kind, "family": kind, "phase": phase, "where": "comm.py:9", "nbytes": 96,
            "peer": None, **more}


# ---------------------------------------------------------------- what is judged first

def test_a_wrong_value_recorded_before_an_exception_comes_first():
    late = raised("boom", phase="backward", records={"forward/y": X * 0})
    result = compare(Plain(), 2, {0: ok(forward=X * 0), 1: late}, EXPECTED, [])
    assert (result.status, result.key) == ("failed", "forward/y"), result
    result = compare(Plain(), 2, {0: ok(), 1: raised("boom", phase="forward")}, EXPECTED, [])
    assert result.status == "error" and result.rank == 1


def test_a_rank_not_implemented_comes_before_another_ranks_error():
    todo = Outcome.parse({"status": "notimpl", "message": "rotate", "phase": "setup"})
    result = compare(Plain(), 2, {0: raised("boom"), 1: todo}, EXPECTED, [])
    assert (result.status, result.rank) == ("notimpl", 1), result


def test_a_send_buffer_written_before_its_wait_explains_a_wrong_value():
    early = event("isend", peer=1, overwritten=True)
    result = compare(Own(), 2, {0: ok(forward=X * 2, events=[early]), 1: ok()}, EXPECTED, [])
    assert result.key == "forward/send buffers" and result.hint == SEND_BUFFERS, result


def test_a_call_on_another_group_explains_a_wrong_value_and_quotes_rule_group():
    rule = CommRule("forward", "all_gather", 1, hint="gather the shards", members=(0, 1))
    elsewhere = event(members="(0, 1, 2)")
    result = compare(Own(), 2, {0: ok(forward=X * 2, events=[elsewhere]), 1: ok()}, EXPECTED,
                   [rule])
    assert result.key == "forward/communication" and result.hint == GROUP, result
    assert "ran on ranks [0, 1, 2]" in result.message


def test_a_wrong_value_comes_before_a_wrong_count_which_quotes_the_communication_rule():
    rule = CommRule("forward", "all_gather", 1, hint="one all_gather")
    twice = [event(), event()]
    result = compare(Own(), 2, {0: ok(forward=X * 0, events=twice), 1: ok()}, EXPECTED, [rule])
    assert result.key == "forward/y", result
    result = compare(Own(), 2, {0: ok(events=twice), 1: ok(events=[event()])}, EXPECTED, [rule])
    assert (result.rank, result.key) == (0, "forward/communication"), result
    assert result.hint == "rule 'Communication': one all_gather"


def test_rules_per_rank_are_each_ranks_own():
    rules = {0: [CommRule("forward", "all_gather", 2)], 1: [CommRule("forward", "all_gather", 1)]}
    outcomes = {0: ok(events=[event(), event()]), 1: ok(events=[event()])}
    assert compare(Plain(), 2, outcomes, EXPECTED, rules).passed


# ------------------------------------------------------------- an exception's hint chain

def hint_of(check, outcome):
    return compare(check, 2, {0: outcome, 1: ok()}, EXPECTED, []).hint


SURE_TEXT = "expected scalar type Double but found Float"
LIKELY_TEXT = "mat1 and mat2 shapes cannot be multiplied (6x4 and 8x3)"


def test_a_hint_the_rank_gave_wins_over_every_other():
    assert hint_of(Own(), raised(SURE_TEXT, hint="the rank's own")) == "the rank's own"


def test_a_peer_that_left_is_said_before_a_sure_cause():
    hint = hint_of(Plain(), raised(f"Connection reset by peer; {SURE_TEXT}"))
    assert "another rank ended" in hint and hint != exception_hint(SURE_TEXT)


def test_the_checks_error_hint_of_the_phase_wins_over_its_plain_error_hint():
    class Phased(Check):
        exercise, name = "comm", "AllGather"
        hints = {"error/backward": "in backward", "error": "any exception"}
    assert hint_of(Phased(), raised("boom", phase="backward")) == "in backward"
    assert hint_of(Phased(), raised("boom", phase="forward")) == "any exception"


def test_the_checks_hint_of_the_phase_wins_over_a_likely_cause_not_over_a_sure_one():
    assert hint_of(Own(), raised(LIKELY_TEXT)) == OWN
    assert hint_of(Plain(), raised(LIKELY_TEXT)) == exception_hint(LIKELY_TEXT, "likely")
    assert hint_of(Own(), raised(SURE_TEXT)) == exception_hint(SURE_TEXT, "sure") != ""


# ----------------------------------------------------------------- a wrong value's hint

def value_hint(check, forward):
    result = compare(check, 2, {0: ok(forward=forward), 1: ok()}, EXPECTED, [])
    assert result.status == "failed" and result.key == "forward/y", result
    return result


def test_a_sure_cause_of_a_wrong_value_wins_over_the_checks_own_hint():
    nan = X.clone()
    nan[3] = float("nan")
    assert "NaN" in value_hint(Own(), nan).hint
    assert value_hint(Own(), X.float()).hint == say("value.dtypes")


def test_the_checks_own_hint_wins_over_a_cause_that_does_not_override_it():
    assert value_hint(Own(), torch.zeros_like(X)).hint == OWN
    assert "all zeros where the serial model has values" in value_hint(Plain(), torch.zeros_like(X)).hint


def test_a_known_mistakes_lookalike_is_named_with_its_hint():
    flipped = X.flip(0)
    expected = {0: {"forward/y": Like(X, ((flipped, "reading the mask backwards", "flip it"),))},
                1: {"forward/y": X}}
    result = compare(Own(), 2, {0: ok(forward=flipped), 1: ok()}, expected, [])
    assert "it equals what reading the mask backwards gives" in result.message
    assert result.hint == "flip it"


# -------------------------------------------------------- what a failing verdict adds

def test_a_work_let_go_unwaited_is_named_first_where_the_check_fails():
    gone = event("irecv", peer=1, dropped=True, completed=False)
    result = compare(Own(), 2, {0: ok(forward=X * 0, events=[gone]), 1: ok()}, EXPECTED, [])
    assert result.message.startswith("rank 0 let go of a work it never waited (irecv at comm.py:9)")
    assert result.hint == f"{say('comm.dropped')}. What failed says: {OWN}"
    assert compare(Own(), 2, {0: ok(events=[gone]), 1: ok()}, EXPECTED, []).passed
    done = dict(gone, completed=True)              # it completed: it explains nothing
    assert "let go" not in compare(Own(), 2, {0: ok(forward=X * 0, events=[done]), 1: ok()},
                                 EXPECTED, []).message


def test_transfers_told_apart_by_tag_are_said_to_be_matched_by_order():
    tagged = event("isend", peer=1, tag=1)
    result = compare(Own(), 2, {0: ok(forward=X * 0, events=[tagged]), 1: ok()}, EXPECTED, [])
    assert "told its transfers apart by tag (isend with tag=1" in result.message
    assert result.hint.startswith(say("comm.tags"))
