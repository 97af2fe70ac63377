"""A real single-node Slurm for the tests: installed if missing, started once per session, stopped after.

scripts/slurm_local.py does the work; each session gets its own cluster (own
directory, munge socket and ports), so parallel test runs on one machine do
not share jobs. Tests that need it skip, saying why, only where Slurm cannot be
installed or started here.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_local.py"
# A stand-in for `rtp-course check|bench` with the same arguments: it lets the tests drive every job
# outcome in a second (exercise "ok", "bad" = a failing check, "fail" = a crash, "sleep" = runs on).
FAKE_COURSE = r'''
import argparse, json, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("cmd"); p.add_argument("names", nargs="*")
p.add_argument("--world-size", nargs="+", type=int, default=[1]); p.add_argument("--json")
p.add_argument("--impl"); p.add_argument("--timeout"); p.add_argument("--out")
a = p.parse_args()
print("fake course:", " ".join(sys.argv[1:]), "tasks", os.environ.get("SLURM_NTASKS"), flush=True)
if "fail" in a.names:
    print("Traceback: boom in the fake checker", flush=True)
    sys.exit(3)
if "sleep" in a.names:
    time.sleep(600)
if a.cmd == "bench":
    open(os.path.join(a.out, "bench.csv"), "w").write("method,world_size\nrtp,%d\n" % a.world_size[0])
    sys.exit(0)
ok = "bad" not in a.names
checks = [{"name": "forward", "world_size": w, "passed": ok, "phase": "forward", "rank": 1,
           "message": "" if ok else "max abs error 0.5", "hint": "" if ok else "all-reduce the partial sums"}
          for w in a.world_size]
json.dump({"passed": ok, "exercises": {n: {"passed": ok, "checks": checks} for n in a.names},
           "summary": "; ".join("%s %d/%d" % (n, ok * len(checks), len(checks)) for n in a.names)},
          open(a.json, "w"))
sys.exit(0 if ok else 1)
'''


def _tail(text, n=15):
    return "\n".join((text or "").strip().splitlines()[-n:])


def _logs(d):
    out = []
    for name in ("log/slurmctld.log", "log/slurmd.log", "munge/munged.log"):
        p = Path(d) / name
        if p.exists():
            out.append(f"--- {name}\n{_tail(p.read_text(errors='replace'))}")
    return "\n".join(out)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """{'dir', 'env', 'start_s'}; SLURM_CONF points sbatch/squeue/scontrol at the cluster meanwhile."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("a local Slurm needs Linux and root (to install it and run munged/slurmd)")
    r = subprocess.run([sys.executable, str(SCRIPT), "install"], capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        pytest.skip(f"Slurm could not be installed here: {_tail(r.stderr or r.stdout)}")
    # Not under pytest's tmp dir: that is private to root, and munged runs as the munge user.
    d = tempfile.mkdtemp(prefix="rtp-slurm-test-")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(SCRIPT), "start", "--dir", d],
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        logs = _logs(d)
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip(f"Slurm could not be started here: {_tail(r.stderr)}\n{logs}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info["start_s"] = time.monotonic() - t0
    print(f"\nlocal Slurm started in {info['start_s']:.2f} s ({d})", file=sys.stderr)
    mp = pytest.MonkeyPatch()
    for k, v in info["env"].items():
        mp.setenv(k, v)
    try:
        yield info
    finally:
        mp.undo()
        subprocess.run([sys.executable, str(SCRIPT), "stop", "--dir", d], timeout=120)


@pytest.fixture(scope="session")
def fake_course(tmp_path_factory):
    """The RTP_COURSE value that runs FAKE_COURSE with this Python."""
    path = tmp_path_factory.mktemp("fake-course") / "fake_course.py"
    path.write_text(FAKE_COURSE)
    return f"{sys.executable} {path}"


def real_course_command():
    """The installed `rtp-course` of this Python, or None."""
    beside = Path(sys.executable).parent / "rtp-course"
    return str(beside) if beside.exists() else shutil.which("rtp-course")
