"""Time checker commands of two checkouts, interleaved: what a change costs users.

    python scripts/bench_checker.py [--rounds 3] BEFORE_DIR [-- check --hidden --impl solutions]

Runs `python -m rtp_course.cli <args>` (default: `check --impl solutions`, cold:
RTP_COURSE_WARM=0) with BEFORE_DIR's course first on the path, then this checkout's, round
after round, and prints each wall time. A git worktree of an older commit makes a
BEFORE_DIR (`git worktree add /tmp/before <commit>`); `--impl solutions` means each
checkout's own reference. The machine is shared: compare only times of one run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run_once(course: Path, args: list) -> tuple[float, int]:
    env = dict(os.environ, RTP_COURSE_WARM="0", PYTHONPATH=str(course))
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", *args], cwd=course, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, r.returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("args", nargs=argparse.REMAINDER, help="after --: the command's arguments")
    a = p.parse_args()
    a.args = [x for x in a.args if x != "--"] or ["check", "--impl", "solutions"]
    times = {"before": [], "after": []}
    for _ in range(a.rounds):
        for name, course in (("before", a.before.resolve()), ("after", HERE)):
            seconds, code = run_once(course, a.args)
            times[name].append(f"{seconds:.2f}" + ("" if code == 0 else f" (exit {code})"))
    for name, ts in times.items():
        print(f"{name:>6}: {', '.join(ts)} s   rtp-course {' '.join(a.args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
