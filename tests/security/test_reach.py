"""What a graded rank can reach besides its own files: the helpers it was forked beside (the
forkserver, multiprocessing's resource tracker), other processes' abstract sockets and shared
memory, /proc, and the grader's terminal. Each probe finds its target the way a student's
recipe would (/proc/net/unix lists every Unix socket, /proc/self/fd every descriptor)."""
import os
import socket
import sys
import uuid
from multiprocessing import forkserver as mp_forkserver, resource_tracker
from pathlib import Path

import pytest

from hostile import LANDLOCK, at_forward, at_import, hostile, needs_landlock, run
from rtp_course.runtime import forkserver
from rtp_course.runtime.launcher import launch

# Connects to every forkserver socket on the machine and asks it, as multiprocessing's own
# client does, to fork a process; returns how many answered with a pid.
ASK_FORKSERVERS = """
def _ask_forkservers(wait=3.0, first=False):
    import os as _os, select as _select, socket as _socket
    from multiprocessing import reduction as _reduction
    paths = [line.split()[-1] for line in open('/proc/net/unix').read().splitlines()[1:]
             if 'listener-' in line.split()[-1]]
    answered = 0
    for path in paths:
        try:
            with _socket.socket(_socket.AF_UNIX) as client:
                client.connect(path)
                parent_r, child_w = _os.pipe()
                child_r, parent_w = _os.pipe()
                _reduction.sendfds(client, [child_r, child_w, child_r, child_r])
                _os.close(child_w)
                _os.close(child_r)
                if _select.select([parent_r], [], [], wait)[0] and _os.read(parent_r, 8):
                    answered += 1
                    if first:
                        return answered
                _os.close(parent_r)
                _os.close(parent_w)
        except OSError:
            continue
    return answered
"""


def test_the_probe_reaches_a_forkserver_from_its_launcher():
    """The probe works: from the process that started it, the forkserver forks (the child
    then finds no process to run and exits). It is given all the time a loaded machine
    needs to answer: only an answer counts, and a rank that cannot connect waits for none."""
    forkserver.start(optimizers=False)
    mp_forkserver._forkserver.ensure_running()
    scope = {}
    exec(ASK_FORKSERVERS, scope)
    assert scope["_ask_forkservers"](wait=60.0, first=True) >= 1


def test_a_rank_cannot_have_the_forkserver_fork_for_it(tmp_path):
    probe = ASK_FORKSERVERS + ("if _ask_forkservers():\n"
                               "    raise RuntimeError('FORKSERVER FORKED FOR A RANK')\n")
    results, text = run(hostile(tmp_path, at_import(probe)), only=("Duplication",))
    assert "FORKSERVER" not in text and all(r.passed for r in results), text


def _pipe_inode(fd: int) -> int:
    return os.fstat(fd).st_ino


def test_a_rank_holds_no_channel_to_the_resource_tracker_or_the_forkserver(tmp_path):
    """The unconfined resource tracker unlinks at exit whatever shared-memory name a holder of
    its pipe registers; a byte on the forkserver's liveness pipe crashes it."""
    forkserver.start(optimizers=False)
    mp_forkserver._forkserver.ensure_running()
    resource_tracker.ensure_running()
    inodes = {_pipe_inode(resource_tracker._resource_tracker._fd),
              _pipe_inode(mp_forkserver._forkserver._forkserver_alive_fd)}
    probe = "\n".join([
        "import os as _os",
        "for _fd in _os.listdir('/proc/self/fd'):",
        "    try:",
        "        _link = _os.readlink('/proc/self/fd/' + _fd)",
        "    except OSError:",
        "        continue",
        f"    if _link in {sorted(f'pipe:[{i}]' for i in inodes)!r}:",
        "        raise RuntimeError('HOLDS A HELPER PIPE ' + _link)",
        "from multiprocessing import resource_tracker as _rt",
        "if _rt._resource_tracker._fd is not None:",
        "    raise RuntimeError('HOLDS THE TRACKER')",
    ])
    results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
    assert "HOLDS" not in text and all(r.passed for r in results), text


@needs_landlock
@pytest.mark.skipif(LANDLOCK < 6, reason="Landlock scopes abstract sockets from ABI 6 (Linux 6.12)")
def test_a_rank_cannot_connect_to_an_abstract_socket_outside_its_sandbox(tmp_path):
    name = f"rtp-attack-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("\0" + name)
        server.listen()
        probe = "\n".join([
            "import socket as _socket",
            "try:                     # (a CPU rank makes no Unix socket at all: seccomp.py)",
            "    with _socket.socket(_socket.AF_UNIX) as _s:",
            f"        _s.connect('\\0' + {name!r})",
            "except OSError:",
            "    pass",
            "else:",
            "    raise RuntimeError('REACHED AN OUTSIDE ABSTRACT SOCKET')",
        ])
        results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
    assert "REACHED" not in text and all(r.passed for r in results), text


@needs_landlock
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_shared_memory_of_other_processes_is_untouchable(tmp_path):
    victim = Path("/dev/shm") / f"rtp-attack-victim-{uuid.uuid4().hex}"
    made = Path("/dev/shm") / f"rtp-attack-made-{uuid.uuid4().hex}"
    victim.write_bytes(b"the grader's")
    try:
        probe = "\n".join([
            "import os as _os",
            f"_victim, _made = {str(victim)!r}, {str(made)!r}",
            "for _what, _do in (('read', lambda: open(_victim, 'rb').read()),",
            "                   ('wrote', lambda: open(_victim, 'ab').write(b'x')),",
            "                   ('unlinked', lambda: _os.unlink(_victim)),",
            "                   ('listed', lambda: _os.listdir('/dev/shm')),",
            "                   ('created', lambda: open(_made, 'wb').write(b'x'))):",
            "    try:",
            "        _do()",
            "    except OSError:",
            "        continue",
            "    raise RuntimeError('SHM ' + _what)",
        ])
        results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
        assert "SHM" not in text and all(r.passed for r in results), text
        assert victim.read_bytes() == b"the grader's" and not made.exists()
    finally:
        victim.unlink(missing_ok=True)
        made.unlink(missing_ok=True)


