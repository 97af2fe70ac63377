"""The warm check server: a later `rtp-course check` is served by a process that imported torch
once, says exactly what a cold run says, sees the student's edits, and leaves nothing behind."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rtp_course
from rtp_course.cli import warm
from rtp_course.runtime import reaper
from processes import running

ROOT = Path(__file__).resolve().parents[1]
# A server serves no process with no_new_privs (a confined rank has it for good): where this
# test process already has it (some containers), every command runs its check itself.
needs_server = pytest.mark.skipif("NoNewPrivs:\t1" in Path("/proc/self/status").read_text(),
                                reason="no_new_privs is set: the warm server serves nobody here")
CLI = [sys.executable, "-m", "rtp_course.cli", "check", "comm", "--world-size", "2",
       "--only", "Duplication", "AllReduce"]


@pytest.fixture
def server_dir(tmp_path):
    where = tmp_path / "warm"
    where.mkdir(mode=0o700)
    yield where
    for pid in subprocess.run(["pgrep", "-f", f"rtp_course.cli.warm_server {where}"], capture_output=True,
                              text=True).stdout.split():   # stop the servers this test started
        try:
            os.kill(int(pid), signal.SIGTERM)
        except OSError:
            pass


def check(server_dir, *extra, warm_on=True, **kw):
    env = dict(os.environ, RTP_COURSE_WARM="1" if warm_on else "0",
               RTP_COURSE_WARM_DIR=str(server_dir), RTP_COURSE_WARM_IDLE="60")
    return subprocess.run(CLI + list(extra), env=env, capture_output=True, text=True,
                          timeout=300, **kw)


def report(r) -> str:
    """The report less its wall-time line, and less the numbers of a wrong tensor: each run
    draws the ranks' own data afresh (checker.inputs), so the errors and where the largest
    one sits differ between runs; what failed, why and the hint do not."""
    lines = [line for line in r.stdout.splitlines() if not line.startswith("  (")]
    return re.sub(r"max abs error .*? entries wrong", "max abs error ...", "\n".join(lines))


def served(server_dir) -> dict:
    [state] = server_dir.glob("*.json")
    return json.loads(state.read_text())


def start_server(server_dir) -> int:
    """The first command finds no server: it runs its check itself and leaves one, which the
    next command waits for. The server's pid."""
    for _ in range(2):
        r = check(server_dir)
        assert "checks passed" in r.stdout, r.stdout + r.stderr
    assert served(server_dir)["served"] == 1, "the second command was not served"
    return served(server_dir)["pid"]


def impl_with_bug(tmp_path) -> Path:
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    path = impl / "comm.py"
    path.write_text(path.read_text().replace("        dist.all_reduce(grad, group=ctx.group)\n",
                                             "        pass\n", 1))
    return impl


@needs_server
@pytest.mark.extended   # the served rank's trust is held in the default tier, below
def test_a_warm_run_says_what_a_cold_run_says_and_sees_the_students_edits(server_dir, tmp_path):
    impl = impl_with_bug(tmp_path)
    cold = check(server_dir, "--impl", str(impl), warm_on=False)
    first = check(server_dir, "--impl", str(impl))     # runs itself, then starts a server
    assert not list(server_dir.glob("*.json")) or served(server_dir)["served"] == 0
    second = check(server_dir, "--impl", str(impl))    # waits for that server
    assert cold.returncode == first.returncode == second.returncode == 1, second.stderr
    assert report(second) == report(first) == report(cold) and "FAIL" in report(first), \
        second.stdout
    pid = served(server_dir)["pid"]
    assert served(server_dir) == {"pid": pid, "served": 1}, "the second run was not served warm"
    fixed = impl / "comm.py"
    fixed.write_text((ROOT / "solutions" / "comm.py").read_text())
    third = check(server_dir, "--impl", str(impl))
    assert third.returncode == 0, third.stdout + third.stderr
    assert served(server_dir) == {"pid": pid, "served": 2}, "the third run was not served warm"
    bad = check(server_dir, "--no-such-option")
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr, bad.stderr


