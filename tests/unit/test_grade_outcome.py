"""Points from the checks' results: a check the machine was too busy to finish is never counted
as failed, the course table's weights hold, rounds of regrading merge check by check, and the
summary line says what is not graded."""
import pytest

from rtp_course import course
from rtp_course.checker import CheckReport
from rtp_course.checker.verdict import Result
from rtp_course.instructor import grade_outcome
from rtp_course.instructor.grade_code import GradedCell


def results(exercise="data_parallel", **statuses):
    """One Result per world size of each check: {check: "passed" | "failed" | "busy" | "p,b"}."""
    out = []
    for name, spec in statuses.items():
        for ws, status in enumerate(spec.split(","), start=2):
            out.append(Result(exercise, name, ws, status))
    return out


def test_a_busy_check_is_left_out_of_the_score_not_failed():
    """Today's score counted it as failed: 7 of 8 passed gave 7/8, a correct student lost points."""
    rs = results(**{f"c{i}": "passed" for i in range(7)}, slow="busy")
    rep = CheckReport(rs)
    assert rep.score("data_parallel") == 1.0 and rep.not_graded("data_parallel") == 1


def test_a_check_that_failed_at_another_size_is_graded_and_failed():
    rep = CheckReport(results(a="passed", b="failed,busy", c="busy,passed"))
    assert rep.not_graded() == 1                     # c only: b failed somewhere
    assert rep.score() == pytest.approx(1 / 2)


def test_weights_come_from_the_course_table(monkeypatch):
    """No check had a weight: adding one re-weighted everyone silently."""
    row = course.BY_MODULE["data_parallel"]
    monkeypatch.setitem(course.BY_MODULE, "data_parallel",
                        type(row)(**{**row.__dict__, "weights": (("heavy", 3),)}))
    rep = CheckReport(results(heavy="failed", light="passed"))
    assert rep.score("data_parallel") == pytest.approx(1 / 4)


def test_a_round_keeps_what_an_earlier_round_graded():
    first = results(a="busy", b="passed", c="busy")
    second = results(a="passed", b="busy", c="busy")
    merged = CheckReport(grade_outcome.merge(first, second))
    assert [r.status for r in merged.results] == ["passed", "passed", "busy"]


CELL = GradedCell("02_data_parallelism", "e1", "data_parallel", 10.0)


def test_the_summary_line_says_what_is_not_graded_and_how_often_it_was_regraded():
    rs = results(**{f"c{i}": "passed" for i in range(6)}, wrong="failed", slow="busy")
    g = grade_outcome.grade_cell(CELL, rs, regrades=2)
    assert g.status == "provisional" and g.points == 8.57
    assert grade_outcome.line("alice", "02_data_parallelism", [g]) == (
        "alice/02_data_parallelism: data_parallel 8.57/10 (1 check not graded, "
        "regraded twice)")
    assert g.phrase(regrading=True).endswith("(1 check not graded; regrading)")


def test_nothing_graded_is_no_points_not_zero():
    g = grade_outcome.grade_cell(CELL, results(a="busy", b="busy"), regrades=1)
    assert g.points is None and g.status == "not graded"
    assert g.phrase() == "data_parallel not graded (no check could be graded: machine busy, or not run, regraded once)"
    assert grade_outcome.grade_cell(CELL, []).why == "no check of it ran"       # not a zero
    g = grade_outcome.grade_cell(CELL, None, why="its grading took longer than 180 s (stopped)")
    assert g.phrase() == "data_parallel not graded (its grading took longer than 180 s (stopped))"


def test_code_json_reads_back(tmp_path):
    g = grade_outcome.grade_cell(CELL, results(a="passed", b="busy"))
    path = tmp_path / grade_outcome.STATUS
    grade_outcome.write_status(path, "alice", "02_data_parallelism", [g])
    back = grade_outcome.read_status(path)["e1"]
    assert back == g and back.status == "provisional"
    assert back.names == grade_outcome.check_names("data_parallel") and "average_gradients" in back.names
    path.write_text("{nonsense")
    assert grade_outcome.read_status(path) is None