@needs_landlock
def test_a_rank_sees_no_other_process_in_proc(tmp_path):
    """The grader's command line names its paths and the class; a classmate's ranks show
    whose work is graded beside it: /proc gives a rank only itself and the machine's size.
    Unconfined, a rank reads its parent's command line and lists every process."""
    marker = f"grader-{uuid.uuid4().hex[:8]}"
    probe = "\n".join([
        "import os as _os",
        "_read = []",
        "for _p in (f'/proc/{_os.getppid()}/cmdline', f'/proc/{_os.getppid()}/status',",
        "           '/proc/1/cmdline', '/proc/self/status', '/proc/cpuinfo'):",
        "    try:",
        "        open(_p, 'rb').read()",
        "        _read.append(_p.split('/')[2] if _p.split('/')[2].isdigit() else _p)",
        "    except OSError:",
        "        pass",
        "try:",
        "    _read.append(f'{len(_os.listdir(\"/proc\"))} entries in /proc')",
        "except OSError:",
        "    pass",
        "raise RuntimeError('PROC ' + repr(_read))",
    ])
    results, text = run(hostile(tmp_path / marker, at_forward(probe)), only=("Duplication",))
    assert "PROC ['/proc/self/status', '/proc/cpuinfo']" in text, text


TYPE_INTO_TERMINAL = """
import fcntl as _f, os as _os, termios as _t
_said = []
for _where in (0, '/dev/tty'):
    try:
        _fd = _where if isinstance(_where, int) else _os.open(_where, _os.O_RDWR)
        for _c in b'echo TYPED-BY-A-RANK\\n':
            _f.ioctl(_fd, _t.TIOCSTI, bytes([_c]))
        _said.append(f'TYPED INTO THE TERMINAL through {_where}')
    except OSError:
        pass
if _said:
    raise RuntimeError(' / '.join(_said))
"""

RUN_UNDER_A_TERMINAL = """
import sys
from rtp_course.checker import engine, report
results = engine.run(["comm"], impl=sys.argv[1], world_sizes=[2], only=["Duplication"],
                     confine=True)
print("PASSED" if results and all(r.passed for r in results) else report.text(results))
"""


def test_a_rank_cannot_type_into_the_graders_terminal(tmp_path):
    """Graded from a terminal, a rank once held it as its standard input and controlling
    terminal: ioctl(TIOCSTI) would have typed a command the instructor's shell runs after
    the grading. A rank runs in a session of its own with stdin from /dev/null, and may not
    open /dev/tty."""
    import pty
    import select
    impl = hostile(tmp_path, at_forward(TYPE_INTO_TERMINAL))
    pid, master = pty.fork()
    if pid == 0:                                  # the grader, its terminal the pty
        os.execv(sys.executable, [sys.executable, "-c", RUN_UNDER_A_TERMINAL, str(impl)])
    seen = b""
    try:
        while select.select([master], [], [], 300)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:                       # the child closed the terminal: it ended
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.waitpid(pid, 0)
        os.close(master)
    text = seen.decode(errors="replace")
    assert "TYPED-BY-A-RANK" not in text and "PASSED" in text, text


def _gpu_confined_pass_a_descriptor(rank, world_size, name, impl_dir):
    """A rank confined as a GPU rank is (backend nccl), then passing an open descriptor to
    its peer over an abstract Unix socket, as NCCL's cuMem transport does."""
    import array
    from rtp_course.confinement import rank as confinement
    said = confinement.confine(rank, {"backend": "nccl"}, impl_dir)
    import torch.distributed as dist
    if rank == 0:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind("\0" + name)
            server.listen()
            dist.barrier()
            conn, _ = server.accept()
            with conn:
                msg, anc, _, _ = conn.recvmsg(16, socket.CMSG_SPACE(4))
                fds = array.array("i", anc[0][2][:4]) if anc else []
                return said, os.read(fds[0], 5).decode() if len(fds) else "no descriptor"
    dist.barrier()
    r, w = os.pipe()
    os.write(w, b"hello")
    with socket.socket(socket.AF_UNIX) as client:
        client.connect("\0" + name)
        client.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r]))])
    return said, "sent"


@needs_landlock
@pytest.mark.skipif(LANDLOCK < 6, reason="Landlock scopes abstract sockets from ABI 6 (Linux 6.12)")
def test_gpu_ranks_pass_descriptors_over_abstract_sockets(tmp_path):
    """Issue 36, item 1: NCCL (2.19+, cuMem) passes file descriptors between a node's ranks
    over an abstract Unix socket. Two ranks confined as GPU ranks are (Landlock scoping
    signals only, the GPU's lighter seccomp filter) can; scoped as CPU ranks are, the
    connect failed with EPERM and every communicator after confinement would hang."""
    from hostile import ROOT
    said = launch(_gpu_confined_pass_a_descriptor, 2, timeout=120, backend="gloo",
                  args=(f"rtp-nccl-{uuid.uuid4().hex}", str(ROOT / "solutions")))
    assert said[0][1] == "hello" and said[1][1] == "sent", said
    assert all("confined (Landlock" in s for s, _ in said), said
