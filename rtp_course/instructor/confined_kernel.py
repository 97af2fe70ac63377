"""The Jupyter kernel `nbgrader autograde` runs students' notebooks in: confined before any cell runs.

A student's notebook cells would otherwise run with the instructor's
permissions. This kernel confines itself (Landlock, `rtp_course.confinement.landlock`)
before it starts: it may read the Python installation, the course package and
its connection file, and write only the submission folder it runs in and a
private temporary directory. The installed course, the hidden checks, the
solutions, the gradebook and other students' folders are out of its reach;
processes it starts inherit the same limits. Like a graded rank's, its environment keeps
nothing of the grader's but what Python, torch and the course read (no token, no path of
the instructor's), its files and memory are capped, no capability is left to it (under a
root grader: no raw socket on the loopback where classmates' kernels talk) and seccomp
refuses file metadata and the kernel services a rank is refused (confinement/seccomp.py,
its GPU form: the notebook's demos start processes that meet over Unix sockets). What it
leaves running is killed when its autograde ends (instructor/autograde.py).
nbgrader_config.py installs its kernelspec (`rtp-confined`) and selects it for autograde.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import rtp_course
from rtp_course.confinement import landlock as sandbox
from rtp_course.confinement import seccomp
from rtp_course.confinement.rank import no_capabilities, no_new_privs

KERNEL_NAME = "rtp-confined"
MODULE = "rtp_course.instructor.confined_kernel"


def write_kernelspec(jupyter_dir: Path) -> Path:
    """<jupyter_dir>/kernels/rtp-confined/kernel.json, running this module with this Python."""
    spec = jupyter_dir / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", MODULE, "-f", "{connection_file}"],
        "display_name": "Python 3 (rtp-course, confined for grading)", "language": "python"}))
    return spec


def main(argv: list[str]) -> None:
    import atexit
    import shutil
    from rtp_course.runtime import reaper
    if os.environ.get(CLEAN) != "1":
        # /proc/self/environ shows the environment a process was started with, whatever
        # os.environ says later: the kernel starts again, with the scrubbed one
        os.execve(sys.executable, [sys.executable, "-m", MODULE, *argv],
                  {**_scrubbed(os.environ), CLEAN: "1"})
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
    # no links, no FIFO or socket file where the kernel ran: nbgrader, unconfined, writes the
    # executed notebook there (a FIFO in its place would block it); multiprocessing's sockets
    # go in the private directory
    confinement = sandbox.confine(read=[package, connection_file], write=[os.getcwd(), private],
                                  links=False, rendezvous_under=[private])
    _cap_resources()
    _ipython_profile(private)           # (its first start copies files with their mode: chmod)
    filtered = seccomp.install(gpu=True) if no_new_privs() else "no seccomp filter: no_new_privs"
    no_capabilities()
    os.environ["RTP_COURSE_KERNEL_CONFINEMENT"] = f"{confinement.describe()}; {filtered or 'seccomp'}"
    _children_from_own_proc()
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(argv=argv)


def _ipython_profile(ipython_dir: str) -> None:
    from IPython.core.profiledir import ProfileDir
    ProfileDir.create_profile_dir_by_name(ipython_dir, "default")


# What the kernel keeps of nbgrader's environment beyond a rank's (forkserver.RANK_ENVIRONMENT):
# Jupyter's and nbgrader's own (not JPY_SESSION_NAME: the notebook's path in the grading
# directory), and the course's switches that are no path of the instructor's.
CLEAN = "RTP_COURSE_KERNEL_CLEAN"
KERNEL_ENVIRONMENT = ("JPY_PARENT_PID", "NBGRADER_", "PYTHONSAFEPATH", "MPLBACKEND",
                      "RTP_COURSE_GRADE_OUTSIDE", "RTP_COURSE_WARM", "RTP_COURSE_EMULATE")


def _scrubbed(env) -> dict:
    """nbgrader hands the kernel the instructor's whole environment (tokens, a Jupyter
    server's, paths): a cell could print it into its own feedback."""
    from rtp_course.runtime.forkserver import SECRET_WORDS, rank_environment
    kept = rank_environment(env)
    kept.update({k: v for k, v in env.items() if k.startswith(KERNEL_ENVIRONMENT)
                 and not any(w in k.upper() for w in SECRET_WORDS)})
    return kept


def _cap_resources() -> None:
    """A graded rank's caps on files and memory (confinement/rank.py), no core file."""
    import resource
    from rtp_course.confinement.rank import FILE_CAP_MB, MAPPED_SLACK_MB, MEMORY_CAP_MB
    for which, value in ((resource.RLIMIT_FSIZE, FILE_CAP_MB << 20),
                         (resource.RLIMIT_DATA, MEMORY_CAP_MB << 20),
                         (resource.RLIMIT_AS, (MEMORY_CAP_MB + MAPPED_SLACK_MB) << 20),
                         (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


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
