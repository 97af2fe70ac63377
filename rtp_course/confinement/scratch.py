"""A rank's private directory on a tmpfs of its own: what it writes is capped in all.

RLIMIT_FSIZE caps each file a rank writes (rank._cap_resources), not how many it makes:
a rank that writes file after file would fill the grader's disk, and a full disk stops the
grader and every submission graded after it. A graded rank has a mount namespace of its
own (netns.unshare_own, or reveal.own_mounts under a root grader), so before it is
confined it mounts a tmpfs, of a fixed size, over its private directory: a write past the
size fails with "No space left on device", and the files go with the namespace, leaving
nothing on the disk. Where no mount namespace could be made, the directory stays on the
disk, capped per file only (and the watchdog counts its files).
"""
from __future__ import annotations

import ctypes
import os

_MS_NOSUID, _MS_NODEV = 0x2, 0x4
FILES = 10000           # inodes: a rank's files in all (each costs the machine's memory)


def mount_private(path: str, mb: int, owner: int | None = None) -> bool:
    """A tmpfs of `mb` MB and FILES files over `path`, seen by this process and its children
    only, owned by `owner` (uid and gid) if given. Call only in a mount namespace of this
    process's own: elsewhere, as root, it would mount on the machine."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    ids = f",uid={owner},gid={owner}" if owner is not None else ""
    return libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                      f"size={int(mb)}m,nr_inodes={FILES},mode=0700{ids}".encode()) == 0
