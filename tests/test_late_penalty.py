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


def test_a_policy_in_a_jupyter_config_directory_is_read_as_nbgrader_reads_it(tmp_path, monkeypatch):
    from rtp_course.instructor import REPOSITORY
    (tmp_path / "nbgrader_config.py").write_text(
        'c = get_config()\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    late.settings.cache_clear()
    try:
        found = late.settings(str(REPOSITORY))
    finally:
        late.settings.cache_clear()
    assert found == {"LateSubmissionPlugin": {"penalty_method": "zero"}}
    assert late.penalty(late.plugin(found), "bob", 5.0, 3600) == 5.0


def test_a_plugins_own_settings_reach_it_lists_and_dicts_too(tmp_path, monkeypatch):
    """A plugin with per-student extensions (a dict setting) got none of them: bob, within
    his extension, was penalised as late."""
    from rtp_course.instructor import REPOSITORY
    (tmp_path / "extlate.py").write_text(
        "from nbgrader.plugins import LateSubmissionPlugin\n"
        "from traitlets import Dict, Set\n\n\n"
        "class Extended(LateSubmissionPlugin):\n"
        "    extensions = Dict(config=True)\n"
        "    exempt = Set(config=True)\n\n"
        "    def late_submission_penalty(self, student_id, score, total_seconds_late):\n"
        "        if student_id in self.exempt or total_seconds_late <= self.extensions.get(student_id, 0):\n"
        "            return 0\n"
        "        return score\n")
    (tmp_path / "nbgrader_config.py").write_text(
        'c = get_config()\nc.AssignLatePenalties.plugin_class = "extlate.Extended"\n'
        'c.Extended.extensions = {"bob": 86400}\nc.Extended.exempt = {"carol"}\n')
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    late.settings.cache_clear()
    try:
        found = late.settings(str(REPOSITORY))
    finally:
        late.settings.cache_clear()
    assert found["Extended"] == {"extensions": {"bob": 86400}, "exempt": ["carol"]}
    the_plugin = late.plugin(found)
    assert late.penalty(the_plugin, "bob", 4.0, 3600) == 0.0
    assert late.penalty(the_plugin, "carol", 4.0, 3600) == 0.0
    assert late.penalty(the_plugin, "ann", 4.0, 3600) == 4.0
