"""judging.judge, the one entry point for a check's verdict, fed made-up outcomes and stops
(no rank, no process); the parse boundary (checker/types.py) fed junk; and the enums' values,
which are the words the reports and the JSON print."""
import json

import pytest
import torch

from rtp_course.checker import report
from rtp_course.checker.judging import judge
from rtp_course.checker.registry import Check
from rtp_course.checker.types import (NOT_GRADED, Outcome, OutcomeStatus, Place, RankStatus,
                                      Result, StopReason, Verdict)
from rtp_course.checker.watchdog import Stuck

WANT = torch.linspace(-1.0, 2.0, 6, dtype=torch.float64)


class Rotate(Check):
    exercise, name = "rotation", "rotate"
    hints = {"clockwise": "the check's hint for clockwise"}


class Given:
    """Stands in for judging.Expectations: WANT on every rank, no communication rule."""

    @staticmethod
    def get(check, ws):
        return {r: {"clockwise/y": WANT} for r in range(ws)}, []


def ok(y=WANT) -> Outcome:
    return Outcome.parse({"status": "ok", "records": {"clockwise/y": y}, "values": {},
                          "events": []})


def raised(message="boom", type_="ValueError") -> Outcome:
    return Outcome.parse({"status": "error", "type": type_, "message": message,
                          "phase": "clockwise", "where": "rotation.py:7"})


def judged(outcomes, stuck=None, rundir=None) -> Result:
    return judge(Rotate(), 2, outcomes, stuck, expect=Given(), rundir=rundir)


# ------------------------------------------------------------------ every rank finished

def test_outcomes_as_expected_pass():
    result = judged({0: ok(), 1: ok()})
    assert result.status is Verdict.PASSED and result.passed and result.message == ""


def test_a_wrong_value_fails_naming_its_rank_key_and_cause_with_the_checks_hint():
    result = judged({0: ok(), 1: ok(2 * WANT)})
    assert (result.status, result.rank, result.key, result.phase) == \
        (Verdict.FAILED, 1, "clockwise/y", "clockwise")
    assert result.message.startswith("rank 1, clockwise/y max abs error")
    assert "every entry is 2 x the expected value" in result.message, result.message
    assert result.hint == "the check's hint for clockwise"


def test_an_exception_is_an_error_that_names_the_rank_and_where():
    result = judged({0: ok(), 1: raised("the shapes differ")})
    assert (result.status, result.rank, result.phase) == (Verdict.ERROR, 1, "clockwise")
    assert result.message == "rank 1 raised ValueError: the shapes differ"
    assert result.details["where"] == "rotation.py:7"


def test_a_stub_is_not_implemented():
    todo = Outcome.parse({"status": "notimpl", "message": "rotate", "phase": "setup"})
    result = judged({0: todo, 1: ok()})
    assert result.status is Verdict.NOTIMPL and result.message == "not implemented yet: rotate"


# ------------------------------------------------------------- the group ended during it

def statuses(**by_rank) -> dict:
    return {int(r[1:]): RankStatus.parse(st) for r, st in by_rank.items()}


def in_recv(peer: int) -> dict:
    return {"check": "rotation.rotate", "index": 0, "phase": "clockwise",
            "call": "wait() on irecv", "family": "irecv", "peer": peer, "recv_from": {str(peer): 1}}


def test_a_hang_is_a_deadlock_naming_where_each_rank_waited_and_why():
    seen = statuses(r0=in_recv(1), r1=in_recv(0))
    result = judged({}, Stuck("rotation.rotate", {}, seen, "no rank moved for 6 s",
                              StopReason.HANG, 6.0, 0.1))
    assert result.status is Verdict.DEADLOCK and result.never_returned
    assert result.message == ("deadlock: no rank moved for 6 s; rank 0 waited in wait() on "
                              "irecv during phase 'clockwise'; rank 1 waited in wait() on irecv "
                              "during phase 'clockwise'")
    assert result.hint.startswith("rank 0 waits to receive from rank 1, but rank 1 never posted "
                                  "a send to rank 0"), result.hint


def test_a_busy_machine_is_not_graded():
    result = judged({}, Stuck("rotation.rotate", {}, statuses(r0={}, r1=None), "too busy",
                              StopReason.BUSY, 60.0, 0.5))
    assert result.status is Verdict.BUSY and result.status in NOT_GRADED and not result.passed
    assert result.message == "too busy (at 60 s it had used 0.5 CPU-seconds)"


def test_a_ranks_exception_before_the_group_ended_speaks_and_names_who_was_left_waiting(tmp_path):
    stuck = Stuck("rotation.rotate", {}, statuses(r0=in_recv(1), r1={}), "no rank moved")
    result = judged({1: raised("boom")}, stuck, rundir=tmp_path)
    assert (result.status, result.rank) == (Verdict.ERROR, 1)
    assert result.message == "rank 1 raised ValueError: boom (rank(s) [0] were left waiting for it)"


# ------------------------------------------------------------------- the parse boundary

JUNK = [None, "text", 3, [], {"status": "passed"}, {"status": ["ok"]}, {"records": {}}]


@pytest.mark.parametrize("raw", JUNK, ids=repr)
def test_an_outcome_with_no_known_status_is_refused_with_a_value_error(raw):
    with pytest.raises(ValueError, match="not an outcome record"):
        Outcome.parse(raw)