def test_the_fingerprint_follows_the_course_files_but_not_the_exercises(tmp_path, monkeypatch):
    package = tmp_path / "rtp_course"
    shutil.copytree(Path(rtp_course.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(rtp_course, "__file__", str(package / "__init__.py"))
    before = warm.fingerprint()
    (package / "comm.py").write_text("# the student's edit\n")
    assert warm.fingerprint() == before
    with open(package / "checker" / "verdict.py", "a") as fh:
        fh.write("# a changed grader\n")
    after = warm.fingerprint()
    assert after != before
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert warm.fingerprint() != after


def test_two_slurm_jobs_or_cgroups_of_one_user_never_share_a_server(monkeypatch, tmp_path):
    """Two jobs of one user on a node that see the same CUDA_VISIBLE_DEVICES had one
    fingerprint, so the second job's checks ran in the first job's server (its GPUs, its
    cgroup's CPUs, and gone when that job ends). The job, its step and the process's cgroup
    are in the fingerprint."""
    import builtins
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("SLURM_JOB_ID", "100")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    first = warm.fingerprint()
    assert warm.fingerprint() == first
    monkeypatch.setenv("SLURM_JOB_ID", "101")
    assert warm.fingerprint() != first
    monkeypatch.setenv("SLURM_JOB_ID", "100")
    monkeypatch.setenv("SLURM_STEP_ID", "1")
    assert warm.fingerprint() != first
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    real_open = builtins.open

    def other_cgroup(path, *args, **kwargs):
        if str(path) == "/proc/self/cgroup":
            other = tmp_path / "cgroup"
            other.write_text("0::/system.slice/slurmstepd.scope/job_101/step_0/user/task_0\n")
            return real_open(other, *args, **kwargs)
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", other_cgroup)
    assert warm.fingerprint() != first


def test_a_directory_others_can_open_is_not_used(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    monkeypatch.setenv("RTP_COURSE_WARM_DIR", str(open_dir))
    assert warm.runtime_dir() is None and warm.run_check(["check"]) is None


@needs_server
@pytest.mark.parametrize("victim", [   # the server's side in the default tier, both in extended
    pytest.param("the command", marks=pytest.mark.extended), "the run's process in the server"])
def test_a_killed_run_leaves_nothing_behind(server_dir, tmp_path, victim):
    """SIGKILL of the command (its run sees the connection close) or of the server's child that
    runs it (its guardian takes over): the ranks, the forkserver and what they started end."""
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    path = impl / "comm.py"
    path.write_text(path.read_text().replace(
        "        return x.view_as(x)\n", "        import time\n        time.sleep(1000)\n", 1))
    env = dict(os.environ, RTP_COURSE_WARM="1", RTP_COURSE_WARM_DIR=str(server_dir),
               RTP_COURSE_WARM_IDLE="60")
    server = start_server(server_dir)
    command = subprocess.Popen(CLI + ["--impl", str(impl)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(reaper.descendants(server)) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)        # the run's child, its forkserver and guardian, the ranks ...
    time.sleep(1.5)            # the guardian looks once a second
    run = {p for p in reaper.descendants(server) if running(p)}
    assert len(run) >= 4, "the run never started"
    if victim == "the command":
        command.send_signal(signal.SIGKILL)
    else:
        [child] = [p for p, parent in reaper._parents().items() if parent == server and p in run]
        os.kill(child, signal.SIGKILL)
    command.wait(timeout=30)
    deadline = time.monotonic() + 15
    while any(running(p) for p in run) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in run if running(p)], f"the run outlived {victim}"
    os.kill(server, 0)                           # the server itself serves on


@needs_server
def test_a_confined_process_is_not_served(server_dir):
    """Landlock lets a confined rank connect to the socket by its path: the server refuses it
    (no_new_privs is set for good by confinement), and the command runs the check itself."""
    pid = start_server(server_dir)
    probe = ("import ctypes, sys\n"
             "ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)   # PR_SET_NO_NEW_PRIVS, as confinement does\n"
             "from rtp_course.cli import warm\n"
             "sys.exit(0 if warm.run_check(['check', 'comm', '--only', 'Duplication']) is None else 1)")
    env = dict(os.environ, RTP_COURSE_WARM="1", RTP_COURSE_WARM_DIR=str(server_dir))
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, "a process with no_new_privs was served: " + r.stdout + r.stderr
    assert served(server_dir) == {"pid": pid, "served": 1}


@needs_server
def test_a_served_rank_cannot_find_the_expected_values_in_memory(server_dir, tmp_path):
    # The server computes the public checks' expected values once, for the runs it forks; the
    # ranks fork from a forkserver that dropped them.
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    path = impl / "comm.py"
    probe = ("        from rtp_course.checker import judging\n"
             "        raise RuntimeError(f'FOUND {len(judging.PRECOMPUTED)} EXPECTED')\n")
    text = path.read_text()
    start = text.index("    def forward(ctx", text.index("class Duplication"))
    body = text.index("\n", text.index("):", start)) + 1
    path.write_text(text[:body] + probe + text[body:])
    start_server(server_dir)
    r = check(server_dir, "--impl", str(impl))
    assert served(server_dir)["served"] == 2, "not served warm"
    assert "FOUND 0 EXPECTED" in r.stdout, r.stdout
