"""Grading a class on one node: the same submissions graded with --jobs 1, 2, 4 ..., interleaved.

    python scripts/bench_grading.py --students 8 --rounds 3 --jobs 1 2 4

Builds a grading directory with one assignment (notebook 03, grade("comm")) and N
submissions (the reference, and realistic bugs: a forgotten all-reduce, a syntax error, a
deadlock), seals it, then times `rtp-course grade --jobs J` for each J in turn, round after
round, so that a noisy machine slows every configuration alike. Prints the median seconds
per configuration and the median of the paired speed-ups against --jobs 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "03_tp_communication"
BUGS = [None,
        ("        dist.all_reduce(grad, group=ctx.group)", "        pass"),
        (None, None),                                                     # the reference again
        ("def duplicate(x, group=None):", "def duplicate(x, group=None:"),
        ("        dist.all_reduce(grad, group=ctx.group)",
         "        if dist.get_rank(ctx.group) == 0:\n            dist.all_reduce(grad, group=ctx.group)")]


def make_class(course: Path, n: int) -> None:
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb", course / "source" / ASSIGNMENT)
    for i in range(n):
        impl = course / "submitted" / f"student{i:03d}" / ASSIGNMENT / "rtp_course"
        shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
        bug = BUGS[i % len(BUGS)]
        if bug and bug[0]:
            text = (impl / "comm.py").read_text()
            (impl / "comm.py").write_text(text.replace(bug[0], bug[1], 1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--students", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--world-size", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    course = Path(tempfile.mkdtemp(prefix="rtp-bench-grading-"))
    try:
        make_class(course, a.students)
        env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        cli = [sys.executable, "-m", "rtp_course.cli"]
        subprocess.run(cli + ["seal"], env=env, check=True, capture_output=True)
        times = {j: [] for j in a.jobs}
        for r in range(a.rounds):
            for j in a.jobs:
                start = time.perf_counter()
                out = subprocess.run(cli + ["grade", ASSIGNMENT, "--jobs", str(j), "--world-size",
                                            *map(str, a.world_size)], env=env, capture_output=True, text=True)
                times[j].append(time.perf_counter() - start)
                if out.returncode != 0:
                    print(out.stdout[-2000:], out.stderr[-2000:], file=sys.stderr)
                    return 1
                print(f"round {r + 1}, --jobs {j}: {times[j][-1]:.1f} s", flush=True)
        base = a.jobs[0]
        rows = {}
        for j in a.jobs:
            ratios = [b / t for b, t in zip(times[base], times[j])]
            rows[j] = {"median_s": statistics.median(times[j]), "runs_s": times[j],
                       "speedup_vs_first": statistics.median(ratios),
                       "speedup_spread": [min(ratios), max(ratios)]}
        print(f"\n{a.students} submissions, world sizes {a.world_size}, {os.cpu_count()} CPUs")
        print(f"{'--jobs':>7} {'median s':>9} {'s/submission':>13} {'speed-up':>9}  spread")
        for j, row in rows.items():
            print(f"{j:>7} {row['median_s']:>9.1f} {row['median_s'] / a.students:>13.1f} "
                  f"{row['speedup_vs_first']:>8.2f}x  {row['speedup_spread'][0]:.2f}-{row['speedup_spread'][1]:.2f}")
        if a.json:
            Path(a.json).write_text(json.dumps({"students": a.students, "cpus": os.cpu_count(),
                                                "jobs": rows}, indent=2))
        return 0
    finally:
        shutil.rmtree(course, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
