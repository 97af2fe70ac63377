"""`rtp-course autograde`: each student's nbgrader autograde writes a private copy of the gradebook,
merged into the gradebook one student at a time; the log lines every autograde used to show
for nothing are gone, and only those."""
import logging
import os
import subprocess
import sys
import time
from datetime import datetime

from nbgrader.api import Gradebook

from rtp_course.instructor import autograde
from grading_course import make_course


def _as_autograde_would(db, assignment, student):
    """What nbgrader autograde writes for one student, into `db`."""
    with Gradebook(f"sqlite:///{db}", course_id="rtp-course") as gb:
        gb.update_or_create_submission(assignment, student, timestamp="2030-01-02 03:04:05 UTC")
        g = gb.find_grade("comm-code", assignment, assignment, student)
        g.auto_score, g.needs_manual_grade = 0.0, False
        gb.find_comment("answer", assignment, assignment, student).auto_comment = "No response."
        gb.db.commit()


def test_a_private_gradebook_merges_into_the_gradebook(tmp_path):
    """Two `nbgrader autograde` processes on one SQLite gradebook wait on each other's locks
    (or fail with 'database is locked'): each writes a private copy instead, merged here."""
    course, a = make_course(tmp_path, {"alice": None, "bob": None}, answer_cell=True)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        gb.find_grade("comm-code", a, a, "bob").auto_score = 2.5      # bob's, not touched
        gb.db.commit()
    private = autograde.private_gradebook(course, tmp_path / "work" / "alice.db")
    _as_autograde_would(private, a, "alice")
    got = autograde.merge_student(course, a, "alice", private)
    assert got["score"] == 0.0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        sub = gb.find_submission(a, "alice")
        assert sub.timestamp == datetime(2030, 1, 2, 3, 4, 5)
        assert gb.find_grade("comm-code", a, a, "alice").auto_score == 0.0
        assert gb.find_comment("answer", a, a, "alice").auto_comment == "No response."
        assert gb.find_grade("comm-code", a, a, "bob").auto_score == 2.5


def test_the_hidden_tests_checksum_warning_is_dropped_for_those_cells_only(tmp_path):
    """Every autograde logged "Attribute 'checksum' for cell e2_comm has changed!" for every
    student (the release strips the hidden tests from the cell)."""
    import nbformat
    source = tmp_path / "source" / "a1"
    source.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\ngrade('comm')\n### END HIDDEN TESTS",
                                          metadata={"nbgrader": {"grade": True, "grade_id": "e2_comm"}}),
                nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade": True, "grade_id": "q1"}})]
    nbformat.write(nb, source / "a1.ipynb")
    flt = autograde.HiddenTestChecksums(autograde.hidden_test_cells(tmp_path / "source"))
    msg = "Attribute '%s' for cell %s has changed! (should be: %s, got: %s)"

    def record(*args):
        return logging.LogRecord("AutogradeApp", logging.WARNING, __file__, 1, msg, args, None)
    assert not flt.filter(record("checksum", "e2_comm", "a", "b"))
    assert flt.filter(record("checksum", "q1", "a", "b"))              # a locked cell edited
    assert flt.filter(record("source", "e2_comm", "a", "b"))


def test_the_confined_kernel_lists_its_children_without_reading_all_of_proc(monkeypatch):
    """ipykernel's shutdown read all of /proc through psutil, which the confined kernel may
    not: every autograde logged 'PermissionError: ... /proc' with a traceback."""
    from ipykernel.kernelbase import Kernel
    from rtp_course.instructor import confined_kernel
    monkeypatch.setattr(Kernel, "_process_children", Kernel._process_children)
    confined_kernel._children_from_own_proc()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = {c.pid: c for c in Kernel._process_children(None)}
        assert child.pid in found
        found[child.pid].terminate()
        child.wait(10)
        time.sleep(0.1)
        assert child.pid not in [c.pid for c in Kernel._process_children(None)]
        found[child.pid].kill()            # gone already: no exception
    finally:
        if child.poll() is None:
            child.kill()


def test_autograde_defaults_to_one_student_per_core():
    assert autograde.default_jobs() == len(os.sched_getaffinity(0))


def test_what_a_kernel_detached_is_killed_when_its_autograde_ends(tmp_path):
    """A process that double-forks into a session of its own (setsid) is re-parented to the
    autograde driver, a subreaper, and killed by its sweep; the run still going is spared."""
    from rtp_course.runtime import reaper
    pidfile = tmp_path / "daemon.pid"
    detach = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              f"        open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
              "        time.sleep(600)\n"
              "    os._exit(0)\n"
              "os._exit(0)\n")
    before = reaper.descendants()
    with reaper.subreaping():
        still_running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        subprocess.run([sys.executable, "-c", detach], check=True)
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.1)
        daemon = int(pidfile.read_text())
        assert daemon in reaper.descendants(), "the daemon was not re-parented here"
        killed = reaper.sweep_orphans(before, lambda: [still_running.pid])
        assert daemon in killed and still_running.poll() is None
        still_running.kill()
        still_running.wait()
