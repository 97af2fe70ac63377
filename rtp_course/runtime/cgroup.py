"""A launch's processes in a cgroup of their own, where the machine lets us make one.

Sweeping /proc for what a launch left is a snapshot: a process that re-forks every few
hundred microseconds (a new pid each time, a new session if it likes) is never where the
last look saw it. A cgroup v2 holds every process forked inside it, whatever it does,
and `cgroup.kill` (Linux 5.14+) ends them all at once. Each rank moves itself into its
launch's cgroup as its first act, before any code under test runs; its confinement then
forbids writing any cgroup file, so nothing can leave it.

Available where this process may create a child of its own cgroup: as root (a grading
machine, CI), or in a cgroup delegated to the user (systemd's user@UID.service); where the
pids controller is offered there, the launch's tasks are capped (TASKS_MAX). Elsewhere
`create` returns None and the launch falls back to the sweep (reaper.py), which
docs/INSTRUCTORS.md describes.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

# A launch's processes and threads, all its ranks together (a graded launch is capped lower,
# confinement/rank.TASK_CAP): gloo keeps two threads a rank for every group a run makes.
TASKS_MAX = 8192


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return Path(left.split()[4])
    except OSError:
        pass
    return None


def _own() -> Path | None:
    mount = _cgroup2_mount()
    if mount is None:
        return None
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return mount / line.strip()[3:].lstrip("/")
    except OSError:
        pass
    return None


def create(kind: str = "launch") -> Path | None:
    """A new, empty cgroup below this process's own (None where none can be made or used),
    its tasks capped at TASKS_MAX where the machine offers the pids controller."""
    own = _own()
    if own is None or not (own / "cgroup.kill").exists() and own != _cgroup2_mount():
        return None
    enable_pids(own)
    path = own / f"rtp-{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        return None
    if not (path / "cgroup.kill").exists() or not os.access(path / "cgroup.procs", os.W_OK):
        remove(path)
        return None
    limit_tasks(path)
    return path


def enable_pids(own: Path) -> bool:
    """The pids controller for the children of `own`, where `own` is offered it (enabling a
    controller that only counts tasks is allowed in a cgroup that holds processes)."""
    try:
        if "pids" in (own / "cgroup.subtree_control").read_text().split():
            return True
        if "pids" not in (own / "cgroup.controllers").read_text().split():
            return False
        (own / "cgroup.subtree_control").write_text("+pids")
        return True
    except OSError:
        return False


def limit_tasks(path: Path, most: int | None = None) -> bool:
    """pids.max of `path`: a fork bomb in a launch stops there whatever its uid (the
    kernel's RLIMIT_NPROC exempts root, and counts per user, not per launch)."""
    try:
        (path / "pids.max").write_text(str(most or TASKS_MAX))
        return True
    except OSError:
        return False


def join(path: str | os.PathLike | None) -> bool:
    """Move this process into `path` (a rank, first thing). False if it could not."""
    if not path:
        return False
    try:
        with open(Path(path) / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))
        return True
    except OSError:
        return False


def pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _populated(path: Path) -> bool:
    try:
        return "populated 1" in (path / "cgroup.events").read_text()
    except OSError:
        return False


def kill(path: Path | None, timeout: float = 5.0) -> None:
    """End every process in `path`, at once, and remove the cgroup (once the kernel says it is
    empty: a killed process leaves cgroup.procs before the cgroup stops being populated)."""
    if path is None:
        return
    try:
        (path / "cgroup.kill").write_text("1")
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while (pids(path) or _populated(path)) and time.monotonic() < deadline:
        time.sleep(0.01)
    remove(path, deadline)


def remove(path: Path, until: float = 0.0) -> None:
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= until:
                return
            time.sleep(0.01)


def kill_owned_by(owner: int) -> None:
    """The cgroups of launches of process `owner`, which was killed (the reaper's guardian)."""
    own = _own()
    if own is None:
        return
    for path in own.glob(f"rtp-*-{owner}-*"):
        kill(path, timeout=2.0)
