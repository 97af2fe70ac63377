"""Collection copies regular files only: a module symlinked to the reference is refused and
named, not graded as the student's own work."""
import importlib.util
import os
from pathlib import Path

from grading_course import hidden_in_utf7

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("collect_submissions",
                                              ROOT / "scripts" / "collect_submissions.py")
collect_submissions = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collect_submissions)


def _course(tmp_path):
    course = tmp_path / "course"
    (course / "source" / "a1").mkdir(parents=True)
    (course / "source" / "a1" / "02_data_parallelism.ipynb").write_text("{}")
    return course


def test_symlinks_and_special_files_are_refused_and_named(tmp_path, capsys):
    course, student = _course(tmp_path), tmp_path / "subs" / "alice"
    (student / "rtp_course").mkdir(parents=True)
    (student / "rtp_course" / "data_parallel.py").write_text("# mine\n")
    os.symlink(ROOT / "solutions" / "comm.py", student / "rtp_course" / "comm.py")
    os.mkfifo(student / "rtp_course" / "rotation.py")
    os.symlink(ROOT / "notebooks" / "02_data_parallelism.ipynb",
               student / "02_data_parallelism.ipynb")
    missing = collect_submissions.collect(student, course, "a1")
    dest = course / "submitted" / "alice" / "a1"
    assert (dest / "rtp_course" / "data_parallel.py").read_text() == "# mine\n"
    assert not (dest / "rtp_course" / "comm.py").exists()
    assert not (dest / "rtp_course" / "rotation.py").exists()
    assert not (dest / "02_data_parallelism.ipynb").exists()
    said = capsys.readouterr().err
    assert "REFUSED" in said and "rtp_course/comm.py is a symlink" in said, said
    assert "rotation.py: not a regular file" in said, said
    assert "02_data_parallelism.ipynb is a symlink" in said, said
    assert any("comm.py (refused" in m for m in missing), missing


def test_a_symlinked_folder_on_the_way_is_refused(tmp_path, capsys):
    course, student = _course(tmp_path), tmp_path / "subs" / "bob"
    student.mkdir(parents=True)
    os.symlink(ROOT / "solutions", student / "rtp_course")     # every module the reference's
    collect_submissions.collect(student, course, "a1")
    assert list((course / "submitted" / "bob" / "a1" / "rtp_course").iterdir()) == []
    assert "rtp_course is a symlink" in capsys.readouterr().err


def test_a_students_folder_that_is_a_symlink_is_not_collected(tmp_path, capsys):
    course, subs = _course(tmp_path), tmp_path / "subs"
    (subs / "carol" / "rtp_course").mkdir(parents=True)
    os.symlink(ROOT, subs / "mallory")
    assert collect_submissions.main([str(subs), "a1", "--course", str(course)]) == 0
    assert "mallory: a student's folder that is a symlink" in capsys.readouterr().err
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["carol"]


def test_a_file_too_large_to_read_whole_is_refused_and_named(tmp_path, capsys):
    """The grader reads a module whole (to parse it): a gigabyte of comments would be its
    memory, not the student's."""
    course, student = _course(tmp_path), tmp_path / "subs" / "dave"
    (student / "rtp_course").mkdir(parents=True)
    (student / "rtp_course" / "comm.py").write_bytes(b"#" * (collect_submissions.MODULE_BYTES + 1))
    (student / "rtp_course" / "rotation.py").write_text("# mine\n")
    missing = collect_submissions.collect(student, course, "a1")
    dest = course / "submitted" / "dave" / "a1" / "rtp_course"
    assert not (dest / "comm.py").exists() and (dest / "rotation.py").exists()
    said = capsys.readouterr().err
    assert "rtp_course/comm.py: larger than 1 MB" in said, said
    assert any("comm.py (refused: larger than 1 MB)" in m for m in missing), missing


def test_an_unreadable_module_is_refused_and_the_class_goes_on(tmp_path, capsys, monkeypatch):
    """A module handed in with mode 000 (archives keep modes): a plain-user grader cannot read
    it; the collection named it and went on with the next students. Under root it is read, and
    its copy is readable (the mode is never copied)."""
    course, subs = _course(tmp_path), tmp_path / "subs"
    for name in ("aaron", "bella"):
        (subs / name / "rtp_course").mkdir(parents=True)
        (subs / name / "rtp_course" / "comm.py").write_text(f"# {name}'s\n")
    (subs / "aaron" / "rtp_course" / "comm.py").chmod(0)
    real = collect_submissions.copy_regular

    def as_a_plain_user(src, dest, limit):
        if os.stat(src).st_mode & 0o777 == 0:
            raise PermissionError(13, "Permission denied", str(src))
        return real(src, dest, limit)
    monkeypatch.setattr(collect_submissions, "copy_regular", as_a_plain_user)
    assert collect_submissions.main([str(subs), "a1", "--course", str(course)]) == 0
    said = capsys.readouterr().err
    assert "aaron/rtp_course/comm.py: unreadable (Permission denied)" in said, said
    assert (course / "submitted" / "bella" / "a1" / "rtp_course" / "comm.py").read_text() == "# bella's\n"
    monkeypatch.setattr(collect_submissions, "copy_regular", real)
    collect_submissions.collect(subs / "aaron", course, "a1")
    assert os.stat(course / "submitted" / "aaron" / "a1" / "rtp_course" / "comm.py").st_mode & 0o444


