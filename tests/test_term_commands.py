"""One command per intention: regrade (notebooks then code, never one alone), export (refused
while code points are missing or were overwritten by a later autograde), points (the course
table is the truth; an assignment that disagrees is not graded)."""
import csv

import pytest

from rtp_course import course as table
from rtp_course.instructor import autograde, grade_code, grade_outcome, points, term
from rtp_course.instructor.grade_outcome import CellGrade
from grading_course import make_course


def _graded(course, a, student, pts, not_graded=0):
    """As `rtp-course grade` leaves a student: code.json and the gradebook."""
    from rtp_course.instructor import grade_record
    cells = grade_code.graded_cells(course, a)
    grades = [CellGrade(c.grade_id, c.notebook, c.exercise, c.points, pts, checks=4,
                        not_graded=not_graded, names=list("abcd")) for c in cells]
    grade_outcome.write_status(grade_record.checks_dir(course, student, a) / grade_outcome.STATUS,
                               student, a, grades)
    grade_record.write_gradebook(course, a, student, cells, {g.grade_id: pts for g in grades})


def test_export_refuses_while_code_points_are_missing_or_overwritten(tmp_path):
    """`nbgrader export` before `rtp-course grade` (or after a later autograde) wrote 0 for code,
    with no warning."""
    course, a = make_course(tmp_path, {"alice": None, "bob": None, "carol": None})
    _graded(course, a, "alice", 2.5)
    _graded(course, a, "carol", 3.0)
    from rtp_course.instructor.grade_record import write_gradebook
    write_gradebook(course, a, "carol", grade_code.graded_cells(course, a), {"comm-code": 0.0})
    problems, _ = term.code_problems(course)
    assert sorted(p.split(":")[0] for p in problems) == [f"bob/{a}", f"carol/{a}"]
    assert "no code points yet" in problems[0] and "autograde ran since?" in problems[1]
    lines = []
    assert term.export(course, tmp_path / "grades.csv", log=lines.append) == 2
    assert not (tmp_path / "grades.csv").exists() and lines[-1].startswith("not exported")


