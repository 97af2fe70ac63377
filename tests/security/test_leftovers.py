"""Nothing a graded rank starts outlives its run, nothing it leaves changes the machine, and
its faults are grades, never crashes of the grader. Each submission is the reference with a
few hostile lines."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from hostile import ROOT, at_forward, at_import, hostile, in_all_reduce, needs_landlock, own_run_dirs, run
from processes import running
from rtp_course.runtime import reaper


def own_leftovers():
    return [p.name for p in own_run_dirs()]


@pytest.fixture(autouse=True)
def _no_leftovers_before():
    """Each test starts without run directories of this process (earlier tests' are not ours)."""
    for p in own_run_dirs():
        shutil.rmtree(p, ignore_errors=True)


@pytest.mark.parametrize("call, says", [
    ("import sys\nsys.exit(0)", r"your code called sys\.exit\(0\) \(.*comm\.py"),
    ("import os\nos._exit(0)", r"your code called os\._exit\(0\) \(.*comm\.py"),
    ("import ctypes\nctypes.string_at(0)", r"SIGSEGV"),
])
def test_exits_and_crashes_are_reported_and_grading_goes_on(tmp_path, call, says):
    import re
    results, text = run(hostile(tmp_path, at_forward(call)))
    dup = [r for r in results if r.check == "Duplication"]
    assert dup and not dup[0].passed and re.search(says, dup[0].message), text
    assert [r.passed for r in results if r.check == "AllReduce"] == [True], text
    assert own_leftovers() == []


# ---- nothing outlives the run ------------------------------------------------------------------

DETACH = """import subprocess, time
subprocess.Popen(['sleep', '{tag}1'], start_new_session=True)
subprocess.Popen(['sh', '-c', 'sleep {tag}2'], start_new_session=True, env={{}})
time.sleep(1000)"""


def _alive(tag: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout
    return [p for p in out.split() if running(p)]


def test_detached_grandchildren_end_with_the_run(tmp_path):
    tag = f"9{os.getpid() % 1000}.{time.time_ns() % 10000}"
    results, text = run(hostile(tmp_path, at_forward(DETACH.format(tag=tag))),
                        only=("Duplication",), timeout=4)
    assert results[0].status == "deadlock", text
    assert _alive(tag) == [] and own_leftovers() == []


def test_killing_the_checker_ends_its_workers_and_their_children(tmp_path):
    tag = f"8{os.getpid() % 1000}.{time.time_ns() % 10000}"
    impl = hostile(tmp_path, at_forward(DETACH.format(tag=tag)))
    checker = subprocess.Popen([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--impl",
                                str(impl), "--world-size", "2"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_alive(tag)) < 6 and time.monotonic() < deadline:   # 2 ranks x (sleep, sh + sleep)
        time.sleep(0.2)
    assert len(_alive(tag)) >= 6, "the hostile code never started"
    time.sleep(1.5)   # the guardian looks once a second: what it never saw may escape (documented)
    import tempfile
    # multiprocessing's own directory (the forkserver's socket) is one of the checker's run dirs
    assert list(Path(tempfile.gettempdir()).glob(f"rtp-mp-o{checker.pid}-*"))
    workers = reaper.descendants(checker.pid)
    checker.send_signal(signal.SIGKILL)
    checker.wait()
    deadline = time.monotonic() + 15
    while (_alive(tag) or any(running(p) for p in workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(tag) == [], "processes the code under test detached outlived the checker"
    assert not [p for p in workers if running(p)], "workers outlived the checker"
    assert not list(Path(tempfile.gettempdir()).glob(f"rtp-*-o{checker.pid}-*"))


HOPPER = """
import os, socket, sys, time
beat = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
beat.send(b"%d;" % os.getpgid(0))   # for the test's clean-up when the run failed to end it
while True:
    time.sleep(0.001)
    beat.send(b".")        # inherited across forks: the test hears it while any copy lives
    if os.fork() != 0:
        os._exit(0)        # the parent leaves: the process lives on under a new pid
"""


def test_a_process_that_keeps_reforking_does_not_outlive_the_run(tmp_path):
    """A new pid every few hundred microseconds: a sweep that kills what one look at /proc
    saw misses it (pgrep misses it too: the test listens to its heartbeat instead, which
    needs the machine's network: a plain, unconfined check, whose ranks have no PID
    namespace of their own to end with them either: the launch's cgroup or sweep must)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe = "\n".join([
            "import subprocess as _sp, sys as _sys",
            f"_sp.Popen([_sys.executable, '-c', {HOPPER!r}, '{server.getsockname()[1]}'],",
            "          start_new_session=True, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL)",
            "import time as _t",
            "_t.sleep(0.5)",
        ])
        results, text = run(hostile(tmp_path, at_import(probe)), only=("Duplication",),
                            confine=False)
        assert all(r.passed for r in results), text
        server.settimeout(10)
        beats = [server.accept()[0]]                 # one hopper per rank
        server.settimeout(1)
        with contextlib.suppress(OSError):
            beats.append(server.accept()[0])
        groups = []
        try:
            for beat in beats:
                beat.settimeout(2)
                groups.append(int(beat.recv(64).split(b";")[0]))
                deadline, heard = time.monotonic() + 2, b"."
                while heard and time.monotonic() < deadline:   # what was sent before the end
                    heard = beat.recv(1 << 16)
                assert heard == b"", "a re-forking process outlived the run (its heartbeat goes on)"
        finally:
            for group in groups:         # its process group, atomically, if the run failed to
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            for beat in beats:
                beat.close()


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
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce",))
    assert results and all(r.passed for r in results), text


MARK = f"rtpclass{uuid.uuid4().hex[:8]}"

RECIPES = {
    # leave files wherever a path might be writable
    "files": f"""
import os as _os, site as _site, sys as _sys, tempfile as _tf
for _d in [_os.path.expanduser('~'), _os.path.expanduser('~/.cache'), '/tmp', '/dev/shm',
           _tf.gettempdir(), *_site.getsitepackages(), _os.path.dirname(_os.__file__),
           _os.path.dirname(_os.path.dirname(__file__))]:
    try:
        with open(_os.path.join(_d, '{MARK}.pth'), 'w') as _f:
            _f.write('import os; os.system("touch /tmp/{MARK}-ran")')
    except OSError:
        pass
""",
    # processes that try to outlive the run: detached, double-forked, and one that re-forks
    "processes": f"""
import ctypes as _ct, os as _os, subprocess as _sp, time as _time
_sp.Popen(['sh', '-c', 'exec -a {MARK}-detached sleep 300'], start_new_session=True)
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _ct.CDLL(None).prctl(15, b'{MARK[:15]}', 0, 0, 0)    # its name, for ps to find
        for _ in range(100000):                         # a new pid every few milliseconds
            if _os.fork():
                _os._exit(0)
            _time.sleep(0.003)
    _os._exit(0)
""",
    # mark the files it may read: the course's, its own submission's, /tmp's
    "metadata": """
import os as _os, glob as _glob, rtp_course as _rc
for _f in [_os.path.join(_os.path.dirname(_rc.__file__), 'checker', 'verdict.py'), __file__, '/tmp']:
    for _do in (lambda: _os.chmod(_f, 0o4777), lambda: _os.utime(_f, (0, 0)),
                lambda: _os.setxattr(_f, 'user.rtp', b'1')):
        try:
            _do()
        except OSError:
            pass
""",
    # fill what it may write: its own temporary directory
    "disk": """
import os as _os
with open(_os.path.join(_os.environ['HOME'], 'big'), 'wb') as _f:
    _f.write(b'x' * (64 << 20))
""",
}


def _tree(root: Path, contents: bool = True) -> dict:
    """{relative path: (mode, uid, gid, xattrs[, size, mtime])} of everything under root.

    A directory's own mtime is left out: Python writing a __pycache__ into a package
    the honest run never imported changes it, and what a directory holds is listed anyway.
    `contents=False`: metadata only (a checkout others may be editing while this runs)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            try:
                st = p.lstat()
                xattrs = tuple(sorted(os.listxattr(p, follow_symlinks=False)))
            except OSError:
                continue
            meta = (st.st_mode, st.st_uid, st.st_gid, xattrs)
            is_dir = p.is_dir() and not p.is_symlink()
            out[str(p.relative_to(root))] = meta if is_dir or not contents \
                else (*meta, st.st_size, st.st_mtime_ns)
    return out


def _marked() -> list:
    """Files and processes anywhere that carry the marker."""
    found = []
    for d in ["/tmp", "/dev/shm", *sys.path]:
        if d and os.path.isdir(d):
            found += [f"{d}/{n}" for n in os.listdir(d) if MARK in n]
    for d, _, names in os.walk(ROOT / "rtp_course"):
        found += [f"{d}/{n}" for n in names if MARK in n]
    ps = subprocess.run(["ps", "-eo", "comm,args"], capture_output=True, text=True).stdout
    return found + [line for line in ps.splitlines() if MARK[:15] in line]


GRADE = """
import sys
from rtp_course.checker import CheckReport, engine
for impl in sys.argv[1:]:
    rep = CheckReport(engine.run(['comm'], impl=impl, world_sizes=[2], confine=True))
    print(impl.rsplit('/', 1)[-1], rep.score('comm'))
"""


@needs_landlock
def test_grading_a_hostile_class_leaves_the_machine_as_it_was(tmp_path):
    """Four recipes at once (files wherever a path might be writable, processes that try to
    outlive the run, file metadata, a full disk): each submission still earns full marks,
    and HOME, TMPDIR and the course are as they were, file metadata included (the course's
    metadata only: its contents may be edited by others while this runs). Before the fix a
    rank set mode 4777 on files of /tmp and changed the mtimes of solutions/ and
    site-packages."""
    tmp_mode = os.stat("/tmp").st_mode
    home, tmp = tmp_path / "grader-home", tmp_path / "grader-tmp"
    home.mkdir()
    tmp.mkdir()
    (home / ".bashrc").write_text("# the grader's\n")
    impls = [hostile(tmp_path / name, {"comm": [("import torch\n", "import torch\n" + code)]},
                     name=name) for name, code in RECIPES.items()]
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "RTP_COURSE_WARM": "0"}
    # an honest class first: what grading itself makes (torch's caches) is there before
    honest = subprocess.run([sys.executable, "-c", GRADE, str(ROOT / "solutions")],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert honest.stdout.split() == ["solutions", "1.0"], honest.stderr[-3000:]
    before = {"home": _tree(home), "tmp": _tree(tmp),
              "course": _tree(ROOT / "rtp_course", contents=False)}
    r = subprocess.run([sys.executable, "-c", GRADE, *map(str, impls)], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # every submission is the reference under its recipe: full marks, the recipe held
    scores = dict(line.split() for line in r.stdout.splitlines())
    assert scores == {name: "1.0" for name in RECIPES}, r.stdout
    after = {"home": _tree(home), "tmp": _tree(tmp),
             "course": _tree(ROOT / "rtp_course", contents=False)}
    # the course: the metadata of what was there before (files others add or remove while
    # this runs are theirs; one a recipe adds carries the marker, which _marked finds)
    kept = {k for k in before["course"] if k in after["course"] and "__pycache__" not in k}
    for tree in (before, after):
        tree["course"] = {k: v for k, v in tree["course"].items() if k in kept}
    assert after == before
    assert os.stat("/tmp").st_mode == tmp_mode
    assert not _marked(), _marked()


# ---- an altered grader -------------------------------------------------------------------------

def test_grade_refuses_to_run_from_an_altered_grader(tmp_path):
    """A change to any file a verdict depends on (here a hidden check) after sealing stops grading."""
    hidden = tmp_path / "hidden"
    shutil.copytree(ROOT / "tests" / "hidden", hidden, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, RTP_COURSE_HIDDEN_CHECKS=str(hidden), RTP_COURSE_GRADING_DIR=str(tmp_path / "grading"))
    cli = [sys.executable, "-m", "rtp_course.cli"]
    missing = subprocess.run(cli + ["grade", "03_tp_communication"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "rtp-course seal" in missing.stderr, missing.stderr
    assert subprocess.run(cli + ["seal"], env=env, capture_output=True).returncode == 0
    with open(hidden / "comm.py", "a") as fh:
        fh.write("\n# changed\n")
    r = subprocess.run(cli + ["grade", "03_tp_communication"], env=env, capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "changed: hidden/comm.py" in r.stderr and "reinstall" in r.stderr, r.stderr


# ---- a killed notebook kernel ------------------------------------------------------------------

KERNEL = ("import os, sys, tempfile, time\n"
          "from rtp_course.runtime import reaper\n"
          "reaper.ensure_guardian()\n"
          "print(tempfile.mkdtemp(prefix=reaper.temp_prefix('kernel')), reaper.guardian_pid(),\n"
          "      flush=True)\n"
          "time.sleep(600)\n")


def test_a_killed_kernel_leaves_no_private_directory(tmp_path):
    """A notebook kernel's private directory outlives a kernel killed with its guardian (the
    autograde's sweep kills the guardian too, perhaps before it removed the directory): the
    autograde removes the directories whose kernel is gone, and only those."""
    from rtp_course.instructor.autograde import clean_up_after_kernels
    from rtp_course.runtime import reaper
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    before = reaper.descendants()
    with reaper.subreaping():
        kernels = [subprocess.Popen([sys.executable, "-c", KERNEL], env=env, text=True,
                                    stdout=subprocess.PIPE) for _ in range(2)]
        (dead, guardian), (alive, _) = [k.stdout.readline().split() for k in kernels]
        os.kill(int(guardian), signal.SIGSTOP)          # as though the sweep came first
        kernels[0].kill()
        kernels[0].wait()
        os.environ["TMPDIR"], saved = str(tmp_path), os.environ.get("TMPDIR")
        try:
            import tempfile
            tempfile.tempdir = None
            clean_up_after_kernels(before, lambda: [kernels[1].pid])
        finally:
            os.environ.pop("TMPDIR") if saved is None else os.environ.update(TMPDIR=saved)
            tempfile.tempdir = None
        try:
            assert not os.path.exists(dead), "the killed kernel's directory was left"
            assert os.path.isdir(alive), "a running kernel's directory was removed"
        finally:
            kernels[1].kill()
            kernels[1].wait()
            clean_up_after_kernels(before, lambda: [])


def test_the_next_run_removes_what_an_owner_killed_with_its_guardian_left(tmp_path):
    """`pkill -f rtp_course` ends a checker and its guardian at once: nobody removed the run's
    directories. The next checker (every launch starts its guardian first) removes those whose
    owner is gone, and only those."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    left = [tmp_path / f"rtp-check-w2-o{dead}-abc", tmp_path / f"rtp-mp-o{dead}-def"]
    for d in left:
        d.mkdir()
        (d / "listener").write_text("")
    alive = tmp_path / f"rtp-check-w2-o{os.getpid()}-ghi"
    alive.mkdir()
    other = tmp_path / f"rtp-slurm-test-{dead}"
    other.mkdir()
    r = subprocess.run([sys.executable, "-c", "from rtp_course.runtime import reaper\n"
                        "reaper.ensure_guardian()"], env={**os.environ, "TMPDIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [d for d in left if d.exists()] == []
    assert alive.is_dir() and other.is_dir()
