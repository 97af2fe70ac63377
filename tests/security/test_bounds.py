"""A rank's bounds: whatever the code does, its run ends in bounded time, what it prints and
writes is capped, and nothing it writes reaches the grader's streams as anything but text.
Each submission is the reference with a few hostile lines, graded confined."""
import os
import subprocess
import sys
import time

import pytest

from hostile import at_forward, at_import, hostile, in_all_reduce, run
from rtp_course.checker import report
from rtp_course.confinement import netns
from rtp_course.runtime import launcher

# Stopped: as a hang, or, on a machine too busy to tell (the watchdog saw its ranks starved),
# "not graded, run it again": never passed, never left running.
STOPPED = ("deadlock", "busy")

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


def test_a_rank_that_blinds_its_status_file_is_stopped(tmp_path):
    """Blinded once the watchdog has seen the check start: its ranks blocked, and no status
    moving, it is stopped as a hang (the watchdog measures the ranks from outside)."""
    impl = hostile(tmp_path, at_forward(BLIND_THE_WATCHDOG.format(after=1.0)))
    results, text = run(impl, only=("Duplication",))
    assert results[0].status in STOPPED, text


def test_a_rank_that_blinds_its_status_file_at_once_is_stopped(tmp_path):
    """Blinded before the watchdog saw anything: stopped all the same."""
    impl = hostile(tmp_path, at_forward(BLIND_THE_WATCHDOG.format(after=0)))
    results, text = run(impl, only=("Duplication",))
    assert results[0].status in STOPPED, text


FAKE_START = """import gc as _gc, time as _time
for _o in _gc.get_objects():
    if type(_o).__name__ == 'Status':
        _o.update(started=_time.time() + 1e6)
        _o.update = lambda **kw: None
while True:
    _time.sleep(0.05)"""


def test_a_rank_that_claims_a_later_start_is_stopped(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(FAKE_START)), only=("Duplication",))
    assert results[0].status in STOPPED, text


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


def test_a_rank_that_takes_too_much_memory_is_stopped_at_its_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("RTP_COURSE_RANK_MEMORY_MB", "1024")
    impl = hostile(tmp_path, at_forward("_hog = torch.ones(2 << 30, dtype=torch.uint8)"))
    results, text = run(impl, only=("Duplication",))
    assert not results[0].passed, text
    assert "can't allocate memory" in text and "RTP_COURSE_RANK_MEMORY_MB" in text, text


def test_memory_no_private_mapping_holds_is_capped_too(tmp_path, monkeypatch):
    """RLIMIT_DATA counts private mappings: a shared one (`mmap.mmap(-1, n)`) is capped by the
    address space, and memory that no mapping holds (a memfd written to, a System V segment
    left behind) cannot be made by a CPU rank (seccomp.py)."""
    from rtp_course.confinement import seccomp
    monkeypatch.setenv("RTP_COURSE_RANK_MEMORY_MB", "1024")
    probe = ("import ctypes as _ct, mmap as _mmap, os as _os\n"
             "_said = []\n"
             "try:\n"
             "    _m = _mmap.mmap(-1, 8 << 30)\n"
             "    _said.append('MAPPED 8 GB SHARED')\n"
             "except OSError:\n"
             "    pass\n"
             f"if {seccomp.supported()}:\n"
             "    try:\n"
             "        _os.memfd_create('x')\n"
             "        _said.append('A MEMFD')\n"
             "    except OSError:\n"
             "        pass\n"
             "    if _ct.CDLL(None).shmget(0, 1 << 20, 0o1600) >= 0:\n"
             "        _said.append('A SYSV SEGMENT')\n"
             "    if _ct.CDLL(None).msgget(0, 0o1600) >= 0:\n"
             "        _said.append('A SYSV MESSAGE QUEUE')\n"
             "    if _ct.CDLL(None).semget(0, 1, 0o1600) >= 0:\n"
             "        _said.append('A SYSV SEMAPHORE')\n"
             "    if _ct.CDLL(None).mq_open(b'/rtp-probe', 0o100 | 2, 0o600, None) >= 0:\n"
             "        _said.append('A POSIX MESSAGE QUEUE')\n"
             "if _said:\n"
             "    raise RuntimeError(' / '.join(_said))")
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce",))
    assert results and all(r.passed for r in results), text


