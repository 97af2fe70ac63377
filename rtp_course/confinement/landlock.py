"""Confine the current process with Landlock: read only what it needs, write only a private dir.

A graded rank (rank.confine) calls `confine(...)` after it has loaded the checks and opened
its result files, and before the first line of code under test runs. From then
on the process, and every process it starts, can read the Python installation,
the course package and the code under test, and write only its private
directory: not the instructor repository, the reference solutions, the hidden
checks, the reference cache, the gradebook, or another run's files. Files the
worker opened before keep the access they were opened with.

Why Landlock: it needs no privilege, no setuid helper and no user namespaces
(bubblewrap needs those, and some clusters disable them); a process restricts
itself with three system calls, and the restriction is inherited and cannot be
lifted. It is in Linux since 5.13 (ABI 1); this module uses what the running
kernel offers: truncation control from ABI 3, device ioctls from ABI 5, and
from ABI 6 signal scoping (code under test cannot signal processes outside
its sandbox, e.g. the grader), from ABI 8 every thread at once (before it, threads
started earlier keep their freedom: docs/SECURITY.md). Where the kernel has no Landlock,
`confine` returns a Confinement with `active=False` and the report says "unconfined".

Of /etc only what Python, torch, gloo and matplotlib open once confined (found by tracing a
full graded run and a confined kernel): name resolution, the time zone, the loader's cache,
fonts. Not the rest, which holds /etc/shadow, /etc/sudoers and ssh's host keys.
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446   # same numbers on every arch
_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_RESTRICT_SELF_TSYNC, TSYNC_ABI = 1 << 3, 8                  # every thread, from ABI 8

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1                  # handled_access_net, ABI 4

READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV   # rights a rule on a file may hold


def _abi_rights(abi: int) -> int:
    rights = (1 << 13) - 1                      # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


WRITE = (1 << 13) - 1 | REFER | TRUNCATE        # everything, inside the private dir

# The system's own read-only parts: programs and shared libraries.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
# Of /etc: name resolution (gloo resolves its peers' addresses for every group), the time
# zone, the loader's cache (a library loaded later by name), NCCL's own settings, and the
# fonts' (matplotlib's, in the confined notebook kernel).
ETC_READ = ("/etc/hosts", "/etc/host.conf", "/etc/resolv.conf", "/etc/nsswitch.conf",
            "/etc/gai.conf", "/etc/localtime", "/etc/ld.so.cache", "/etc/nccl.conf",
            "/etc/fonts")
# Of /sys, what describes the CPUs and memory (torch's and oneDNN's sizing): not the rest,
# which holds the launch's cgroup (memory.current: one rank's allocations, to the page, read
# by a peer, would carry data that no collective of the check carried).
SYS_READ = ("/sys/devices/system/cpu", "/sys/devices/system/node",
            "/sys/kernel/mm/transparent_hugepage")
# Of /proc, what describes the machine (torch sizes its thread pools from it), besides the
# process's own /proc/<pid>: not the other processes' command lines, which would tell the code
# under test the grader's paths and whose work is graded beside it.
PROC_READ = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys", "/proc/filesystems")
# Of /dev, only the character devices every program may use: not /dev as a whole, which holds
# /dev/shm (another process's shared memory, and the grader's) and /dev/mqueue; and not
# /dev/tty, the grader's terminal, into which a process can type (ioctl TIOCSTI).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def gpu_devices() -> list[str]:
    """What a CUDA/NCCL rank opens in /dev: the NVIDIA driver's nodes, and InfiniBand's verbs."""
    found = [os.path.join("/dev", n) for n in sorted(os.listdir("/dev")) if n.startswith("nvidia")] \
        if os.path.isdir("/dev") else []
    return found + [p for p in ("/dev/infiniband", "/dev/dri") if os.path.exists(p)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass
class Confinement:
    active: bool
    abi: int = 0
    reason: str = ""            # why not, when inactive; what is missing, when active

    def describe(self) -> str:
        if not self.active:
            return f"unconfined: {self.reason}"
        return f"confined (Landlock ABI {self.abi}" + (f"; {self.reason})" if self.reason else ")")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        v = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def python_dirs() -> list[str]:
    """Where this Python and its packages live (the standard library, site-packages)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    dirs |= {p for p in sys.path if p and p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    dirs |= {str(Path(p).parent) for p in sys.path if p and Path(p).name.startswith("python3")}
    return sorted(d for d in dirs if d and os.path.isdir(d))


def _readable(roots, unreadable) -> tuple[list, list]:
    """(paths to grant READ, directories to grant only their listing): `roots`, less the files
    under `unreadable`. Landlock has no deny rule, so a root that holds an unreadable path is
    granted child by child, and the directories on the way only their listing (Python's
    import lists a directory before it opens a module there)."""
    hidden = [Path(h).resolve() for h in unreadable]
    full, listed = [], []

    def walk(p: Path):
        if p in hidden:
            return
        if not any(p in h.parents for h in hidden):
            full.append(str(p))
            return
        listed.append(str(p))
        for child in sorted(p.iterdir()):
            walk(child)

    for root in roots:
        if os.path.exists(root):
            walk(Path(root).resolve())
    return full, listed


def library_dirs(avoid=()) -> list[str]:
    """The directories of the shared libraries this process has mapped, and those of
    LD_LIBRARY_PATH: where a library loaded later finds its own (cuDNN loads its
    sub-libraries at the first convolution, from a cluster's /apps or /opt). Not "/", a
    directory anyone may write (/tmp), nor one that holds, or is under, a path of `avoid`."""
    found = set()
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
                    found.add(os.path.dirname(parts[5].rstrip("\n")))
    except OSError:
        pass
    found |= {d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")}
    hidden = [Path(a).resolve() for a in avoid]
    kept = []
    for d in sorted(found):
        try:
            p, st = Path(d).resolve(), os.stat(d)
        except OSError:
            continue                     # "(deleted)", a path this system does not have
        if p == Path("/") or st.st_mode & 0o002 or any(
                h == p or p in h.parents or h in p.parents for h in hidden):
            continue
        kept.append(str(p))
    return kept


def confine(read, write, scope_signals: bool = True, devices=(), unreadable=(),
            other_processes: bool = False, rendezvous: bool = True, tcp: bool = True,
            scope_sockets: bool | None = None, links: bool = True,
            rendezvous_under=None) -> Confinement:
    """Restrict this process to reading `read` (+ the system and Python dirs, ETC_READ, and
    its libraries' dirs) and writing under `write`; `devices`: device nodes it may also
    read, write and ioctl (a GPU's); `unreadable`: files or directories under those it may
    list but not open; `other_processes`: all of /proc and /sys, not only this process's
    own, PROC_READ and SYS_READ (NCCL's bootstrap and topology search read more of them
    than has been seen run); `rendezvous`: it may make Unix socket files and FIFOs in
    `write` (`rendezvous_under`: only under those of `write`, e.g. its private temporary
    directory, never where an unconfined process writes after it); `tcp`: it may bind and connect TCP sockets (from ABI 4; False refuses every
    bind and connect). From ABI 6, `scope_signals`: it can signal only processes of its own
    sandbox; `scope_sockets` (default: as `scope_signals`): it can connect to an abstract
    Unix socket of those only (never for a GPU rank: NCCL passes descriptors between a
    node's ranks over abstract sockets); `links`: it may make symbolic links in `write` and
    link or move files into it from elsewhere (False: a link left for an unconfined
    process to write through cannot be made). Irreversible. Returns what was done; never raises
    for a missing Landlock."""
    abi = abi_version()
    if abi < 1:
        return Confinement(False, 0, "this kernel offers no Landlock (Linux 5.13+ with landlock "
                                     "in its lsm= list)")
    libc = _libc()
    handled = _abi_rights(abi)
    scope_sockets = scope_signals if scope_sockets is None else scope_sockets
    scoped = ((SCOPE_SIGNAL if scope_signals else 0)
              | (SCOPE_ABSTRACT_UNIX_SOCKET if scope_sockets else 0)) if abi >= 6 else 0
    attr = _RulesetAttr(handled, 0 if tcp or abi < 4 else BIND_TCP | CONNECT_TCP, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return Confinement(False, abi, f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        for path, rights in _rules(abi, read, write, devices, unreadable, other_processes,
                                   rendezvous, links, rendezvous_under):
            _add_rule(libc, fd, path, rights & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return Confinement(False, abi, f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
        flags = _RESTRICT_SELF_TSYNC if abi >= TSYNC_ABI else 0
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(flags)) != 0:
            return Confinement(False, abi, f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    return Confinement(True, abi)


def _rules(abi, read, write, devices, unreadable, other_processes, rendezvous,
           links=True, rendezvous_under=None) -> list:
    """[(path, rights)] of the ruleset. /proc/self names this process as the machine's /proc
    numbers it (in a PID namespace of its own, getpid() would name another)."""
    procs = ["/proc", "/sys"] if other_processes else \
        [*PROC_READ, f"/proc/{os.readlink('/proc/self')}", *SYS_READ]
    libraries = library_dirs(avoid=[*unreadable, *write])
    full, listed = _readable([*SYSTEM_READ, *ETC_READ, *procs, *python_dirs(), *libraries,
                              *read], unreadable)
    rules = [(p, READ) for p in full] + [(p, READ_DIR) for p in listed]
    device_rights = READ_FILE | WRITE_FILE | (IOCTL_DEV if abi >= 5 else 0)
    rules += [(p, device_rights | (READ_DIR if os.path.isdir(p) else 0))
              for p in (*DEVICES, *devices)]
    plain = WRITE & ~(MAKE_SOCK | MAKE_FIFO)
    plain = plain if links else plain & ~(MAKE_SYM | REFER)
    meet = plain | MAKE_SOCK | MAKE_FIFO if rendezvous else plain
    under = write if rendezvous_under is None else rendezvous_under
    return rules + [(p, (meet if p in under else plain) | READ) for p in write]


def _add_rule(libc, ruleset_fd: int, path, rights: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return                                  # a path this system does not have
    try:
        if not os.path.isdir(path):
            rights &= FILE_ONLY
        rule = _PathBeneath(rights, pfd)
        if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): "
                                              f"{os.strerror(ctypes.get_errno())}")
    finally:
        os.close(pfd)
