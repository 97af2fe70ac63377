"""A classmate's busy processes, and the grading of the submission beside it.

    python scripts/bench_classmates.py [--busy 20]

Grades two submissions of notebook 03 with `rtp-course grade --jobs 2`: the reference,
and the reference with BUSY processes started at import that spin until their run ends.
Prints when each submission's grading finished. Each grading process keeps to cores of
its own (instructor/grade_code.py), so the reference should finish as it does alone
(about 10 s on 2 cores), not when the busy one does.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_grading  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--busy", type=int, default=20)
    a = p.parse_args(argv)
    course = Path(tempfile.mkdtemp(prefix="rtp-bench-classmates-"))
    try:
        bench_grading.make_class(course, 2)
        comm = course / "submitted" / "student001" / bench_grading.ASSIGNMENT / "rtp_course" / "comm.py"
        busy = (f"import os as _os\nfor _i in range({a.busy}):\n    if _os.fork() == 0:\n"
                f"        while True:\n            pass\n")
        comm.write_text((ROOT / "solutions" / "comm.py").read_text()
                        .replace("import torch\n", "import torch\n" + busy, 1))
        env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        cli = [sys.executable, "-m", "rtp_course.cli"]
        subprocess.run(cli + ["seal"], env=env, check=True, capture_output=True)
        start = time.perf_counter()
        grade = subprocess.Popen(cli + ["grade", bench_grading.ASSIGNMENT, "--jobs", "2"],
                                 env=env, stdout=subprocess.PIPE, text=True)
        for line in grade.stdout:
            who = "busy" if line.startswith("student001") else "reference"
            print(f"{time.perf_counter() - start:6.1f} s  {who:9}  {line.split(':', 1)[-1].strip()[:60]}",
                  flush=True)
        return grade.wait()
    finally:
        shutil.rmtree(course, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
