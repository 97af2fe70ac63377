"""Show an unprivileged rank the trees it needs under a directory it may not traverse.

A Python installed under a 0700 /root, or a submission under a 0700 grading directory, is
readable by others itself, but not reachable: a rank that drops to a uid of its own
(identity.py) could not import from it. In the rank's own mount namespace, each such
closed directory is covered by an empty tmpfs (mode 0755) into which the needed trees are
bind-mounted back at their own paths: the rank reaches them, and nothing else of the
closed directory (the grader's home, the other submissions) exists for it. Mounts made in
a namespace the rank enters later are locked there: it cannot uncover them, and Landlock
forbids mounting at all once it is confined. Nothing changes outside the rank.

Uses open_tree and move_mount (Linux 5.2), which clone a tree before the cover hides it.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from rtp_course.confinement import netns

_OPEN_TREE, _MOVE_MOUNT = 428, 429                 # the same number on every architecture
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC, _AT_RECURSIVE = 1, 0o2000000, 0x8000
_MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD, _MNT_DETACH = 0x4, -100, 0x2
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def own_mounts() -> bool:
    """Whether this process has a mount namespace of its own: made with the launch's
    namespaces (netns.unshare_own), or made now where this process is root (a GPU rank, a
    machine without user namespaces), its mounts then made private so that none reaches
    the machine's."""
    if netns.MADE[0] & netns.CLONE_NEWNS:
        return True
    if os.geteuid() != 0:
        return False
    libc = _libc()
    libc.unshare.argtypes = [ctypes.c_int]
    if libc.unshare(netns.CLONE_NEWNS) != 0:
        return False
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    netns.MADE[0] |= netns.CLONE_NEWNS
    return True


def reveal(covers: dict) -> None:
    """{closed directory: [trees under it]}: each closed directory covered, its trees shown.
    Call in a mount namespace of this process's own, while it may still mount."""
    libc = _libc()
    for closed, trees in covers.items():
        clones = []
        try:
            for tree in trees:
                fd = _check(libc.syscall(_OPEN_TREE, _AT_FDCWD, os.fsencode(tree),
                                         _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE),
                            f"open_tree({tree})")
                clones.append((Path(tree), fd, os.path.isdir(tree)))
            _check(libc.mount(b"tmpfs", os.fsencode(closed), b"tmpfs",
                              _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, b"mode=0755,size=1m"),
                   f"mount tmpfs on {closed}")
            try:
                for tree, fd, is_dir in clones:
                    _mount_point(tree, is_dir)      # (the cover holds the tree's own path)
                    _check(libc.syscall(_MOVE_MOUNT, fd, b"", _AT_FDCWD, os.fsencode(tree),
                                        _MOVE_MOUNT_F_EMPTY_PATH), f"move_mount({tree})")
            except OSError:
                libc.umount2(os.fsencode(closed), _MNT_DETACH)   # as it was: the rank stays root
                raise
        finally:
            for _, fd, _ in clones:
                os.close(fd)


def _mount_point(target: Path, is_dir: bool) -> None:
    """The empty directory (or file) in the cover that a tree is mounted on, and the
    directories on the way, each 0755."""
    missing = [p for p in [*reversed(target.parents), target] if not os.path.lexists(p)]
    for p in missing:
        if p != target or is_dir:
            os.mkdir(p, 0o755)
            os.chmod(p, 0o755)              # (whatever the umask)
        else:
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
