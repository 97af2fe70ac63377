"""A graded rank as a user of its own when the grader is root: unprivileged, whoever grades.

Root reads every file whatever its mode (/etc/shadow, a classmate's submission), and the
kernel exempts root from RLIMIT_NPROC, so a rank that keeps the grader's uid 0 is bounded
by Landlock alone. So when the grader is root, each grading process picks a uid and gid of
its own that no user of the machine has (BASE + its pid: two submissions graded at once
are two users, which cannot signal, trace or count against each other), and each rank
drops to it in `rank.confine`, just before the code under test is imported:

* everything the harness does before (loading the checks, hidden ones included, opening
  the files it writes) still runs as the grader, so nothing in the run directory has to
  change owner: the rank only writes through descriptors it opened before, and in its
  scratch (a tmpfs that the uid owns);
* what the rank must still read after (the Python installation, torch, the course, the
  code under test, its scratch) must be readable by "others": where only a directory
  on the way is closed (a Python under a 0700 /root, a submission under a 0700 grading
  directory), reveal.py shows the rank those trees alone, in its own mount namespace.
  Where a tree itself is closed to others, the rank keeps running as root, and the
  report's confinement line says so ("not unprivileged: ... is not readable by uid N");
* the launch's user namespace maps both 0 and that uid (netns.py), so that a rank that
  entered it as root can drop to the uid inside it; dropping clears every capability,
  and no_new_privs (set first) keeps an exec from regaining any.

POSIX ACLs are not read: a tree that only an ACL opens to others is taken as closed.
"""
from __future__ import annotations

import ctypes
import os
import pwd
import stat
from pathlib import Path

from rtp_course.runtime import reaper

# 0x70000000 and up is free in systemd's map of uids (above its container range, below
# its "foreign" range and 2**31); a pid is below 2**22.
BASE = 0x70000000
_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 4, 38


def grading_uid() -> int | None:
    """In the grading process: the uid its ranks drop to, or None (the grader is not root)."""
    return BASE + os.getpid() if os.geteuid() == 0 else None


def _may(st: os.stat_result, uid: int, read: bool) -> bool:
    """Whether `uid` (its gid the same number, no other group) may read (a directory: list
    and traverse), or only traverse, what `st` describes, by its mode bits."""
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == uid else 0
    need = (stat.S_IROTH if read else 0) | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    return (st.st_mode >> shift) & need == need


def _closed_above(path: Path, uid: int) -> Path | None:
    """The highest directory above `path` that `uid` may not traverse (None: it may all)."""
    for parent in reversed(path.parents):
        if not _may(parent.stat(), uid, read=False):
            return parent
    return None


def plan(needed, uid: int) -> tuple[dict, str]:
    """({closed directory: [trees under it to reveal]}, '') where `uid` can be given every
    path of `needed`; else ({}, why not). A tree inside another needed tree is shown with it
    (and must be reachable from it). Each closed directory is the highest above its trees,
    so no two overlap."""
    if _taken(uid):
        return {}, f"uid {uid} is a user of this machine"
    trees = sorted({Path(p).resolve() for p in needed if os.path.exists(p)})
    kept = [t for t in trees if not any(o in t.parents for o in trees)]
    covers: dict[Path, list[Path]] = {}
    for tree in trees:
        outer = next(o for o in kept if o == tree or o in tree.parents)
        for p in [tree, *[q for q in tree.parents if outer in q.parents]]:
            if not _may(p.stat(), uid, read=p == tree):
                return {}, f"{p} is not readable by uid {uid}"
        if tree == outer and (closed := _closed_above(tree, uid)) is not None:
            covers.setdefault(closed, []).append(tree)
    return covers, ""


def _taken(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def drop(uid: int) -> None:
    """This process (every thread of it: glibc changes them all) to `uid` and its own gid, no
    supplementary group, no capability; still traceable by its own uid (NCCL's peers take
    descriptors from it with pidfd_getfd), and killed with its parent as before."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    try:
        os.setgroups([])
    except PermissionError:       # a user namespace that denies it: entered with none
        if os.getgroups():
            raise
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise OSError("the uid did not change")
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)   # (a change of uid cleared it)
    reaper.die_with_parent()                   # (and the parent-death signal)
