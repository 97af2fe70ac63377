"""`rtp-course grade --merge` while the array still runs says so, student by student, instead of
"no result from its array task ... grade it again" for every one of them."""
import subprocess

from rtp_course.instructor import grade_slurm
from grading_course import make_course, scores


def test_merge_while_the_array_runs_says_it_is_still_running(tmp_path, monkeypatch):
    course, a = make_course(tmp_path, {"alice": None, "bob": None, "carol": None})
    work = course / "slurm" / a
    work.mkdir(parents=True)
    (work / "students.txt").write_text("alice\nbob\ncarol\n")
    (work / grade_slurm.JOB_ID).write_text("77\n")
    (course / "checks" / "alice" / a).mkdir(parents=True)
    grade_slurm.points_file(course, "alice", a).write_text('{"comm-code": 3.0}')
    squeue = "77_1 RUNNING\n77_2 PENDING\n"
    monkeypatch.setattr(grade_slurm, "run_slurm_command", lambda *args, check=False:
                        subprocess.CompletedProcess(args, 0, squeue, ""))
    lines = []
    got = grade_slurm.merge(course, a, ["alice", "bob", "carol"], log=lines.append)
    assert got == {"alice": {"comm-code": 3.0}} and scores(course, a, ["alice"]) == {"alice": 3.0}
    assert f"bob/{a}: still running in array 77" in lines
    assert f"carol/{a}: still pending in array 77" in lines
    assert not any("no result" in ln for ln in lines), lines
    assert lines[-1].startswith("grading array 77 is still running (2 task(s) not finished)")


def test_merge_after_the_array_names_the_task_that_left_nothing(tmp_path, monkeypatch):
    course, a = make_course(tmp_path, {"bob": None})
    work = course / "slurm" / a
    work.mkdir(parents=True)
    (work / "students.txt").write_text("bob\n")
    (work / grade_slurm.JOB_ID).write_text("78\n")
    monkeypatch.setattr(grade_slurm, "run_slurm_command", lambda *args, check=False:
                        subprocess.CompletedProcess(args, 0, "", ""))
    lines = []
    assert grade_slurm.merge(course, a, ["bob"], log=lines.append) == {}
    assert lines[0].startswith(f"bob/{a}: no result from its array task")