# A connection on the launch's loopback whose other end never reads: what it holds is taken
# from the machine's TCP memory, which every launch shares.
UNREAD_CONNECTION = """import socket as _so
_srv = _so.socket()
_srv.bind(("127.0.0.1", 0))
_srv.listen()
_c = _so.create_connection(_srv.getsockname())
_a, _ = _srv.accept()
for _s, _opt in ((_c, _so.SO_SNDBUF), (_a, _so.SO_RCVBUF)):
    try:                              # a socket's own buffer size, which tcp_wmem does not bound
        _s.setsockopt(_so.SOL_SOCKET, _opt, 4 << 20)
    except OSError:
        pass
_c.setblocking(False)
_n = 0
try:
    while True:
        _n += _c.send(bytes(1 << 16))
except BlockingIOError:
    pass
if _n > 4 * CAP:
    raise RuntimeError(f'BUFFERED {_n} BYTES')"""


def test_a_connection_never_read_buffers_only_so_much(tmp_path):
    """Socket buffers count against no rank limit: in a launch's own network a socket's grow
    to netns.SOCKET_BUFFER each way, and a socket's own size (SO_SNDBUF, SO_RCVBUF) is
    refused (the machine's defaults let one connection hold 10 MB)."""
    from rtp_course.confinement import netns
    if not netns.available():
        pytest.skip("no private network for a launch on this machine")
    code = UNREAD_CONNECTION.replace("CAP", str(netns.SOCKET_BUFFER))
    results, text = run(hostile(tmp_path, in_all_reduce(code)), only=("AllReduce",))
    assert results and all(r.passed for r in results), text


# Claims, in its status file, to have finished every check, then computes for ever.
CLAIM_ALL_DONE = """import gc as _gc, json as _json, os as _os, time as _time
for _o in _gc.get_objects():
    if type(_o).__name__ == 'Status':
        _o.update(check='comm.Duplication', index=0, phase='done')
        _o.update = lambda **kw: None
while True:
    _time.sleep(0.05)"""


def test_a_rank_that_claims_every_check_done_is_stopped(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(CLAIM_ALL_DONE)), only=("Duplication",))
    assert results[0].status in STOPPED, text


@pytest.mark.skipif(not netns.available() and os.geteuid() != 0,
                    reason="no mount namespace for a rank here (user namespaces refused, not root)")
def test_a_ranks_private_directory_holds_only_so_much(tmp_path, monkeypatch):
    """File after file, each under the per-file cap: the rank's tmpfs is full at the disk
    cap, and the report says what to do."""
    monkeypatch.setenv("RTP_COURSE_RANK_DISK_MB", "8")
    probe = ("import tempfile as _tf\n"
             "for _i in range(16):\n"
             "    with open(f'{_tf.gettempdir()}/f{_i}', 'wb') as _fh:\n"
             "        _fh.write(b'x' * (1 << 20))")
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce",))
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
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce", "AllGather"))
    assert results and not any(r.passed for r in results if r.check == "AllReduce"), text
    assert "wrote" in text and "MB of files (a rank's cap is 4 MB" in text, text


@pytest.mark.skipif(os.geteuid() == 0, reason="graded as root, a rank always has a mount "
                    "namespace, so a tmpfs scratch (the test above)")
def test_a_rank_without_a_tmpfs_makes_only_so_many_files(tmp_path, monkeypatch):
    """Where no namespace can be made (RTP_COURSE_NETNS=0 stands for such a kernel), the
    private directory is on the disk: the watchdog counts its files."""
    monkeypatch.setenv("RTP_COURSE_NETNS", "0")
    probe = ("import tempfile as _tf, time as _time\n"
             "for _i in range(12000):\n"
             "    open(f'{_tf.gettempdir()}/f{_i}', 'wb').close()\n"
             "_time.sleep(3)")
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce",))
    assert results and not any(r.passed for r in results), text
    assert "files of files" not in text and "files (a rank's cap is" in text, text


