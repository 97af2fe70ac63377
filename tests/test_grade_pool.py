"""The grading processes: a submission that raises, crashes or runs past the guard is that
submission's outcome, the next one is graded all the same, and nothing it started is left."""
import os
import subprocess
import sys
import time

import psutil

from rtp_course.instructor import grade_pool


def ok(x):
    return x * 2


def raises(_):
    raise ValueError("the student's module is nonsense")


def crashes(_):
    os._exit(3)


def hangs(pid_file):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(pid_file, "w") as fh:
        fh.write(str(child.pid))
    time.sleep(600)


def hangs_with_a_run_directory(pid_file):
    """As a checker that runs past the guard: its guardian started, a run directory made."""
    import tempfile

    with open(pid_file, "w") as fh:     # first: a loaded machine may reach the guard before
        fh.write(str(os.getpid()))       # the rest (then it made no directory to leave)
    from rtp_course.runtime import reaper
    reaper.ensure_guardian()
    tempfile.mkdtemp(prefix=reaper.temp_prefix("check-w2"))
    time.sleep(600)


def test_a_submission_killed_at_the_guard_leaves_no_run_directory(tmp_path):
    """A red team's: a class's sleeper, killed at the guard three rounds running, left six run
    directories in the temporary directory (the kill took the checker's guardian too)."""
    import tempfile
    pid_file = tmp_path / "pid"
    out = grade_pool.run([("s", hangs_with_a_run_directory, (str(pid_file),))], jobs=1, guard_s=8)
    assert "took longer than 8 s" in out["s"].error
    pid = pid_file.read_text()
    from pathlib import Path
    assert list(Path(tempfile.gettempdir()).glob(f"rtp-*-o{pid}-*")) == []


def test_each_failure_is_its_submissions_and_the_next_is_graded(tmp_path):
    """Today a pool future's exception (fut.result()) ended `rtp-course grade` for the class,
    and nothing bounded one submission's wall time."""
    pid_file = tmp_path / "child.pid"
    tasks = [("a", ok, (1,)), ("b", raises, (0,)), ("c", crashes, (0,)),
             ("d", hangs, (str(pid_file),)), ("e", ok, (21,))]
    seen = []
    start = time.monotonic()
    out = grade_pool.run(tasks, jobs=2, guard_s=8, on_done=lambda o: seen.append(o.key))
    assert time.monotonic() - start < 60
    assert out["a"].value == 2 and out["e"].value == 42
    assert "ValueError: the student's module is nonsense" in out["b"].error
    assert "its grading process ended (exit code 3)" in out["c"].error
    assert "took longer than 8 s" in out["d"].error
    assert sorted(seen) == list("abcde")
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def _cores():
    time.sleep(0.5)
    return sorted(os.sched_getaffinity(0))


def test_two_grading_processes_keep_to_cores_of_their_own():
    if len(os.sched_getaffinity(0)) < 2:
        return
    out = grade_pool.run([("x", _cores, ()), ("y", _cores, ())], jobs=2, guard_s=60)
    assert not set(out["x"].value) & set(out["y"].value), out


def _grading_processes() -> set:
    """This process's children that are grading processes (multiprocessing's own helpers,
    which a first spawn may start and keep, are not)."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if "spawn_main" in cmd and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def test_no_grading_process_is_left_behind():
    before = _grading_processes()
    grade_pool.run([("a", ok, (1,)), ("b", ok, (2,))], jobs=2, guard_s=60)
    time.sleep(0.5)
    assert _grading_processes() <= before, _grading_processes() - before
