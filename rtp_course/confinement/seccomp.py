"""What Landlock leaves open to a graded rank, refused with EPERM by a seccomp filter.

Landlock decides which files a rank may open and write, not what it may do to a file's
metadata, nor which kernel services it may use. Refused here, for every rank:

* file metadata and extended attributes (chmod, chown, utime and their *at and f* forms,
  set/remove xattr, file_setattr, the ioctls that set inode flags): else a rank marks a
  file it may only read (a solution's mtime, a mode 4777 in /tmp, xattrs on its own
  submission that a peer reads: a channel the grader never sees);
* kernel services no check uses and that reach across processes or outlive the rank:
  keyrings (keyctl, add_key, request_key), bpf, perf_event_open, userfaultfd, io_uring
  (whose operations open sockets and files without the calls a filter sees).

And for a CPU (gloo) rank, which needs no more than TCP on its own launch's network:

* a socket's own buffer sizes (setsockopt SO_SNDBUF, SO_RCVBUF and their FORCE forms):
  unread connections would hold the machine's TCP memory past the launch's network's
  per-socket bound (netns.py);
* socket() of the Unix and vsock families (argument inspected): Landlock does not govern
  connect() to a Unix socket by its path, and every service of the machine listens on one
  (D-Bus, systemd, a container engine); a vsock reaches the hypervisor. AF_INET/AF_INET6
  (gloo) and AF_NETLINK (getifaddrs) stay; socketpair() reaches nothing and stays;
* reaching other processes: ptrace, process_vm_readv/writev, kcmp, pidfd_open,
  pidfd_getfd; changing their or its own scheduling (setpriority, sched_setaffinity,
  sched_setscheduler, sched_setparam, sched_setattr) or another's limits (prlimit64 on a
  pid other than 0, the form setrlimit uses): a submission graded beside another keeps to
  its cores and cannot slow the other's grading;
* memory no mapping holds, which no limit counts (memfd_create, shmget, System V message
  queues and semaphores, POSIX message queues: msgget, semget, mq_open), and channels
  through files every rank may read: locks (flock, fcntl lock, lease and notify
  commands) and watches (inotify, fanotify).

A GPU (NCCL) rank keeps these: NCCL passes descriptors between a node's ranks over Unix
sockets and with pidfd_getfd, and uses memfd and shared memory.

On x86-64 every call of another ABI (32-bit int 0x80, x32) is refused too: its numbers
differ, and a filter of one ABI's numbers would let them through. Installed after Landlock
(which set no_new_privs) on every thread of the rank at once (TSYNC: gloo's and torch's
threads too), inherited by every process it starts, never lifted. The filter is assembled
here (BPF, no libseccomp): the kernel caches the calls it always allows, so those a rank
makes most (read, write, send, recv) cost nothing.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _REFUSE = 0x7FFF0000, 0x00050000 | errno.EPERM      # SECCOMP_RET_ALLOW, _RET_ERRNO
_X32_BIT = 0x40000000
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32           # offsets in seccomp_data (low words)

# The same number on every architecture (the unified table from Linux 5.1).
_COMMON = {"pidfd_open": 434, "pidfd_getfd": 438, "io_uring_setup": 425,
           "io_uring_enter": 426, "io_uring_register": 427, "fchmodat2": 452,
           "setxattrat": 463, "removexattrat": 466, "file_setattr": 469}
# arch: (AUDIT_ARCH_*, {name: number}); "seccomp" is the call that installs the filter
_ARCHES = {
    "x86_64": (0xC000003E, {"seccomp": 317,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94,
        "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
        "lremovexattr": 198, "fremovexattr": 199, "keyctl": 250, "add_key": 248,
        "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "socket": 41, "setsockopt": 54, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "kcmp": 312, "setpriority": 141, "sched_setaffinity": 203, "sched_setscheduler": 144,
        "sched_setparam": 142, "sched_setattr": 314, "prlimit64": 302, "memfd_create": 319,
        "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240, "flock": 73, "fcntl": 72, "ioctl": 16, "inotify_init": 253,
        "inotify_init1": 294, "inotify_add_watch": 254, "fanotify_init": 300,
        "fanotify_mark": 301, **_COMMON}),
    "aarch64": (0xC00000B7, {"seccomp": 277,
        # the generic table: no chmod, chown, utime(s), inotify_init
        "fchmod": 52, "fchmodat": 53, "fchown": 55, "fchownat": 54, "utimensat": 88,
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "socket": 198, "setsockopt": 208,
        "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "setpriority": 140,
        "sched_setaffinity": 122, "sched_setscheduler": 119, "sched_setparam": 118,
        "sched_setattr": 274, "prlimit64": 261, "memfd_create": 279, "shmget": 194,
        "msgget": 186, "semget": 190, "mq_open": 180,
        "flock": 32, "fcntl": 25, "ioctl": 29, "inotify_init1": 26, "inotify_add_watch": 27,
        "fanotify_init": 262, "fanotify_mark": 263, **_COMMON}),
}

METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
            "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
            "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
            "file_setattr")
SERVICES = ("keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
            "io_uring_setup", "io_uring_enter", "io_uring_register")
CPU_ONLY = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open",
            "pidfd_getfd", "setpriority", "sched_setaffinity", "sched_setscheduler",
            "sched_setparam", "sched_setattr", "memfd_create", "shmget", "msgget", "semget",
            "mq_open", "flock", "inotify_init",
            "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark")

AF_UNIX, AF_VSOCK = 1, 40
# setsockopt(fd, SOL_SOCKET, SO_SNDBUF | SO_RCVBUF | SO_SNDBUFFORCE | SO_RCVBUFFORCE): a socket's
# own buffer size, past the launch network's tcp_rmem/tcp_wmem (netns.SOCKET_BUFFER)
SOL_SOCKET, BUFFER_SIZES = 1, (7, 8, 32, 33)
# ioctl: FS_IOC_SETFLAGS (64 and 32-bit forms), FS_IOC_FSSETXATTR: inode flags, project ids;
# FS_IOC_SETVERSION and ext4's (64 and 32-bit): an inode's generation number
SET_INODE_FLAGS = (0x40086602, 0x40046602, 0x401C5820, 0x40087602, 0x40047602, 0x40086604,
                   0x40046604)
# fcntl: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE,
# F_GETLEASE, F_NOTIFY
LOCKS_AND_WATCHES = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)


def supported() -> bool:
    return platform.machine() in _ARCHES


def _refuse_if(offset: int, values) -> list:
    """Load an argument's low word; refuse when it is one of `values`, else allow."""
    block = [(_LD_W_ABS, 0, 0, offset)]
    for v in values:
        block += [(_JEQ_K, 0, 1, v), (_RET_K, 0, 0, _REFUSE)]
    return block + [(_RET_K, 0, 0, _ALLOW)]


