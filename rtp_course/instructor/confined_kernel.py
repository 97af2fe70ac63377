"""The Jupyter kernel `nbgrader autograde` runs students' notebooks in: confined before any cell runs.

A student's notebook cells would otherwise run with the instructor's
permissions. This kernel confines itself (Landlock, `rtp_course.confinement.landlock`)
before it starts: it may read the Python installation, the course package and
its connection file, and write only the submission folder it runs in and a
private temporary directory. The installed course, the hidden checks, the
solutions, the gradebook and other students' folders are out of its reach;
processes it starts inherit the same limits. nbgrader_config.py installs its
kernelspec (`rtp-confined`) and selects it for autograde.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import rtp_course
from rtp_course.confinement import landlock as sandbox

KERNEL_NAME = "rtp-confined"


def write_kernelspec(jupyter_dir: Path) -> Path:
    """<jupyter_dir>/kernels/rtp-confined/kernel.json, running this module with this Python."""
    spec = jupyter_dir / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "rtp_course.instructor.confined_kernel", "-f", "{connection_file}"],
        "display_name": "Python 3 (rtp-course, confined for grading)", "language": "python"}))
    return spec


def main(argv: list[str]) -> None:
    import atexit
    import shutil
    from rtp_course.runtime import reaper
    connection_file = argv[argv.index("-f") + 1]
    # A short path in the system's temp dir: multiprocessing puts its sockets in it (AF_UNIX
    # paths have at most 107 bytes). The guardian, started before the kernel confines itself,
    # removes it if the kernel is killed; the kernel removes it when it ends.
    reaper.ensure_guardian()
    private = tempfile.mkdtemp(prefix=reaper.temp_prefix("kernel"))
    atexit.register(shutil.rmtree, private, True)
    for var in ("HOME", "IPYTHONDIR", "MPLCONFIGDIR", "TMPDIR"):
        os.environ[var] = private
    tempfile.tempdir = private
    package = str(Path(rtp_course.__file__).resolve().parent)
    confinement = sandbox.confine(read=[package, connection_file], write=[os.getcwd(), private])
    os.environ["RTP_COURSE_KERNEL_CONFINEMENT"] = confinement.describe()
    _children_from_own_proc()
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(argv=argv)


def _children_from_own_proc() -> None:
    """At shutdown ipykernel lists its child processes through psutil, which reads all of
    /proc: this kernel may read only its own /proc/<pid>, and every autograde logged a
    PermissionError traceback. Its children are read from its own task entries instead (those
    in its process group, as ipykernel picks them), and signalled by pid."""
    import signal
    from ipykernel.kernelbase import Kernel

    class Child:
        def __init__(self, pid: int):
            self.pid = pid

        def send_signal(self, signum) -> None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

        def terminate(self) -> None:
            self.send_signal(signal.SIGTERM)

        def kill(self) -> None:
            self.send_signal(signal.SIGKILL)

    def children(self) -> list:
        pids = set()
        try:
            for task in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children") as fh:
                    pids |= {int(p) for p in fh.read().split()}
        except OSError:
            return []
        found = []
        for pid in sorted(pids):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0 and os.getpgid(pid) == os.getpgrp():
                    found.append(Child(pid))          # alive (an ended one was reaped above)
            except OSError:
                continue
        return found
    Kernel._process_children = children


if __name__ == "__main__":
    main(sys.argv[1:])
