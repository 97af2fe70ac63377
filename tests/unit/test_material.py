"""Where the instructor edition keeps its material (course/material.py), and the folders a
graded rank is closed to: the hidden checks and the reference, named by the parent."""
from pathlib import Path

from rtp_course.checker import group
from rtp_course.course import material

ROOT = Path(__file__).resolve().parents[2]


def test_the_instructor_edition_finds_its_material_and_the_student_edition_none(monkeypatch, tmp_path):
    assert material.solutions_dir() == (ROOT / "solutions").resolve()
    assert material.hidden_checks_dir() == ROOT / "tests" / "hidden"
    monkeypatch.setenv("RTP_COURSE_SOLUTIONS", str(tmp_path))        # a grading machine's
    assert material.solutions_dir() == tmp_path.resolve()
    monkeypatch.setattr(material, "edition", lambda: "student")
    assert material.solutions_dir() is None and material.hidden_checks_dir() is None
    assert material.closed_to_code_under_test() == []


def test_a_graded_launch_names_the_folders_its_ranks_are_closed_to(tmp_path):
    """confinement/rank.py closes what the job names: it imports neither the checker nor the
    instructor package, and reads no environment, to find them."""
    todo = []
    graded = group._job(tmp_path, todo, str(ROOT / "solutions"), [], None, "gloo", confine=True)
    assert sorted(graded["closed"]) == sorted([str(ROOT / "tests" / "hidden"),
                                               str((ROOT / "solutions").resolve())])
    assert group._job(tmp_path, todo, str(ROOT / "solutions"), [], None, "gloo",
                      confine=False)["closed"] == []