def _argument_rules(gpu: bool) -> dict:
    """{call: instructions that decide it from its arguments (each ends in a return)}."""
    rules = {"ioctl": _refuse_if(_ARG1, SET_INODE_FLAGS)}
    if not gpu:
        rules["socket"] = _refuse_if(_ARG0, (AF_UNIX, AF_VSOCK))
        rules["fcntl"] = _refuse_if(_ARG1, LOCKS_AND_WATCHES)
        rules["prlimit64"] = [(_LD_W_ABS, 0, 0, _ARG0), (_JEQ_K, 0, 1, 0),
                              (_RET_K, 0, 0, _ALLOW), (_RET_K, 0, 0, _REFUSE)]
        rules["setsockopt"] = [(_LD_W_ABS, 0, 0, _ARG1), (_JEQ_K, 1, 0, SOL_SOCKET),
                               (_RET_K, 0, 0, _ALLOW), *_refuse_if(_ARG2, BUFFER_SIZES)]
    return rules


def program(arch: str, gpu: bool) -> list[tuple[int, int, int, int]]:
    """The filter for `arch`: refused calls first, then those decided by their arguments."""
    return _assemble(arch, METADATA + SERVICES + (() if gpu else CPU_ONLY), _argument_rules(gpu))


def _assemble(arch: str, refused, by_arguments: dict) -> list[tuple[int, int, int, int]]:
    audit_arch, numbers = _ARCHES[arch]
    prog = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 1, 0, audit_arch), (_RET_K, 0, 0, _REFUSE),
            (_LD_W_ABS, 0, 0, _NR)]
    if arch == "x86_64":
        prog += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, _REFUSE)]
    for name in refused:
        if name in numbers:                   # (aarch64 has no chmod, chown, utime, ...)
            prog += [(_JEQ_K, 0, 1, numbers[name]), (_RET_K, 0, 0, _REFUSE)]
    for name, block in by_arguments.items():
        prog += [(_JEQ_K, 0, len(block), numbers[name]), *block]   # (A still holds nr)
    return prog + [(_RET_K, 0, 0, _ALLOW)]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(gpu: bool = False) -> str:
    """Install the filter on every thread of this process (TSYNC: the threads torch and gloo
    started before, too) and every process it starts: '' when done, else what the report's
    confinement line says instead. no_new_privs must be set already."""
    return _load(lambda arch: program(arch, gpu))


def refuse_rings() -> str:
    """First thing in a graded rank (no_new_privs set): no io_uring ring from now on. The
    store a rank serves runs on libuv, which makes a ring for its epoll calls whatever
    UV_USE_IO_URING says; a ring made before confinement would carry sockets and opens past
    the filter. Refused, libuv calls epoll_ctl itself."""
    return _load(lambda arch: _assemble(arch, SERVICES[-3:], {}))


def _load(make) -> str:
    arch = platform.machine()
    if arch not in _ARCHES:
        return f"no seccomp filter for {arch}"
    prog = make(arch)
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = _Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.syscall(_ARCHES[arch][1]["seccomp"], _SECCOMP_SET_MODE_FILTER,
                        _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog))
    if done != 0:      # (> 0: the id of a thread that could not take the filter)
        return "no seccomp filter: " + (os.strerror(ctypes.get_errno()) if done < 0 else
                                        f"thread {done} could not take it")
    return ""