def test_an_outcomes_fields_of_the_wrong_kind_are_empty():
    o = Outcome.parse({"status": "error", "type": 3, "message": ["a"], "where": None,
                       "phase": {"x": 1}, "hint": 2.0, "records": [], "values": "v",
                       "events": [1, {"kind": "send"}, "x"], "program": [], "peak_recv": None})
    assert (o.type, o.message, o.where, o.phase, o.hint) == ("", "", "", "", "")
    assert (o.records, o.values, o.events, o.program, o.peak_recv) == ({}, {}, [{"kind": "send"}],
                                                                       None, {})
    assert o.status is OutcomeStatus.ERROR and not o.ok


def test_a_malformed_result_is_an_error_of_its_rank_never_graded_as_its_code():
    result = judged({0: ok(), 1: Outcome.malformed(1, "OSError")})
    assert (result.status, result.rank) == (Verdict.ERROR, 1)
    assert result.message == ("rank 1 raised MalformedResult: rank 1's result file is not a "
                              "result the checker can judge (OSError); it is not graded")


@pytest.mark.parametrize("raw", [None, "x", 3, [1], {}], ids=repr)
def test_a_status_that_is_no_record_is_the_empty_status(raw):
    st = RankStatus.parse(raw)
    assert st == RankStatus(known=isinstance(raw, dict))
    assert st.check is None and st.index is None and st.call is None and not st.done


def test_a_statuss_fields_of_the_wrong_kind_are_empty():
    st = RankStatus.parse({"check": 1, "index": True, "phase": None, "call": 7, "family": [],
                           "peer": "1", "harness": "yes", "hint_key": 2,
                           "sent_to": {"1": "2", "2": 3, "3": True}, "recv_from": [],
                           "dropped": ["a", 2, None], "last_collective": "x"})
    assert (st.check, st.index, st.phase, st.call, st.family, st.peer) == (None,) * 6
    assert st.harness is False and st.hint_key is None
    assert st.sent_to == {"2": 3} and st.recv_from == {} and st.count("sent_to", 2) == 3
    assert st.dropped == ("a",) and st.last_collective is None


def test_a_status_file_is_read_bounded_and_junk_reads_as_the_empty_status(tmp_path):
    path = tmp_path / "status.0.json"
    path.write_text('{"check": "rotation.rotate", "index": 0, "phase": "done", "harness": true}')
    st = RankStatus.read(path)
    assert (st.check, st.index, st.done, st.harness) == ("rotation.rotate", 0, True, True)
    path.write_text('{"check": "rotation.rot')                 # caught half written
    assert RankStatus.read(path) == RankStatus()
    assert RankStatus.read(tmp_path / "missing.json") == RankStatus()


# ---------------------------------------------------- the enums are the words reports print

def test_a_verdicts_value_is_what_the_json_and_the_text_report_print():
    assert [v.value for v in Verdict] == ["passed", "failed", "notimpl", "error", "deadlock",
                                          "busy", "notrun"]
    assert set(report.MARK) == set(Verdict)
    for v in Verdict:
        result = Result("rotation", "rotate", 2, v.value)
        assert result.status is v and result.status == v.value and f"{result.status}" == v.value
        check = report.to_json([result])["exercises"]["rotation"]["checks"][0]
        assert json.loads(json.dumps(check))["status"] == v.value
        assert type(json.loads(json.dumps(check))["status"]) is str


def test_a_results_status_is_always_a_verdict_and_no_other_word():
    result = Result("rotation", "rotate", 2, "failed")
    result.status = "busy"                         # as grading and group._force_busy set it
    assert result.status is Verdict.BUSY
    with pytest.raises(ValueError):
        Result("rotation", "rotate", 2, "pass")
    with pytest.raises(ValueError):
        result.status = "fail"


def test_stop_reasons_and_places_are_the_watchdogs_words_and_markers():
    assert {r.value for r in StopReason} == {"hang", "own", "exercise", "run", "busy", "slow",
                                             "disk", "import"}
    assert Stuck("c", {}, {}, reason="slow").reason is StopReason.SLOW
    assert (Place.STARTING, Place.IMPORTING) == (-2, -1) and Place.IMPORTING < 0


def test_every_key_a_rank_writes_in_its_status_is_a_field_the_parent_reads():
    """worker.Status.update(**keys) and on_status write the status; RankStatus.parse reads it:
    a key one side renames would be read as missing."""
    import ast
    import dataclasses
    import inspect

    from rtp_course.checker import worker
    tree = ast.parse(inspect.getsource(worker))
    def on_status(call) -> bool:            # status.update(...), self._status.update(...)
        f = call.func
        return isinstance(f, ast.Attribute) and f.attr == "update" and (
            getattr(f.value, "id", None) == "status" or getattr(f.value, "attr", None) == "_status")
    written = {kw.arg for node in ast.walk(tree) if isinstance(node, ast.Call) and on_status(node)
               for kw in node.keywords if kw.arg}
    written |= {"last_collective"}          # on_status writes it through a ** of its own
    fields = {f.name for f in dataclasses.fields(RankStatus)} - {"known"}
    assert written and written == fields, (written ^ fields)
