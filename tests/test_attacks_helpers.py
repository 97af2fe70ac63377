"""Hostile submissions against the helpers around a rank: the forkserver it was forked from,
multiprocessing's resource tracker, abstract Unix sockets, and /dev/shm.

Each probe is found the way a student's recipe finds it (/proc/net/unix lists every Unix
socket's path, /proc/self/fd every inherited descriptor) and runs inside a confined checker
rank, at the import of the code under test or in a check.
"""
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from multiprocessing import forkserver as mp_forkserver, resource_tracker
from pathlib import Path

import pytest

from rtp_course.checker import engine, report
from rtp_course.runtime import forkserver, netns, sandbox
from test_attacks import _alive, at_forward, at_import, hostile, needs_landlock, run

# Connects to every forkserver socket on the machine and asks it, as multiprocessing's own
# client does, to fork a process; returns how many answered with a pid.
ASK_FORKSERVERS = """
def _ask_forkservers():
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
                if _select.select([parent_r], [], [], 3)[0] and _os.read(parent_r, 8):
                    answered += 1
                _os.close(parent_r)
                _os.close(parent_w)
        except OSError:
            continue
    return answered
"""


def test_the_probe_reaches_a_forkserver_from_its_launcher():
    """The probe works: from the process that started it, the forkserver forks (the child
    then finds no process to run and exits)."""
    forkserver.start(optimizers=False)
    mp_forkserver._forkserver.ensure_running()
    scope = {}
    exec(ASK_FORKSERVERS, scope)
    assert scope["_ask_forkservers"]() >= 1


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
@pytest.mark.skipif(sandbox.abi_version() < 6, reason="abstract sockets are scoped from ABI 6")
def test_a_rank_cannot_connect_to_an_abstract_socket_outside_its_sandbox(tmp_path):
    name = f"rtp-attack-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("\0" + name)
        server.listen()
        probe = "\n".join([
            "import socket as _socket",
            "try:                     # (a relay rank makes no socket at all: runtime/seccomp)",
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


def test_a_sparse_result_is_a_failed_check_not_a_crash_of_the_grader(tmp_path):
    edits = {"rotation": [("    return rotate_async(tensor, direction, group, recv_shape, recv_dtype).wait()",
                           "    return rotate_async(tensor, direction, group, recv_shape, recv_dtype)"
                           ".wait().to_sparse()")]}
    results = engine.run(["rotation"], impl=str(hostile(tmp_path, edits)), world_sizes=(2,),
                         only=["rotate"])
    text = report.text(results)
    assert not results[0].passed and "MalformedResult" in text, text
    assert "is a torch.sparse_coo tensor, not a dense one" in text, text


def test_torch_raising_not_implemented_is_an_error_not_a_todo(tmp_path):
    """A NotImplementedError that torch raises is no stub's 'not implemented yet'."""
    results, text = run(hostile(tmp_path, at_forward("torch.nn.Module()(x)")),
                        only=("Duplication",))
    assert results[0].status == "error" and "NotImplementedError" in text, text
    assert "not implemented yet" not in text, text


HOPPER = """
import os, socket, sys, time
beat = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
beat.send(b"%d;" % os.getpgid(0))   # for the test's clean-up when the run failed to end it
while True:
    time.sleep(0.001)
    beat.send(b".")        # inherited across forks: the test hears it while any copy lives
    if os.fork() != 0:
        os._exit(0)        # the parent leaves: the process lives on under a new pid
"""


def test_a_process_that_keeps_reforking_does_not_outlive_the_run(tmp_path, monkeypatch):
    """A new pid every few hundred microseconds: a sweep that kills what one look at /proc
    saw misses it (pgrep misses it too: the test listens to its heartbeat instead, which
    needs the machine's network: no private one for this run, and no confinement, which
    refuses a checker rank every TCP connection)."""
    monkeypatch.setenv("RTP_COURSE_NETNS", "0")
    monkeypatch.setenv("RTP_COURSE_CONFINE", "0")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe = "\n".join([
            "import subprocess as _sp, sys as _sys",
            f"_sp.Popen([_sys.executable, '-c', {HOPPER!r}, '{server.getsockname()[1]}'],",
            "          start_new_session=True, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL)",
            "import time as _t",
            "_t.sleep(0.5)",
        ])
        results, text = run(hostile(tmp_path, at_import(probe)), only=("Duplication",))
        assert all(r.passed for r in results), text
        server.settimeout(10)
        beats = [server.accept()[0]]                 # one hopper per rank
        server.settimeout(1)
        with contextlib.suppress(OSError):
            beats.append(server.accept()[0])
        groups = []
        try:
            for beat in beats:
                beat.settimeout(2)
                groups.append(int(beat.recv(64).split(b";")[0]))
                deadline, heard = time.monotonic() + 2, b"."
                while heard and time.monotonic() < deadline:   # what was sent before the end
                    heard = beat.recv(1 << 16)
                assert heard == b"", "a re-forking process outlived the run (its heartbeat goes on)"
        finally:
            for group in groups:         # its process group, atomically, if the run failed to
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            for beat in beats:
                beat.close()


def test_the_graders_environment_does_not_reach_the_code_or_its_report(tmp_path):
    secret = f"hunter2-{uuid.uuid4().hex}"
    probe = "\n".join([
        "import os as _os",
        "_seen = repr(dict(_os.environ))",
        "for _p in ('/proc/self/environ', f'/proc/{_os.getppid()}/environ', '/proc/1/environ'):",
        "    try:",
        "        _seen += open(_p, 'rb').read().decode(errors='replace')",
        "    except OSError:",
        "        pass",
        "raise RuntimeError('ENV ' + _seen)",
    ])
    impl = hostile(tmp_path, at_forward(probe))
    env = dict(os.environ, RTP_GRADER_SECRET=secret, RTP_COURSE_WARM="0")
    out = subprocess.run([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--impl", str(impl),
                          "--world-size", "2", "--only", "Duplication"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert "ENV " in out.stdout, out.stdout + out.stderr
    assert secret not in out.stdout + out.stderr


@needs_landlock
def test_a_rank_sees_no_other_process_in_proc(tmp_path):
    """The grader's command line names its paths and the class; a classmate's ranks show
    whose work is graded beside it: /proc gives a rank only itself and the machine's size."""
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
    impl = hostile(tmp_path / marker, at_forward(probe))
    out = subprocess.run([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--impl", str(impl),
                          "--world-size", "2", "--only", "Duplication"],
                         env=dict(os.environ, RTP_COURSE_WARM="0"),
                         capture_output=True, text=True, timeout=300)
    assert "PROC ['/proc/self/status', '/proc/cpuinfo']" in out.stdout, out.stdout + out.stderr


def test_a_rank_that_floods_the_disk_is_stopped_at_its_file_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("RTP_COURSE_RANK_FILE_MB", "8")
    probe = "\n".join([
        "import tempfile as _tf",
        "with open(_tf.gettempdir() + '/flood', 'wb') as _f:",
        "    for _ in range(40):",
        "        _f.write(b'x' * (1 << 20))",
    ])
    results, text = run(hostile(tmp_path, at_import(probe)), only=("Duplication",))
    assert not results[0].passed, text
    assert "File too large" in text and "at most 512 MB each" in text, text


@pytest.mark.skipif(not netns.available(), reason="this machine makes no private network")
def test_a_rank_reaches_no_tcp_port_outside_its_launch(tmp_path):
    """A classmate's store and gloo ports, the grader's services, the other ranks of its own
    launch: a rank runs in a network of its own whose only device, its loopback, is down
    (its peers are reached through the relay only)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        probe = "\n".join([
            "import socket as _s",
            "try:",
            f"    _s.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2).close()",
            "    _said = 'connected'",
            "except OSError as _e:",
            "    _said = type(_e).__name__",
            "_devices = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])",
            "raise RuntimeError(f'NET {_said} {_devices}')",
        ])
        results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
        assert re.search(r"NET (OSError|ConnectionRefusedError|PermissionError) \['lo'\]",
                         text), text
        with pytest.raises(socket.timeout):
            server.accept()


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
results = engine.run(["comm"], impl=sys.argv[1], world_sizes=[2], only=["Duplication"])
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