def test_what_the_code_says_reaches_a_terminal_as_text_never_as_escape_sequences(tmp_path):
    """An exception (or a print) of the code under test is quoted in a report an instructor
    reads in a terminal: an escape sequence there could set the clipboard (OSC 52) or clear
    the screen, and a bidirectional override reorders a feedback line. Each is shown as an
    escape."""
    probe = ("print('\\x1b[2J printed')\n"
             "raise RuntimeError('\\x1b]52;c;ZWNobyBwd25lZA==\\x07 clipboard \\u202egnirts')")
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce",))
    verbose = report.text(results, verbose=True)
    assert results and not any(r.passed for r in results), text
    for shown in (text, verbose, str(report.to_json(results))):
        assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown, shown
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07 clipboard \\u202egnirts" in text, text
def test_a_rank_that_floods_the_disk_is_stopped_at_its_file_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("RTP_COURSE_RANK_FILE_MB", "8")
    probe = "\n".join([
        "import tempfile as _tf",
        "with open(_tf.gettempdir() + '/flood', 'wb') as _f:",
        "    for _ in range(40):",
        "        _f.write(b'x' * (1 << 20))",
    ])
    results, text = run(hostile(tmp_path, at_import(probe)), only=("Duplication",))
    assert not results[0].passed, text
    assert "File too large" in text and "at most 512 MB each" in text, text




def test_a_ranks_error_file_is_read_at_bounded_cost(tmp_path):
    """A 14 MB error (the issue's took 232 s in the report's line wrapping) is read as its
    first and last 32 KB; a link (to /etc/shadow) or a FIFO put in its place reads as
    nothing, at once. Before, the parent read the whole file, through any link."""
    path = tmp_path / "error.0.txt"
    path.write_bytes(b"Traceback\n" + b"x" * (14 << 20) + b"\nRuntimeError: the end")
    started = time.monotonic()
    said = launcher._read_bounded(path)
    assert time.monotonic() - started < 1.0
    assert len(said) < 2 * launcher.ERROR_READ and said.startswith("Traceback")
    assert said.endswith("RuntimeError: the end") and "bytes not read" in said
    (tmp_path / "link").symlink_to("/etc/shadow")
    os.mkfifo(tmp_path / "fifo")
    assert launcher._read_bounded(tmp_path / "link") == ""
    assert launcher._read_bounded(tmp_path / "fifo") == ""


# ---- hangs ------------------------------------------------------------------------------------

def test_an_import_that_hangs_is_detected_once(tmp_path):
    # (budgets x 0.3: the import spins through 3 CPU-s, not 10)
    results, text = run(hostile(tmp_path, at_import("while True:\n    pass")), world_sizes=(1, 2),
                        timeout_scale=0.3)
    assert len(results) == 4 and not any(r.passed for r in results), text
    first = [r for r in results if r.world_size == 1]
    assert all("importing comm.py did not finish" in r.message for r in first), text
    later = [r for r in results if r.world_size == 2]
    assert all("not run: it did not finish at world size 1" in r.message for r in later), text


RECV_FROM_NEXT = """import torch.distributed as dist
dist.recv(x.new_empty(1), src=(dist.get_rank() + 1) % dist.get_world_size())"""


def test_a_plain_deadlock_is_stopped_when_every_rank_waits(tmp_path):
    """Both ranks wait in recv: stopped once nobody moves, and not run again at larger sizes."""
    results, text = run(hostile(tmp_path, at_forward(RECV_FROM_NEXT)), only=("Duplication",),
                        world_sizes=(2, 3))
    assert [r.status for r in results] in (["deadlock", "deadlock"], ["busy", "busy"]), text
    assert "rank 0 waited in recv called from comm.py" in results[0].message or \
        results[0].status == "busy", text
    assert "not run: it did not finish at world size 2" in results[1].message or \
        results[0].status == "busy", text


# The main thread kept runnable while a chain of short-lived threads keeps the cores busy:
# each thread ends between two looks of the watchdog, and would take its CPU time with it.
CHURN_THREADS = """import threading as _th, torch as _t
_a = _t.ones(400, 400)
def _chain():
    _t.mm(_a, _a)
    _th.Thread(target=_chain, daemon=True).start()
for _ in range(8):
    _th.Thread(target=_chain, daemon=True).start()
_b = _t.ones(800, 800)
while True:
    _t.mm(_b, _b)"""


@pytest.mark.stress
def test_threads_that_end_between_two_looks_are_charged_their_cpu(tmp_path):
    """A rank that starves its own main thread is charged what its ended threads used: too
    slow, never "not graded" (which would cost it no point). End to end with budgets x 0.1,
    which races the scheduler on a loaded machine: the accounting itself is held on a fake
    /proc in tests/unit/test_watchdog_usage.py."""
    impl = hostile(tmp_path, at_forward(CHURN_THREADS))
    results, text = run(impl, only=("Duplication",), timeout_scale=0.1)
    assert results[0].status == "failed" and "too slow" in text, text
