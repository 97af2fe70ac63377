"""Hostile submissions against the checker's bounds: time (the watchdog and the budgets) and
output (what a rank prints). Whatever the code does, its run ends in bounded time, and nothing
it writes reaches the grader's own streams.
"""
import subprocess
import sys

import pytest

from rtp_course.checker import engine, report
from rtp_course.runtime import netns
from test_attacks import at_forward, at_import, hostile, run

# Finds the worker's status writer (as a recipe would: through the garbage collector), writes
# nonsense over the status file, silences it, and computes for ever.
BLIND_THE_WATCHDOG = """import gc as _gc, os as _os, time as _time
_time.sleep({after})
for _o in _gc.get_objects():
    if type(_o).__name__ == 'Status':
        _os.pwrite(_o._fd, b'{{not json' * 20, 0)
        _o.update = lambda **kw: None
while True:
    _time.sleep(0.05)"""


def test_a_rank_that_blinds_its_status_file_is_stopped_at_the_checks_limit(tmp_path):
    """Blinded once the watchdog has seen the check start: stopped at the check's limit."""
    impl = hostile(tmp_path, at_forward(BLIND_THE_WATCHDOG.format(after=1.0)))
    results, text = run(impl, only=("Duplication",), timeout=3)
    assert results[0].status == "deadlock", text
    assert "did not finish within 3 s" in results[0].message, text


def test_a_rank_that_blinds_its_status_file_at_once_is_stopped_at_the_import_limit(tmp_path):
    """Blinded at once: the group is stopped at the limit of the last step the watchdog saw
    on its own clock: the check's (a poll saw it start), the import's (the harness had made
    the status files), or, on a busy machine whose polls saw nothing yet, the start-up's."""
    impl = hostile(tmp_path, at_forward(BLIND_THE_WATCHDOG.format(after=0)))
    results, text = run(impl, only=("Duplication",), timeout=3)
    assert results[0].status == "deadlock", text
    limits = (3, engine.HARNESS + engine.IMPORT_TIMEOUT, engine.STARTUP)
    assert any(f"did not finish within {s:.0f} s" in results[0].message for s in limits), text


FAKE_START = """import gc as _gc, time as _time
for _o in _gc.get_objects():
    if type(_o).__name__ == 'Status':
        _o.update(started=_time.time() + 1e6)
        _o.update = lambda **kw: None
while True:
    _time.sleep(0.05)"""


def test_a_rank_that_claims_a_later_start_is_stopped_at_the_checks_limit(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(FAKE_START)), only=("Duplication",),
                        timeout=3)
    assert results[0].status == "deadlock", text
    assert "did not finish within 3 s" in results[0].message, text


# Every collective of the exercise computes a while first: each check is slow, none hangs.
SLOW_COLLECTIVES = """import time as _time
import torch.distributed as _dist
def _slow(f):
    return lambda *a, **k: (_time.sleep({seconds}), f(*a, **k))[1]
for _name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor"):
    setattr(_dist, _name, _slow(getattr(_dist, _name)))"""


def test_slow_checks_are_charged_to_the_exercises_budget(tmp_path, monkeypatch):
    """Each check is slow but under its own timeout: the exercise's budget stops them."""
    monkeypatch.setattr(engine, "EXERCISE_BUDGET", 4.0)
    slow = hostile(tmp_path, at_import(SLOW_COLLECTIVES.format(seconds=1.5)))
    results, text = run(slow, only=("Duplication", "AllReduce", "AllGather", "Split", "subgroups"))
    slow_ones = [r for r in results if "too slow" in r.message]
    assert slow_ones and all(r.status == "failed" for r in slow_ones), text
    assert any("not run: too slow" in r.message for r in results), text
    assert "4 s in all" in text and "--timeout-scale" in text, text


def test_the_runs_budget_ends_a_run_of_slow_checks(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "RUN_BUDGET", 4.0)
    slow = hostile(tmp_path, at_import(SLOW_COLLECTIVES.format(seconds=1.5)))
    results, text = run(slow, only=("Duplication", "AllReduce", "AllGather", "Split", "subgroups"))
    assert any("the checks of one run may take 4 s" in r.message for r in results), text
    assert not all(r.passed for r in results), text


def test_an_explicit_timeout_lifts_the_budgets():
    budgets = engine._Budgets(1.0, timeout=300)
    check = type("C", (), {"exercise": "comm", "timeout": 30})()
    budgets.charge(check, 1000)
    assert budgets.spent(check) is None and budgets.limit(check) == (20.0, "hang")


# ---- output ----------------------------------------------------------------------------------

FLOOD = """import os as _os, sys as _sys
for _i in range(80):
    print(f'line {_i} ' + 'x' * (64 << 10))
    _os.write(2, b'e' * (64 << 10))
print('the last words of rank', __import__('torch.distributed').distributed.get_rank())
raise RuntimeError('stop here')"""


