"""Nothing a launch starts outlives it: its workers, and whatever they start or detach.

* A worker dies with its parent (PR_SET_PDEATHSIG): if the launching process is
  killed (a kernel restart, `scancel`, SIGKILL), the forkserver that forked the
  workers sees its pipe close and exits, and the workers follow.
* Every worker carries the launch's mark in its environment (`RTP_LAUNCH_MARK`),
  and so does every process it starts.
* While a launch runs, the launching process is a child subreaper
  (PR_SET_CHILD_SUBREAPER): a process that a worker started and then abandoned
  (a double fork, `setsid`) is re-parented to it instead of to init, so it
  stays a descendant.

At the end of a launch `sweep(mark, ...)` kills every descendant that was not
there before the launch and does not belong to another launch running at the
same time (another thread): its workers and their descendants, and processes
carrying another launch's mark. The multiprocessing helpers (forkserver,
resource tracker) are spared.

If the launching process itself is killed (SIGKILL: no `finally` runs), a
guardian it started takes over: a small child process that waits on a pipe
whose other end only the launching process holds. When the pipe closes, the
guardian kills every process whose environment names the dead owner
(`RTP_LAUNCH_OWNER`: set before the forkserver starts, so workers and their
forked or exec'd descendants inherit it), and every descendant of the owner
it saw (it looks once a second) that started after the guardian did (a
process that scrubbed its environment and detached), then removes the
owner's temporary directories (`rtp-*-o<pid>-*`).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading

MARK_ENV = "RTP_LAUNCH_MARK"
OWNER_ENV = "RTP_LAUNCH_OWNER"
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent() -> None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_SUBREAPING = [0]          # launches running in this process (threads) that need it


@contextlib.contextmanager
def subreaping():
    """While launches run, orphans of their processes are re-parented to this process (and
    swept and reaped by it); afterwards, to init again, so that a long-lived process (a
    notebook kernel) does not collect the zombies of unrelated programs."""
    _SUBREAPING[0] += 1
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        _SUBREAPING[0] -= 1
        if _SUBREAPING[0] == 0:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _parents() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            out[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])  # field 4: ppid
    return out


def descendants(pid: int | None = None) -> set[int]:
    """Every process below `pid` (default: this one)."""
    if not os.path.isdir("/proc"):
        return set()
    pid = pid or os.getpid()
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def _env_of(pid: int, name: str) -> str | None:
    """Variable `name` in the environment process `pid` started with ('' if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return ""
    prefix = name.encode() + b"="
    return next((e[len(prefix):].decode(errors="replace") for e in env if e.startswith(prefix)), None)


def _mark_of(pid: int) -> str | None:
    return _env_of(pid, MARK_ENV)


def _helpers() -> set[int]:
    """multiprocessing's own long-lived processes (forkserver, resource tracker)."""
    pids = set()
    try:
        from multiprocessing import forkserver, resource_tracker
        pids.add(forkserver._forkserver._forkserver_pid)
        pids.add(resource_tracker._resource_tracker._pid)
    except (ImportError, AttributeError):
        pass
    return {p for p in pids if p}


ACTIVE: dict[str, set[int]] = {}     # mark -> worker pids, for launches running in this process
LOCK = threading.Lock()              # held while workers start and while a launch sweeps


def sweep(mark: str, before: set[int]) -> list[int]:
    """Kill the descendants this launch left behind; return their pids."""
    with LOCK:
        return _sweep(mark, before)


SWEEP_ROUNDS = 200     # a process that forks faster than one round kills is caught in the next


def _kill_their_sessions(victims) -> None:
    """A victim that made a session of its own (setsid) keeps its process group through any
    number of forks: kill the group, which the kernel does at once. Never a group of this
    process's session: a victim may have joined one of ours (the terminal's, the grader's)."""
    own = os.getsid(0)
    for pid in victims:
        try:
            if os.getsid(pid) != own:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass


def _sweep(mark: str, before: set[int]) -> list[int]:
    def spared() -> set[int]:
        others = set()
        for other, pids in ACTIVE.items():
            if other != mark:
                for pid in pids:
                    others |= {pid} | descendants(pid)
        return others
    return _kill_rounds(before, spared, lambda pid: _mark_of(pid) in (None, "", mark))


def sweep_orphans(before: set[int], keep) -> list[int]:
    """Kill this process's descendants that were not there before and are not (descendants
    of) the processes `keep()` names: what its children left behind (this process being a
    subreaper), whatever environment they scrubbed."""
    def spared() -> set[int]:
        return set().union(*({pid} | descendants(pid) for pid in keep()))
    with LOCK:
        return _kill_rounds(before, spared, lambda pid: True)


def _kill_rounds(before: set[int], spared, ours) -> list[int]:
    """Rounds until a round finds nobody: a snapshot alone misses what a process that keeps
    re-forking (a new pid every few hundred microseconds) starts between the look and the
    kill. Each round first stops every victim (a stopped process cannot fork), then kills."""
    killed: list[int] = []
    for _ in range(SWEEP_ROUNDS):
        others = spared()
        victims = [pid for pid in descendants() - before - _helpers() - others
                   if ours(pid)]                           # a mark "": a zombie's, or unreadable
        if not victims:
            break
        _kill_their_sessions(victims)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        for pid in victims:                  # re-parented orphans are our children now: reap them
            try:
                os.waitpid(pid, 0)
            except (ChildProcessError, OSError):
                pass
        killed += victims
    return killed


# ---- the guardian: cleans up after an owner that was killed ------------------------------

_GUARDIAN = None


def temp_prefix(kind: str) -> str:
    """Prefix of this process's temporary run directories (the guardian removes them)."""
    return f"rtp-{kind}-o{os.getpid()}-"


def ensure_guardian() -> None:
    """Start this process's guardian once, and mark this process as the owner of what it launches."""
    global _GUARDIAN
    os.environ[OWNER_ENV] = str(os.getpid())
    if _GUARDIAN is not None and _GUARDIAN[0] == os.getpid():
        return
    if _sees_every_pid():
        remove_dead_owners_dirs()       # what an owner killed with its guardian left
    import subprocess
    import tempfile
    read_end, write_end = os.pipe()
    env = {k: v for k, v in os.environ.items() if k not in (OWNER_ENV, MARK_ENV)}
    guardian = subprocess.Popen([sys.executable, "-m", "rtp_course.runtime.reaper",
                                 str(os.getpid()), str(read_end), tempfile.gettempdir()],
                                pass_fds=(read_end,), env=env, start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    os.close(read_end)
    os.set_inheritable(write_end, False)
    _GUARDIAN = (os.getpid(), write_end, guardian.pid)   # held open for the life of this process


def guardian_pid() -> int | None:
    return _GUARDIAN[2] if _GUARDIAN is not None and _GUARDIAN[0] == os.getpid() else None


def guardian_fd() -> int | None:
    """This process's end of its guardian's pipe (a forked helper must close its copy)."""
    return _GUARDIAN[1] if _GUARDIAN is not None and _GUARDIAN[0] == os.getpid() else None


def clean_up_after(owner: int, tmp: str) -> None:
    """Kill what a dead owner launched and remove its temporary directories."""
    import glob
    import shutil

    from rtp_course.runtime import cgroup
    cgroup.kill_owned_by(owner)                # its launches' cgroups: everything in them at once
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and _env_of(int(name), OWNER_ENV) == str(owner):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
    for path in glob.glob(os.path.join(tmp, f"rtp-*-o{owner}-*")):
        shutil.rmtree(path, ignore_errors=True)


def _sees_every_pid() -> bool:
    """Whether this process's PID namespace is that of its /proc: inside a nested one, a
    live owner outside it would look dead."""
    try:
        with open("/proc/self/status") as fh:
            return next((len(ln.split()) == 2 for ln in fh if ln.startswith("NSpid:")), False)
    except OSError:
        return False


def remove_dead_owners_dirs(kind: str = "*") -> list[str]:
    """Remove this user's temporary `kind` directories ("*": of every kind) whose owner is
    gone: a sweep, or a `kill` of every process named rtp_course, may end an owner's guardian
    before it has removed them."""
    import glob
    import re
    import shutil
    import tempfile
    removed = []
    named = r"[a-z0-9-]+?" if kind == "*" else re.escape(kind)
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"rtp-{kind}-o*-*")):
        owner = re.match(rf"rtp-{named}-o(\d+)-", os.path.basename(path))
        try:
            if not owner or os.lstat(path).st_uid != os.getuid():
                continue
            os.kill(int(owner.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            pass                              # alive (another user's) or gone meanwhile
    return removed


def _start_time(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return -1
    return int(stat[stat.rindex(b")") + 2:].split()[19])   # field 22: start time in ticks


def _guard(owner: int, fd: int, tmp: str) -> None:
    import select
    me, since, seen = os.getpid(), _start_time(os.getpid()), {}
    while True:
        if select.select([fd], [], [], 1.0)[0] and not os.read(fd, 1024):
            break                            # b"": the owner's end closed, the owner is gone
        seen = {p: s for p in descendants(owner) - {me} if (s := _start_time(p)) >= since}
    for pid, start in seen.items():
        if _start_time(pid) == start:        # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    clean_up_after(owner, tmp)


if __name__ == "__main__":
    _guard(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
