"""A CPU rank in a PID namespace of its own: it can name no process but its own.

Landlock governs files, TCP and (from ABI 6) signals, but not the system calls that take
a pid. Without this, code under test shares the machine's pid space, and every process
of the same user is within reach:

* `setpriority`, `sched_setaffinity`, `sched_setscheduler` and `prlimit` on the grader, a
  classmate's rank or, with `setpriority(PRIO_USER, uid, 19)`, every process of the user:
  a submission could slow or starve another's grading, or shrink the grader's limits;
* `getpriority`, `sched_getaffinity`, `kill(pid, 0)`, `pidfd_open`, and the pid counter
  itself (how far it moved since the last fork): storage a peer rank could read, a
  channel between ranks that no collective of the check carries.

In a namespace of its own a rank's pids name only its own processes; the kernel finds no
other, whatever number it is given. The rank cannot leave it, and when the namespace's
first process ends the kernel kills every process left in it: nothing a rank forks
outlives it, without a cgroup and without a sweep.

Three processes, because the namespace's first process is its init (signals it has no
handler for are ignored when sent from inside: a rank that aborts or kills itself would
live on), and the process the launcher started must stay outside to be its child:

    launcher's child (the supervisor, outside)  ->  init (pid 1)  ->  the rank (pid 2)

Each of the two upper processes forwards the launcher's signals down (SIGUSR1 for a
stack, SIGTERM and SIGHUP as SIGKILL), ignores Ctrl-C (the launcher, which gets it, ends
the rank), and ends as the rank ended, so the launcher sees the rank's own exit code or
signal. Only for gloo ranks: NCCL's transports pass pids between ranks (pidfd_getfd),
which a namespace would break.
"""
from __future__ import annotations

import os
import select
import signal
import struct

from rtp_course.runtime import reaper


def split(close=()) -> None:
    """Call right after unshare(CLONE_NEWPID), with one thread. Returns in the rank, pid 2
    of a new namespace; the process that called it supervises to the end and never returns.
    `close`: what only the rank must hold (sockets), closed in the other two processes."""
    kept = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGUSR1)}
    status_r, status_w = os.pipe()
    init = os.fork()
    if init:
        os.close(status_w)
        for obj in close:
            obj.close()
        _supervise(init, status_r)
    os.close(status_r)
    reaper.die_with_parent()
    rank = os.fork()
    if rank:
        for obj in close:
            obj.close()
        _be_init(rank, status_w)
    os.close(status_w)
    reaper.die_with_parent()                  # (and with init: the namespace ends with it)
    for sig, handler in kept.items():
        signal.signal(sig, handler)


def _forward_to(pid: int) -> None:
    """The launcher's signals, passed down; Ctrl-C stays ignored."""
    def forward(sig, _frame):
        try:
            os.kill(pid, signal.SIGUSR1 if sig == signal.SIGUSR1 else signal.SIGKILL)
        except OSError:
            pass
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)


def _wait(pid: int, reap_all: bool) -> int:
    """`pid`'s wait status; init reaps every orphan of its namespace on the way."""
    while True:
        try:
            done, status = os.waitpid(-1 if reap_all else pid, 0)
        except ChildProcessError:
            return 1 << 8
        if done == pid and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
            return status                     # (not a stop: a rank may ask to be traced)


def _be_init(rank: int, status_w: int) -> None:
    _forward_to(rank)
    status = _wait(rank, reap_all=True)
    os.write(status_w, struct.pack("<i", status))
    os._exit(0)                               # the kernel now kills what the rank left


def _supervise(init: int, status_r: int) -> None:
    _forward_to(init)
    status = _wait(init, reap_all=False)
    said = b""
    if select.select([status_r], [], [], 0)[0]:
        said = os.read(status_r, 4)
    if len(said) == 4:
        status = struct.unpack("<i", said)[0]  # the rank's own end, not init's
    _end_as(status)


def _end_as(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