def test_what_a_rank_prints_is_captured_and_capped_never_the_graders_own(tmp_path):
    """5 MB to each stream of each rank: the command's own output stays a report."""
    impl = hostile(tmp_path, at_forward(FLOOD))
    out = subprocess.run([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--impl",
                          str(impl), "--world-size", "2", "--only", "Duplication", "-v"],
                         capture_output=True, text=True, timeout=300)
    assert len(out.stdout) + len(out.stderr) < 64 << 10, (len(out.stdout), len(out.stderr))
    assert "line 40 " not in out.stdout + out.stderr     # the middle of the flood is not kept
    assert "rank 0 printed (last lines)" in out.stdout, out.stdout
    assert "the last words of rank 1" in out.stdout, out.stdout
    assert "stop here" in out.stdout, out.stdout


def test_a_captured_stream_keeps_its_head_and_tail(tmp_path):
    from rtp_course.runtime import output
    kept = output._Kept(tmp_path / "s.txt", cap=100)
    for i in range(100):
        kept.add(f"{i:03d}\n".encode())
    kept.write_out()
    kept.close()
    text = (tmp_path / "s.txt").read_text()
    assert text.startswith("000\n001\n") and text.endswith("098\n099\n"), text
    assert "bytes not kept" in text and len(text) < 300, text


# ---- what a report reveals -------------------------------------------------------------------

def test_an_error_raised_by_the_check_quotes_none_of_its_code(tmp_path):
    """A result the check cannot use makes the check's own line raise: the report says so
    without the check's file, line or text (a hidden check's are the grader's)."""
    impl = hostile(tmp_path, {"comm": [("        return x.view_as(x)\n", "        return 'not a tensor'\n")]})
    results, text = run(impl, only=("Duplication",))
    assert not results[0].passed, text
    assert "raised by the check, not in your code" in text, text
    assert "public/comm.py" not in text and "checker" not in text, text


def test_the_graders_paths_do_not_reach_a_students_feedback(tmp_path):
    from rtp_course.instructor.grade_code import student_view
    impl = tmp_path / "alice" / "rtp_course"
    said = (f'File "{impl}/comm.py", line 3\n'
            f"  wrote /home/grader/course/gradebook.db and /tmp/rtp-check-w2-o1-x/tmp.0/a.pt, "
            f"ratio 1/2")
    seen = student_view(said, impl)
    assert "rtp_course/comm.py" in seen and "/home/grader" not in seen and "/tmp/" not in seen, seen
    assert "gradebook.db" in seen and "a.pt" in seen and "ratio 1/2" in seen, seen


def test_a_rank_that_takes_too_much_memory_is_stopped_at_its_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("RTP_COURSE_RANK_MEMORY_MB", "1024")
    impl = hostile(tmp_path, at_forward("_hog = torch.ones(2 << 30, dtype=torch.uint8)"))
    results, text = run(impl, only=("Duplication",))
    assert not results[0].passed, text
    assert "can't allocate memory" in text and "RTP_COURSE_RANK_MEMORY_MB" in text, text


def test_memory_no_private_mapping_holds_is_capped_too(tmp_path, monkeypatch):
    """RLIMIT_DATA counts private mappings: a shared one (`mmap.mmap(-1, n)`) is capped by the
    address space, and memory that no mapping holds (a memfd written to, a System V segment
    left behind) cannot be made by a relay rank."""
    from rtp_course.runtime import seccomp
    monkeypatch.setenv("RTP_COURSE_RANK_MEMORY_MB", "1024")
    probe = ("import ctypes as _ct, mmap as _mmap, os as _os\n"
             "_said = []\n"
             "try:\n"
             "    _m = _mmap.mmap(-1, 8 << 30)\n"
             "    _said.append('MAPPED 8 GB SHARED')\n"
             "except OSError:\n"
             "    pass\n"
             f"if {seccomp.supported() and netns.available()}:\n"
             "    try:\n"
             "        _os.memfd_create('x')\n"
             "        _said.append('A MEMFD')\n"
             "    except OSError:\n"
             "        pass\n"
             "    if _ct.CDLL(None).shmget(0, 1 << 20, 0o1600) >= 0:\n"
             "        _said.append('A SYSV SEGMENT')\n"
             "if _said:\n"
             "    raise RuntimeError(' / '.join(_said))")
    results, text = _all_reduce(hostile(tmp_path, _files_probe(probe)))
    assert results and all(r.passed for r in results), text


# Claims, in its status file, to have finished every check, then computes for ever.
CLAIM_ALL_DONE = """import gc as _gc, json as _json, os as _os, time as _time
for _o in _gc.get_objects():
    if type(_o).__name__ == 'Status':
        _o.update(check='comm.Duplication', index=0, phase='done')
        _o.update = lambda **kw: None
while True:
    _time.sleep(0.05)"""


def test_a_rank_that_claims_every_check_done_is_stopped_soon(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(CLAIM_ALL_DONE)), only=("Duplication",),
                        timeout=3)
    assert results[0].status == "deadlock", text
    assert f"did not finish within {engine.LEAVING:.0f} s" in results[0].message, text


