"""What Landlock leaves open to a relay rank, refused: sockets, file locks and watches, cores,
unmapped memory.

Landlock decides which files a rank may open, not what it may do with a file it may read.
Every rank may read the same files (Python, torch, the course), and the kernel keeps state
about those files that any reader can set and any other can see:

* locks: `flock`, POSIX and open-file-description locks (`fcntl(F_SETLK, ...)`) and leases.
  A rank that locks file i when bit i of its batch is 1 tells a peer that tries the same
  locks its whole batch, a bit per file;
* notifications: inotify, fanotify and dnotify (`F_NOTIFY`) report to a peer that watches
  file i that it was opened.

Either would carry data between ranks that the relay never sees. And a socket:

* Landlock (before a future ABI) does not govern `connect()` to a Unix socket by its path,
  and every service of the grader's user listens on one (its D-Bus session bus, systemd's
  user manager, which starts programs on request, a container engine): a rank that
  reaches one runs code outside its sandbox;
* a vsock reaches the hypervisor's services, and a UDP socket the machine's, from any
  network namespace or none.

A relay rank needs no socket but its link to the relay, made before it was confined
(`socketpair`, which reaches nothing, stays allowed). And its cores: a submission graded
beside another keeps to cores of its own (instructor/grade_code.py), which a rank could
leave with `sched_setaffinity`, its busy processes then slowing the other's grading. And
memory that no mapping of the rank holds, so that no limit of the rank counts it: a memfd
written with write(), a System V segment detached after use (worker._cap_resources caps
what is mapped).

A seccomp filter refuses these calls with EPERM (a correct rank makes none of them), and
io_uring (whose operations open sockets and files without the system calls a filter
sees), and, on x86-64, every system call of another ABI (32-bit `int 0x80`, x32), whose
numbers differ and which a filter of one ABI's numbers would let through. Installed after
Landlock (which set no_new_privs); inherited by every process the rank starts, and never
lifted.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _REFUSE = 0x7FFF0000, 0x00050000 | errno.EPERM      # SECCOMP_RET_ALLOW, _RET_ERRNO
_X32_BIT = 0x40000000

# arch: (AUDIT_ARCH_*, {name: number}); fcntl's number apart, its command is looked at
_ARCHES = {
    "x86_64": (0xC000003E, {
        "shmget": 29, "socket": 41, "flock": 73, "sched_setaffinity": 203, "inotify_init": 253,
        "inotify_add_watch": 254, "inotify_init1": 294, "fanotify_init": 300,
        "fanotify_mark": 301, "memfd_create": 319, "io_uring_setup": 425}, 72),
    "aarch64": (0xC00000B7, {
        "inotify_init1": 26, "inotify_add_watch": 27, "flock": 32, "sched_setaffinity": 122,
        "shmget": 194, "socket": 198, "fanotify_init": 262, "fanotify_mark": 263,
        "memfd_create": 279, "io_uring_setup": 425}, 25),
}
# F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_GETLEASE,
# F_NOTIFY
_FCNTL_REFUSED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)


def supported() -> bool:
    return platform.machine() in _ARCHES


def _program(arch: str) -> list[tuple[int, int, int, int]]:
    audit_arch, refused, fcntl_nr = _ARCHES[arch]
    prog: list = [(_LD_W_ABS, 0, 0, 4)]                         # seccomp_data.arch
    prog.append((_JEQ_K, 1, 0, audit_arch))
    prog.append("refuse")
    prog.append((_LD_W_ABS, 0, 0, 0))                            # seccomp_data.nr
    if arch == "x86_64":
        prog += [(_JGE_K, 0, 1, _X32_BIT), "refuse"]
    for nr in refused.values():
        prog += [(_JEQ_K, 0, 1, nr), "refuse"]
    prog += [(_JEQ_K, 1, 0, fcntl_nr), "allow"]
    prog.append((_LD_W_ABS, 0, 0, 16 + 8))                       # args[1], its low 32 bits
    for cmd in _FCNTL_REFUSED:
        prog += [(_JEQ_K, 0, 1, cmd), "refuse"]
    prog.append("allow")
    return [(_RET_K, 0, 0, _REFUSE) if p == "refuse" else (_RET_K, 0, 0, _ALLOW)
            if p == "allow" else p for p in prog]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def refuse_channels() -> str:
    """Install the filter in this process: '' when done, else what the report's confinement
    line says instead. no_new_privs must be set already (sandbox.confine sets it)."""
    arch = platform.machine()
    if arch not in _ARCHES:
        return f"no seccomp filter for {arch}"
    prog = _program(arch)
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = _Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"no seccomp filter: {os.strerror(ctypes.get_errno())}"
    return ""
