"""The late penalty applies to what the code earned: nbgrader computed it while autograde held
the grading cells at 0, and `rtp-course grade` wrote the code points after it."""
import datetime

import pytest

from rtp_course.instructor import grade_code, late, term
from rtp_course.instructor.grade_record import gradebook, write_gradebook
from grading_course import make_course

DUE = datetime.datetime(2026, 12, 1, 12, 0)


from nbgrader.plugins import LateSubmissionPlugin  # noqa: E402


class Half(LateSubmissionPlugin):
    """A course's own plugin: half the score off, however late."""

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return score / 2


def _late_course(tmp_path, hours_late):
    course, a = make_course(tmp_path, {"alice": None, "bob": None})
    with gradebook(course) as gb:
        gb.update_or_create_assignment(a, duedate=DUE)
        for student, late_h in (("alice", 0), ("bob", hours_late)):
            sub = gb.find_submission(a, student)
            sub.timestamp = DUE + datetime.timedelta(hours=late_h)
        gb.db.commit()
    return course, a


def _penalties(course, a):
    with gradebook(course) as gb:
        return {s: gb.find_submission_notebook(a, a, s).late_submission_penalty or 0.0
                for s in ("alice", "bob")}


@pytest.mark.parametrize("method, bob_penalty", [("none", 0.0), ("zero", 2.5)])
def test_grade_applies_the_penalty_method_to_the_code_points(tmp_path, monkeypatch, method,
                                                             bob_penalty):
    monkeypatch.setattr(late, "settings", lambda repo: {"LateSubmissionPlugin": {"penalty_method": method}})
    course, a = _late_course(tmp_path, 1.75)
    cells = grade_code.graded_cells(course, a)
    for s in ("alice", "bob"):
        write_gradebook(course, a, s, cells, {"comm-code": 2.5})
    assert _penalties(course, a) == {"alice": 0.0, "bob": bob_penalty}


def test_a_custom_plugin_class_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(late, "settings", lambda repo: {"plugin_class": "test_late_penalty.Half"})
    course, a = _late_course(tmp_path, 3)
    write_gradebook(course, a, "bob", grade_code.graded_cells(course, a), {"comm-code": 3.0})
    assert _penalties(course, a)["bob"] == 1.5


def test_export_refuses_a_stale_penalty(tmp_path, monkeypatch):
    """The penalty nbgrader computed on 0 points, left as it was after the code was graded."""
    monkeypatch.setattr(late, "settings", lambda repo: {"LateSubmissionPlugin": {"penalty_method": "zero"}})
    course, a = _late_course(tmp_path, 2)
    cells = grade_code.graded_cells(course, a)
    monkeypatch.setattr(late, "apply", lambda *args: [])        # as before: never recomputed
    write_gradebook(course, a, "bob", cells, {"comm-code": 2.5})
    monkeypatch.undo()
    monkeypatch.setattr(late, "settings", lambda repo: {"LateSubmissionPlugin": {"penalty_method": "zero"}})
    problems, _ = term.code_problems(course)
    assert any(p.startswith(f"bob/{a}") and "late penalty 0" in p and "gives 2.5" in p
               for p in problems), problems


def test_the_repositorys_config_is_read():
    from rtp_course.instructor import REPOSITORY
    late.settings.cache_clear()
    found = late.settings(str(REPOSITORY))
    assert isinstance(found, dict)
    assert late.penalty(late.plugin(found), "x", 5.0, 3600) in (None, 0.0, 5.0)