def test_export_with_every_code_point_in_place_writes_the_csv(tmp_path):
    course, a = make_course(tmp_path, {"alice": None})
    _graded(course, a, "alice", 2.5)
    assert term.export(course, tmp_path / "grades.csv", log=lambda *_: None) == 0
    with open(tmp_path / "grades.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["student_id"], float(r["score"])) for r in rows] == [("alice", 2.5)]


def test_export_refuses_provisional_grades_unless_asked_then_marks_them(tmp_path):
    """A provisional mark (a check not graded) left in grades.csv with nothing saying so."""
    course, a = make_course(tmp_path, {"alice": None, "bob": None})
    _graded(course, a, "alice", 2.5)
    _graded(course, a, "bob", 3.0, not_graded=1)
    lines = []
    assert term.export(course, tmp_path / "grades.csv", log=lines.append) == 2
    assert not (tmp_path / "grades.csv").exists()
    assert any(ln.startswith("PROVISIONAL  bob/") for ln in lines) and "--provisional" in lines[-1]
    assert term.export(course, tmp_path / "grades.csv", log=lines.append, provisional_ok=True) == 0
    with open(tmp_path / "grades.csv") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert rows["alice"][term.PROVISIONAL] == ""
    assert "1 check not graded" in rows["bob"][term.PROVISIONAL]
    assert float(rows["bob"]["score"]) == 3.0


def _set_by_hand(course, a, student, score):
    from rtp_course.instructor.grade_record import gradebook
    with gradebook(course) as gb:
        gb.find_grade("comm-code", a, a, student).manual_score = score
        gb.db.commit()


def test_a_grade_set_by_hand_is_the_instructors_and_leaves_final(tmp_path):
    """A provisional (or ungraded) cell the instructor then graded in formgrader was still
    marked provisional, or refused, though the CSV held the instructor's score."""
    course, a = make_course(tmp_path, {"alice": None, "bob": None})
    _graded(course, a, "alice", 2.5, not_graded=1)
    _set_by_hand(course, a, "alice", 3.0)
    _set_by_hand(course, a, "bob", 2.0)                # never graded by `rtp-course grade`
    assert term.code_problems(course) == ([], {})
    assert term.export(course, tmp_path / "grades.csv", log=lambda *_: None) == 0
    with open(tmp_path / "grades.csv") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert (float(rows["alice"]["score"]), rows["alice"][term.PROVISIONAL]) == (3.0, "")
    assert (float(rows["bob"]["score"]), rows["bob"][term.PROVISIONAL]) == (2.0, "")


def test_a_grade_exported_with_force_says_what_it_lacks(tmp_path):
    course, a = make_course(tmp_path, {"alice": None, "bob": None})
    _graded(course, a, "alice", 2.5)
    assert term.export(course, tmp_path / "grades.csv", force=True, log=lambda *_: None) == 0
    with open(tmp_path / "grades.csv") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert rows["alice"][term.PROVISIONAL] == ""
    assert rows["bob"][term.PROVISIONAL] == "comm: no code points yet"


def test_regrade_autogrades_then_grades_the_code(tmp_path, monkeypatch):
    """The documented regrade (`nbgrader autograde --student bob --force`) set bob's code
    points to 0 and nothing graded them again."""
    course, a = make_course(tmp_path, {"bob": None})
    calls = []
    monkeypatch.setattr(autograde, "autograde", lambda c, asg, students, jobs, force, log:
                        calls.append(("autograde", students, force)) or {s: None for s in students})
    monkeypatch.setattr(grade_code, "grade_assignment", lambda c, asg, students, *a, **k:
                        calls.append(("grade", students)) or
                        grade_code.ClassGrades({s: [] for s in students}))
    assert term.regrade(course, a, ["bob"], jobs=1) == 0
    assert calls == [("autograde", ["bob"], True), ("grade", ["bob"])]


def test_a_table_edited_alone_is_detected_before_grading(tmp_path, monkeypatch, capsys):
    """Editing the table's points changed nothing: the notebook cell kept its points and
    `rtp-course grade` graded with them."""
    course, a = make_course(tmp_path, {"alice": None}, cells=(("comm", "comm-code", 10),))
    points.verify_points(course, [a])                         # agrees: 10 in both
    row = table.BY_MODULE["comm"]
    monkeypatch.setitem(table.BY_MODULE, "comm", type(row)(**{**row.__dict__, "points": 12}))
    with pytest.raises(points.PointsChanged, match="gives 10 points, the course table 12"):
        points.verify_points(course, [a])
    monkeypatch.setenv("RTP_COURSE_GRADING_DIR", str(course))
    monkeypatch.setattr("rtp_course.instructor.manifest.verify", lambda c: 1)
    from rtp_course.cli import build_parser
    args = build_parser(["grade"]).parse_args(["grade", a])
    assert term.cli_grade(args) == 2
    assert "rtp-course points --write" in capsys.readouterr().err


@pytest.mark.extended     # a report's wording; the points themselves are held by the grading tests
def test_points_says_whom_a_new_check_reweights(tmp_path):
    """A hidden check added to an exercise re-weighted every student with no word."""
    course, a = make_course(tmp_path, {"alice": None})
    _graded(course, a, "alice", 3.0)                  # graded on checks a, b, c, d
    names = [n for n, _, _ in points.check_shares("comm")]
    assert abs(sum(s for _, _, s in points.check_shares("comm")) - 1) < 1e-9
    again = points.reweighted(course, "comm", names)
    assert list(again) == [f"alice/{a}"]
    added, removed = again[f"alice/{a}"]
    assert set(added) == set(names) and removed == list("abcd")


def test_a_weight_for_a_check_that_does_not_exist_is_refused(monkeypatch):
    row = table.BY_MODULE["comm"]
    monkeypatch.setitem(table.BY_MODULE, "comm", type(row)(**{**row.__dict__, "weights": (("nope", 2),)}))
    with pytest.raises(points.PointsChanged, match="nope"):
        points.check_shares("comm")


def test_the_course_total_is_its_exercises_and_quizzes():
    assert points.total() == sum(e.points for e in table.COURSE) + sum(table.QUIZZES.values())


def test_points_write_sets_the_grading_cell_to_the_tables_points(tmp_path, monkeypatch):
    """What `rtp-course points --write` does to a notebook: the grading cell of the exercise
    takes the table's points, no other cell changes."""
    import nbformat
    from grading_course import grading_cell
    nb = nbformat.v4.new_notebook()
    nb.cells = [grading_cell("comm", "e2_comm", 10), grading_cell("data_parallel", "e1", 10)]
    path = tmp_path / "03.ipynb"
    nbformat.write(nb, path)
    row = table.BY_MODULE["comm"]
    changed = type(row)(**{**row.__dict__, "points": 12})
    assert points._set_points(path, changed, nbformat)
    cells = nbformat.read(path, as_version=4).cells
    assert [c.metadata["nbgrader"]["points"] for c in cells] == [12.0, 10]
    assert not points._set_points(path, changed, nbformat)          # again: nothing to do
