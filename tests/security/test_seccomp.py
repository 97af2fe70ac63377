"""seccomp.py: the filter a graded rank runs under, installed in a child process and tried
call by call (each refusal is EPERM; what torch, gloo and Python need still works)."""
import json
import subprocess
import sys
import textwrap

import pytest

from rtp_course.confinement import seccomp

needs_seccomp = pytest.mark.skipif(not seccomp.supported(),
                                   reason="no seccomp filter for this architecture")

TRY_CALLS = """
import ctypes, errno, fcntl, json, os, resource, socket, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                    # no_new_privs, as Landlock sets it
from rtp_course.confinement import seccomp
said = seccomp.install(gpu=sys.argv[1] == "gpu")
assert said == "", said
path = tempfile.mkstemp()[1]
NR = {"x86_64": {"kcmp": 312, "keyctl": 250},
      "aarch64": {"kcmp": 272, "keyctl": 219}}[os.uname().machine]


def checked(result, what):
    if result < 0:
        raise OSError(ctypes.get_errno(), what)


calls = {
    "chmod": lambda: os.chmod(path, 0o777), "chown": lambda: os.chown(path, 0, 0),
    "utime": lambda: os.utime(path), "setxattr": lambda: os.setxattr(path, "user.a", b"1"),
    "removexattr": lambda: os.removexattr(path, "user.a"),
    "set inode flags": lambda: fcntl.ioctl(open(path), 0x40086602, b"\\0" * 8),
    "set inode version": lambda: fcntl.ioctl(open(path), 0x40087602, b"\\0" * 8),
    "unix socket": lambda: socket.socket(socket.AF_UNIX).close(),
    "vsock": lambda: socket.socket(40, socket.SOCK_STREAM).close(),
    "kcmp": lambda: checked(libc.syscall(NR["kcmp"], os.getpid(), os.getpid(), 0, 0, 0), "kcmp"),
    "pidfd_open": lambda: os.close(os.pidfd_open(os.getpid())),
    "prlimit of another": lambda: resource.prlimit(1, resource.RLIMIT_CORE),
    "sched_setaffinity": lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
    "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, 0, 1),
    "memfd_create": lambda: os.close(os.memfd_create("x")),
    "flock": lambda: fcntl.flock(open(path), fcntl.LOCK_SH),
    "fcntl lock": lambda: fcntl.lockf(open(path, "w"), fcntl.LOCK_EX),
    "inotify": lambda: checked(libc.inotify_init1(0), "inotify"),
    "keyctl": lambda: checked(libc.syscall(NR["keyctl"], 0, 0), "keyctl"),
    "io_uring_setup": lambda: checked(libc.syscall(425, 1, ctypes.create_string_buffer(120)),
                                      "io_uring_setup"),
    # what must keep working
    "tcp socket": lambda: socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET).close(),
    "netlink socket": lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close(),
    "socketpair": lambda: [s.close() for s in socket.socketpair()],
    "setrlimit": lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
    "getrlimit": lambda: resource.getrlimit(resource.RLIMIT_NOFILE),
    "fcntl flags": lambda: fcntl.fcntl(open(path), fcntl.F_GETFL),
    "ioctl FIONREAD": lambda: fcntl.ioctl(socket.socketpair()[0], 0x541B, b"\\0" * 4),
    "fork": lambda: os.waitpid(os.fork() or os._exit(0), 0),
}
out = {}
for name, call in calls.items():
    try:
        call()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""

METADATA_AND_SERVICES = ("chmod", "chown", "utime", "setxattr", "removexattr", "set inode flags",
                         "set inode version", "keyctl", "io_uring_setup")
CPU_ONLY = ("unix socket", "vsock", "kcmp", "pidfd_open", "prlimit of another",
            "sched_setaffinity", "setpriority", "memfd_create", "flock", "fcntl lock", "inotify")
ALWAYS = ("tcp socket", "netlink socket", "socketpair", "setrlimit", "getrlimit", "fcntl flags",
          "ioctl FIONREAD", "fork")


def _tried(kind: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(TRY_CALLS), kind],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_seccomp
def test_a_cpu_rank_is_refused_each_call_and_keeps_what_gloo_needs():
    """Without the filter every refused call here succeeds (as root: chmod of any file)."""
    said = _tried("cpu")
    assert {n: said[n] for n in METADATA_AND_SERVICES + CPU_ONLY} == \
        {n: "EPERM" for n in METADATA_AND_SERVICES + CPU_ONLY}, said
    assert {n: said[n] for n in ALWAYS} == {n: "ok" for n in ALWAYS}, said


@needs_seccomp
def test_a_gpu_rank_keeps_what_nccl_needs():
    """NCCL passes descriptors over Unix sockets and with pidfd_getfd, and uses memfd: a
    GPU rank keeps those, and is refused only metadata, keyrings, bpf, perf, userfaultfd
    and io_uring."""
    said = _tried("gpu")
    assert {n: said[n] for n in METADATA_AND_SERVICES} == \
        {n: "EPERM" for n in METADATA_AND_SERVICES}, said
    assert {n: said[n] for n in ("unix socket", "pidfd_open", "memfd_create", "flock",
                                 *ALWAYS)} == \
        {n: "ok" for n in ("unix socket", "pidfd_open", "memfd_create", "flock", *ALWAYS)}, said


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("gpu", [False, True])
def test_the_filter_assembles_for_each_architecture(arch, gpu):
    """Both architectures' programs are valid BPF as the kernel checks it: every jump lands
    inside the program, and the last instruction returns."""
    prog = seccomp.program(arch, gpu)
    assert len(prog) < 4096 and prog[-1][0] == 0x06
    for i, (code, jt, jf, _) in enumerate(prog):
        if code in (0x15, 0x35):
            assert i + 1 + max(jt, jf) < len(prog) and max(jt, jf) < 256
    numbers = {k for _, _, _, k in prog}
    assert (90 in numbers) == (arch == "x86_64")          # chmod: no such call on aarch64


@needs_seccomp
def test_no_ring_once_refused():
    """libuv (the store a rank serves) makes an io_uring ring for its epoll calls whatever
    UV_USE_IO_URING says; a rank refuses rings before the store starts."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(38, 1, 0, 0, 0) == 0
        from rtp_course.confinement import seccomp
        assert seccomp.refuse_rings() == ""
        print(libc.syscall(425, 1, ctypes.create_string_buffer(120)), ctypes.get_errno())
        """)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["-1", "1"], done.stdout + done.stderr