# ---- a rank's disk, in all -----------------------------------------------------------------

def _files_probe(code: str) -> dict:
    return {"comm": [("        out = x.contiguous().clone()\n        dist.all_reduce(out, group=group)\n",
                      "        out = x.contiguous().clone()\n"
                      + "".join(f"        {line}\n" for line in code.splitlines())
                      + "        dist.all_reduce(out, group=group)\n")]}


def _all_reduce(impl, also=()):
    results = engine.run(["comm"], impl=str(impl), world_sizes=[2], only=["AllReduce", *also])
    return results, report.text(results)


@pytest.mark.skipif(not netns.available(), reason="this machine makes no namespaces")
def test_a_ranks_private_directory_holds_only_so_much(tmp_path, monkeypatch):
    """File after file, each under the per-file cap: the rank's tmpfs is full at the disk
    cap, and the report says what to do."""
    monkeypatch.setenv("RTP_COURSE_RANK_DISK_MB", "8")
    probe = ("import tempfile as _tf\n"
             "for _i in range(16):\n"
             "    with open(f'{_tf.gettempdir()}/f{_i}', 'wb') as _fh:\n"
             "        _fh.write(b'x' * (1 << 20))")
    results, text = _all_reduce(hostile(tmp_path, _files_probe(probe)))
    assert results and not any(r.passed for r in results), text
    assert "No space left on device" in text and "RTP_COURSE_RANK_DISK_MB" in text, text


def test_results_written_past_the_disk_cap_stop_the_group(tmp_path, monkeypatch):
    """The files a rank holds open from before it was confined (a result file per check) are
    capped one by one by RLIMIT_FSIZE; the watchdog caps them in all."""
    monkeypatch.setenv("RTP_COURSE_RANK_DISK_MB", "4")
    probe = ("import os as _os, time as _time\n"
             "for _fd in map(int, _os.listdir('/proc/self/fd')):\n"
             "    try:\n"
             "        _name = _os.readlink(f'/proc/self/fd/{_fd}')\n"
             "        if _name.endswith('.pt') and 'AllReduce' not in _name:   # the others\n"
             "            _os.write(_fd, b'x' * (3 << 20))\n"
             "    except OSError:\n"
             "        pass\n"
             "_time.sleep(3)")
    results, text = _all_reduce(hostile(tmp_path, _files_probe(probe)), also=["AllGather"])
    assert results and not any(r.passed for r in results if r.check == "AllReduce"), text
    assert "wrote" in text and "MB of files (a rank's cap is 4 MB" in text, text


def test_a_rank_without_a_tmpfs_makes_only_so_many_files(tmp_path, monkeypatch):
    """Where no namespace can be made (RTP_COURSE_NETNS=0 stands for such a kernel), the
    private directory is on the disk: the watchdog counts its files."""
    monkeypatch.setenv("RTP_COURSE_NETNS", "0")
    probe = ("import tempfile as _tf, time as _time\n"
             "for _i in range(12000):\n"
             "    open(f'{_tf.gettempdir()}/f{_i}', 'wb').close()\n"
             "_time.sleep(3)")
    results, text = _all_reduce(hostile(tmp_path, _files_probe(probe)))
    assert results and not any(r.passed for r in results), text
    assert "files of files" not in text and "files (a rank's cap is" in text, text


def test_a_crash_writes_no_core_file(tmp_path):
    """A core file is written by the kernel, where the rank's confinement does not reach
    (its working directory is the grader's): a rank's core size is capped at 0, for good."""
    probe = ("import resource as _r\n"
             "try:\n"
             "    _r.setrlimit(_r.RLIMIT_CORE, (1 << 30, 1 << 30))\n"
             "    raise RuntimeError('CORE FILES ALLOWED')\n"
             "except ValueError:\n"
             "    pass\n"
             "assert _r.getrlimit(_r.RLIMIT_CORE) == (0, 0)")
    results, text = _all_reduce(hostile(tmp_path, _files_probe(probe)))
    assert results and all(r.passed for r in results), text


def test_what_the_code_says_reaches_a_terminal_as_text_never_as_escape_sequences(tmp_path):
    """An exception (or a print) of the code under test is quoted in a report an instructor
    reads in a terminal: an escape sequence there could set the clipboard (OSC 52) or clear
    the screen, and a bidirectional override reorders a feedback line. Each is shown as an
    escape."""
    probe = ("print('\\x1b[2J printed')\n"
             "raise RuntimeError('\\x1b]52;c;ZWNobyBwd25lZA==\\x07 clipboard \\u202egnirts')")
    results, text = _all_reduce(hostile(tmp_path, _files_probe(probe)))
    verbose = report.text(results, verbose=True)
    assert results and not any(r.passed for r in results), text
    for shown in (text, verbose, str(report.to_json(results))):
        assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown, shown
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07 clipboard \\u202egnirts" in text, text