def _git(folder, *args, date=None):
    import subprocess
    env = dict(os.environ, GIT_AUTHOR_NAME="s", GIT_AUTHOR_EMAIL="s@x", GIT_COMMITTER_NAME="s",
               GIT_COMMITTER_EMAIL="s@x")
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    subprocess.run(["git", "-C", str(folder), *args], env=env, check=True, capture_output=True)


def test_the_submission_time_is_the_collections_not_the_commit_date(tmp_path):
    """A git clone's last commit time became nbgrader's timestamp: a student who commits with
    GIT_COMMITTER_DATE in the past was never late."""
    import datetime
    course, student = _course(tmp_path), tmp_path / "subs" / "erin"
    (student / "rtp_course").mkdir(parents=True)
    (student / "rtp_course" / "comm.py").write_text("# mine\n")
    _git(student, "init", "-q")
    _git(student, "add", "-A")
    _git(student, "commit", "-qm", "on time, honest", date="2001-01-01T00:00:00+00:00")
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    collect_submissions.collect(student, course, "a1")
    stamp = (course / "submitted" / "erin" / "a1" / "timestamp.txt").read_text()
    assert datetime.datetime.fromisoformat(stamp) >= before


def test_collecting_unchanged_work_again_keeps_its_time_and_changed_work_gets_a_new_one(tmp_path):
    course, student = _course(tmp_path), tmp_path / "subs" / "erin"
    (student / "rtp_course").mkdir(parents=True)
    (student / "rtp_course" / "comm.py").write_text("# mine\n")
    stamp = course / "submitted" / "erin" / "a1" / "timestamp.txt"
    collect_submissions.collect(student, course, "a1", handed_in="2030-01-01T10:00:00+00:00")
    collect_submissions.collect(student, course, "a1")
    assert stamp.read_text() == "2030-01-01T10:00:00+00:00"        # a repeat makes no one late
    (student / "rtp_course" / "comm.py").write_text("# mine, later\n")
    collect_submissions.collect(student, course, "a1")
    assert stamp.read_text() != "2030-01-01T10:00:00+00:00"


def test_the_hand_in_systems_times_win(tmp_path, capsys):
    course, subs = _course(tmp_path), tmp_path / "subs"
    (subs / "erin" / "rtp_course").mkdir(parents=True)
    (tmp_path / "times.csv").write_text("student,time\nerin,2030-02-03T04:05:06+00:00\n")
    assert collect_submissions.main([str(subs), "a1", "--course", str(course),
                                     "--times", str(tmp_path / "times.csv")]) == 0
    assert (course / "submitted" / "erin" / "a1" / "timestamp.txt").read_text() == "2030-02-03T04:05:06+00:00"
    assert "erin/a1: handed in 2030-02-03T04:05:06+00:00" in capsys.readouterr().out


def test_the_next_step_grades_code_only_where_a_cell_grades_code(tmp_path, capsys):
    """It suggested `rtp-course grade 00_why_distributed`, which exits 2 (a quiz grades no code)."""
    import nbformat
    from grading_course import grading_cell
    course, subs = _course(tmp_path), tmp_path / "subs"
    (subs / "erin").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [grading_cell("comm", "e2", 10)]
    (course / "source" / "a2").mkdir()
    nbformat.write(nb, course / "source" / "a2" / "a2.ipynb")
    assert collect_submissions.main([str(subs), "--course", str(course)]) == 0
    out = capsys.readouterr().out
    assert "    rtp-course autograde a1\n" in out and "rtp-course grade a1" not in out
    assert "    rtp-course autograde a2 && rtp-course grade a2" in out


def test_work_changed_since_its_grading_is_named_with_the_command_that_grades_it_again(tmp_path, capsys):
    """After a re-collection `autograde` skips students it has seen (unless --force), while
    the advice said "autograde && grade": the changed work was never graded again."""
    course, subs = _course(tmp_path), tmp_path / "subs"
    for who in ("erin", "finn"):
        (subs / who / "rtp_course").mkdir(parents=True)
        (subs / who / "rtp_course" / "comm.py").write_text("# mine\n")
    assert collect_submissions.main([str(subs), "a1", "--course", str(course)]) == 0
    assert "regrade" not in capsys.readouterr().out
    (subs / "finn" / "rtp_course" / "comm.py").write_text("# mine, fixed\n")
    assert collect_submissions.main([str(subs), "a1", "--course", str(course)]) == 0
    assert "    rtp-course regrade a1 --student finn\n" in capsys.readouterr().out


def test_a_module_that_declares_another_encoding_is_read_as_python_reads_it(tmp_path, capsys):
    """The warning's regex read UTF-8, so `from solutions import comm` hidden in a UTF-7
    comment line (Python runs it) went unsaid. Read as Python reads it, it is said; and so is
    the declaration itself."""
    course, student = _course(tmp_path), tmp_path / "subs" / "erin"
    (student / "rtp_course").mkdir(parents=True)
    (student / "rtp_course" / "comm.py").write_bytes(hidden_in_utf7("x = 1", "from solutions import comm"))
    (student / "rtp_course" / "rotation.py").write_text("# -*- coding: utf-8 -*-\nx = 1\n")
    collect_submissions.collect(student, course, "a1")
    said = capsys.readouterr().err
    assert "comm.py mentions the solutions" in said, said
    assert "comm.py: line 2 declares the source encoding 'utf-7'" in said, said
    assert "rotation.py" not in said, said
