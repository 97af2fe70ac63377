"""A launch's ranks on a network of their own: a private loopback, and nothing else.

Without it a rank can open TCP connections to anything the machine reaches, and another
launch's rendezvous store or gloo ports are on the same loopback: a submission graded
beside a classmate's could find them and disturb that run. Landlock's TCP rules cannot
say "only this launch's peers" (gloo listens on ports chosen at run time), so each launch
gets its own network namespace instead:

* rank 0 makes a user namespace (which needs no privilege) and, inside it, a network
  namespace whose only device is its own `lo`, brought up; its uid and gid map to
  themselves, so files look as they did (and, under a root grader, the uid the ranks
  drop to: identity.py);
* the other ranks join both namespaces (setns, as their owner's user may), before any
  thread starts;
* rank 0 serves the launch's TCP store there, on a fixed port: no other launch can reach
  it, and none can collide with it;
* a socket's buffers there grow to `SOCKET_BUFFER` bytes at most (tcp_rmem and tcp_wmem
  are the namespace's own): connections a rank never reads hold memory from the machine's
  TCP pool, which every launch shares and no rank limit counts.

Only for gloo: NCCL's bootstrap runs over the machine's interfaces (a GPU run keeps the
machine's network). Where the kernel refuses unprivileged user namespaces (some
distributions restrict them), `available()` is False and the launch keeps the machine's
network, with the launcher's store.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC = 0x10000000, 0x40000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNS = 0x20000000, 0x00020000
MADE = [0]              # the namespaces this rank made for itself with unshare_own()
PORT = 29500            # the store's port inside the namespace (nothing else listens there)
SOCKET_BUFFER = 256 << 10   # bytes a socket may buffer each way (the machine's: 4 to 32 MB);
#                             a check's transfers are kilobytes
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _private_network(more: int = 0, loopback: bool = True, also: int | None = None) -> None:
    """This process into a new user and network namespace (and `more`), its loopback up.
    `also`: a uid (and the gid of the same number) mapped too, which a root grader's ranks
    drop to inside it (identity.py). Only a process outside the namespace, with CAP_SETUID
    there, may map more than the maker's own ids: a helper forked before, still root."""
    uid, gid = os.geteuid(), os.getegid()
    extra = f"\n{also} {also} 1" if also is not None and also not in (uid, gid) else ""
    helper = _map_helper(f"{uid} {uid} 1{extra}", f"{gid} {gid} 1{extra}") if extra else None
    _check(_libc().unshare(CLONE_NEWUSER | CLONE_NEWNET | more), "unshare")
    _write("/proc/self/setgroups", "deny")
    if helper is None:
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    else:
        go, pid = helper
        os.close(go)                          # the helper writes the maps now
        if os.waitpid(pid, 0)[1] != 0:
            raise OSError(f"the user namespace's ids could not be mapped ({also})")
    if not loopback:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
    for direction in ("rmem", "wmem"):       # per namespace since Linux 4.15
        try:
            _write(f"/proc/sys/net/ipv4/tcp_{direction}", f"4096 16384 {SOCKET_BUFFER}")
        except OSError:
            pass


def _map_helper(uid_map: str, gid_map: str) -> tuple[int, int]:
    """(the pipe end whose closing starts it, its pid): a child that, once this process has
    made its user namespace, writes that namespace's maps from outside it, then exits."""
    go_r, go_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_w)
            os.read(go_r, 1)                  # EOF: the parent has unshared
            _write(f"/proc/{parent}/uid_map", uid_map)
            _write(f"/proc/{parent}/gid_map", gid_map)
            code = 0
        finally:
            os._exit(code)
    os.close(go_r)
    return go_w, pid


def available() -> bool:
    """Whether launches get one: this machine lets this user make one, and RTP_COURSE_NETNS
    is not 0 (tests whose ranks must reach this process's sockets)."""
    return os.environ.get("RTP_COURSE_NETNS") != "0" and _possible()


@functools.lru_cache(maxsize=1)
def _possible() -> bool:
    """Asked once, of a short-lived child."""
    if not sys.platform.startswith("linux"):
        return False
    probe = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
             "import netns; netns._private_network(); "
             "import socket; s = socket.create_server(('127.0.0.1', 0)); "
             "socket.create_connection(s.getsockname(), timeout=2).close()")
    try:
        return subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def unshare_own() -> int:
    """This rank, inside the launch's user namespace, into a PID, mount and IPC namespace of
    its own (its children are in the PID namespace: pidns.split; its mounts are its own:
    scratch.py). Returns the CLONE_* flags of what was made (also in MADE). Call while the
    process has one thread."""
    for more in (CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNS, CLONE_NEWIPC, 0):
        if not more:
            return 0
        try:                    # a kernel may let users make some of them and not others
            _check(_libc().unshare(more), "unshare")
            MADE[0] = more
            return more
        except OSError:
            continue
    return 0


def _marker(rundir: str) -> Path:
    return Path(rundir) / "netns.pid"


def create(rundir: str, also: int | None = None) -> None:
    """Rank 0: make the namespaces, then say where they are (its pid) for the others."""
    _private_network(also=also)
    tmp = _marker(rundir).with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(_marker(rundir))


def join(rundir: str, timeout: float = 60.0) -> None:
    """Any other rank: enter rank 0's namespaces. Call while this process has one thread."""
    deadline = time.monotonic() + timeout
    while not _marker(rundir).exists():
        if time.monotonic() > deadline:
            raise OSError("rank 0 did not make the launch's network namespace in time")
        time.sleep(0.005)
    pid = int(_marker(rundir).read_text())
    libc = _libc()
    for kind, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET)):
        fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY)
        try:
            _check(libc.setns(fd, flag), f"setns({kind})")
        finally:
            os.close(fd)
