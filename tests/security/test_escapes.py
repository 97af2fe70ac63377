"""Escapes (issue 35): what a graded rank tried, and no longer can. Each test is the reference
with a probe pasted in, run confined as `rtp-course grade` runs it; each docstring says what
the test shows on the code before the fix."""
import contextlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from hostile import at_forward, hostile, in_all_reduce, needs_landlock, needs_root, run
from rtp_course.confinement import netns, seccomp

needs_seccomp = pytest.mark.skipif(not seccomp.supported(),
                                   reason="no seccomp filter for this architecture")


def _unprivileged_or_skip(text: str) -> None:
    said = re.search(r"not unprivileged: ([^;)]*)", text)
    if said:
        pytest.skip(f"this machine's ranks stay root: {said[1]} (docs/SECURITY.md)")


def _xattrs_supported(path) -> bool:
    try:
        os.setxattr(path, "user.rtp-probe", b"1")
        os.removexattr(path, "user.rtp-probe")
        return True
    except OSError:
        return False


METADATA = """
import os as _os, tempfile as _tf
_said = []
for _what, _do in (('chmod', lambda: _os.chmod(_F, 0o4777)),
                   ('chown', lambda: _os.chown(_F, _os.getuid(), _os.getgid())),
                   ('utime', lambda: _os.utime(_F)),
                   ('utime to 0', lambda: _os.utime(_F, (0, 0))),
                   ('setxattr', lambda: _os.setxattr(_F, 'user.rtp', b'1')),
                   ('removexattr', lambda: _os.removexattr(_F, 'user.kept'))):
    try:
        _do()
        _said.append(_what)
    except OSError:
        pass
_own = _tf.mkstemp()[1]                      # its own file, in its scratch
try:
    _os.chmod(_own, 0o600)
    _said.append('chmod of its own file')
except PermissionError:
    pass
if _said:
    raise RuntimeError('CHANGED ' + ', '.join(_said))
"""


@needs_seccomp
def test_file_metadata_outside_the_sandbox_cannot_change(tmp_path):
    """A file of the submission itself, writable by anyone (the issue's attack passed a
    rank's gradients to its peers in extended attributes on its own files; as root it set
    mode 4777 and changed mtimes of solutions and site-packages): chmod, chown, utime,
    setxattr and removexattr all fail and the file is unchanged. Landlock does not govern
    these calls; on the code before the fix (no such refusal in the filter, a root rank)
    every one of them succeeded. Even the rank's own file may not change mode: the filter,
    not the file's owner, refuses it."""
    target = tmp_path / "impl" / "notes.txt"           # in the submission: the rank sees it
    impl = hostile(tmp_path, at_forward(f"_F = {str(target)!r}\n" + METADATA))
    target.write_text("the submission's")
    os.chmod(target, 0o666)
    os.chmod(impl, 0o777)
    if not _xattrs_supported(target):
        pytest.skip(f"{tmp_path} holds no user extended attributes")
    os.setxattr(target, "user.kept", b"1")
    before = os.stat(target)
    results, text = run(impl, only=("Duplication",))
    after = os.stat(target)
    assert "CHANGED" not in text and all(r.passed for r in results), text
    assert (after.st_mode, after.st_uid, after.st_mtime_ns) == \
        (before.st_mode, before.st_uid, before.st_mtime_ns)
    assert os.listxattr(target) == ["user.kept"]


IDENTITY = """
import os as _os
_ids = (_os.getresuid(), _os.getresgid(), _os.getgroups())
try:
    open('/etc/shadow').read()
    _shadow = 'READ /etc/shadow'
except OSError as _e:
    _shadow = type(_e).__name__
raise RuntimeError(f'IDS {_ids} {_shadow}')
"""


@needs_landlock
@needs_root
def test_graded_as_root_a_rank_is_not_root_and_cannot_read_shadow(tmp_path):
    """Graded as root, a rank runs as a uid of its own, with no group, and /etc/shadow is
    refused twice (by Landlock, which grants of /etc only what Python needs, and by the
    file's mode). Before the fix the rank was uid 0 in a namespace mapping 0 to 0, all of
    /etc was granted, and it quoted /etc/shadow in its report."""
    results, text = run(hostile(tmp_path, at_forward(IDENTITY)), only=("Duplication",))
    _unprivileged_or_skip(text)
    found = re.search(r"IDS \(\((\d+), (\d+), (\d+)\), \((\d+), (\d+), (\d+)\), \[\]\) (\w+)", text)
    assert found, text
    assert len({found[i] for i in range(1, 7)}) == 1 and found[1] != "0", text
    assert found[7] == "PermissionError" and "READ /etc/shadow" not in text, text
    assert f"as uid {found[1]}" in text, text


TASKS = """
import threading as _th
_th.stack_size(64 << 10)
_go, _made = _th.Event(), 0
try:
    for _ in range(600):
        _th.Thread(target=_go.wait, daemon=True).start()
        _made += 1
except RuntimeError:
    pass
finally:
    _go.set()
if _made >= 300:
    raise RuntimeError(f'MADE {_made} TASKS')
"""


def test_a_rank_cannot_exceed_its_task_cap(tmp_path, monkeypatch):
    """With a cap of 300 tasks for the launch (RTP_COURSE_RANK_TASKS), a rank cannot start
    300 threads more: the cap binds, as root too (the ranks drop to a uid of their own,
    which RLIMIT_NPROC counts). Before the fix, graded as root, a rank held 1502 tasks: the
    kernel exempts uid 0 from RLIMIT_NPROC."""
    if not netns.available() and os.geteuid() != 0:
        pytest.skip("no user namespace here and not root: the cap would count the grader's "
                    "own processes, so none is set (docs/SECURITY.md)")
    monkeypatch.setenv("RTP_COURSE_RANK_TASKS", "300")
    results, text = run(hostile(tmp_path, in_all_reduce(TASKS)), only=("AllReduce",))
    _unprivileged_or_skip(text)
    assert "MADE" not in text and all(r.passed for r in results), text


UNIX_PATH = """
import socket as _socket
_said = []
for _family in (_socket.AF_UNIX,):
    try:
        with _socket.socket(_family) as _s:
            _s.settimeout(3)
            _s.connect(_PATH)
            _said.append('CONNECTED')
    except OSError:
        pass
if _said:
    raise RuntimeError(' '.join(_said))
"""


@needs_seccomp
def test_a_rank_cannot_connect_to_a_unix_socket_by_path(tmp_path):
    """A service listening on a Unix socket that anyone may connect to (as D-Bus, systemd
    or a container engine do): a rank cannot reach it (Landlock does not govern connect()
    by path; the filter refuses AF_UNIX sockets to a CPU rank). Before the fix a rank
    could make the socket and connect."""
    where = Path(tempfile.mkdtemp(prefix="rtp-sock-", dir="/tmp"))   # where a rank can look
    os.chmod(where, 0o777)
    path = where / "service"
    with contextlib.ExitStack() as cleanup, socket.socket(socket.AF_UNIX) as server:
        cleanup.callback(shutil.rmtree, where, True)
        server.bind(str(path))
        os.chmod(path, 0o777)
        server.listen()
        server.settimeout(0.5)
        probe = f"_PATH = {str(path)!r}\n" + UNIX_PATH
        results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
        assert "CONNECTED" not in text and all(r.passed for r in results), text
        with pytest.raises(socket.timeout):
            server.accept()


@pytest.mark.skipif(not netns.available(), reason="this machine makes no private network "
                                                  "(unprivileged user namespaces refused)")
def test_a_rank_reaches_no_tcp_port_outside_its_launch(tmp_path):
    """A classmate's store and gloo ports, the grader's services: a rank runs in a network of
    its own whose only device is its loopback. Before the private network, it connected."""
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
        assert re.search(r"NET \w*(Error|Refused)\w* \['lo'\]", text), text
        with pytest.raises(socket.timeout):
            server.accept()


CALLBACK = """
import torch.distributed as _dist
_read = []
def _reader(_f):
    for _p in _SECRETS:
        try:
            open(_p).read(1)
            _read.append(_p)
        except OSError:
            pass
    return _f.value()
_dist.all_reduce(x.detach().clone(), async_op=True).get_future().then(_reader).wait()
raise RuntimeError('THE CALLBACK READ ' + repr(_read))
"""


@needs_landlock
def test_a_futures_callback_is_confined_too(tmp_path):
    """`work.get_future().then(f)` runs f in the thread that completes the work: for the
    world group, one of gloo's worker threads. Those were started before confinement, and
    Landlock (before ABI 8) confines only the threads started after it: without the fix
    (the world group made again once confined) f read the solutions and the hidden checks."""
    from hostile import ROOT
    secrets = [str(ROOT / "solutions" / "comm.py"), str(ROOT / "tests" / "hidden" / "comm.py")]
    probe = f"_SECRETS = {secrets!r}\n" + CALLBACK
    results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
    assert "THE CALLBACK READ []" in text, text


# A C-level signal handler (ctypes) runs Python in whichever thread takes the signal: the
# rank blocks it in its own thread and signals itself, so that the others take it in turn.
EVERY_THREAD = """
import ctypes as _c, os as _os, signal as _sg, threading as _th, time as _t
_read, _ran = [], set()
def _reader(_sig):
    _ran.add(_th.get_native_id())
    for _p in _SECRETS:
        try:
            open(_p).read(1)
            _read.append((_th.get_native_id(), _p))
        except OSError:
            pass
    _t.sleep(0.2)                  # the signal stays blocked here: the next goes elsewhere
_libc = _c.CDLL(None, use_errno=True)
_handler = _c.CFUNCTYPE(None, _c.c_int)(_reader)
_libc.signal(int(_sg.SIGUSR2), _handler)
_sg.pthread_sigmask(_sg.SIG_BLOCK, {_sg.SIGUSR2})
_threads = len(_os.listdir('/proc/self/task')) - 1
for _i in range(40):
    _os.kill(_os.getpid(), _sg.SIGUSR2)
    _t.sleep(0.02)
_t.sleep(0.5)
raise RuntimeError(f'THREADS {_threads} RAN {len(_ran)} READ {sorted(set(_read))!r}')
"""


@needs_landlock
def test_every_thread_of_a_rank_is_confined(tmp_path):
    """Whatever thread the code under test gets to run Python in (a signal handler taken by
    the rank's other threads: gloo's, the store's, torch's), none reads the solutions or the
    hidden checks."""
    from hostile import ROOT
    secrets = [str(ROOT / "solutions" / "comm.py"), str(ROOT / "tests" / "hidden" / "comm.py")]
    probe = f"_SECRETS = {secrets!r}\n" + EVERY_THREAD
    results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
    assert "READ []" in text and "RAN 0" not in text, text


SHADOW = """
_read = []
for _p in ('/etc/shadow', '/etc/gshadow', '/etc/sudoers', '/etc/passwd', '/etc/ssh'):
    try:
        (__import__('os').listdir(_p) if __import__('os').path.isdir(_p) else open(_p).read(1))
        _read.append(_p)
    except OSError:
        pass
open('/etc/hosts').read()                    # what gloo resolves its peers with: granted
if _read:
    raise RuntimeError('READ ' + repr(_read))
"""


@needs_landlock
def test_of_etc_a_rank_reads_only_what_python_needs(tmp_path):
    """Of /etc, a rank reads name resolution, the time zone and the loader's cache: not
    /etc/shadow, /etc/sudoers, ssh's host keys, nor the list of users. Before the fix all of
    /etc was granted (and, as root, /etc/shadow was quoted in a report)."""
    results, text = run(hostile(tmp_path, at_forward(SHADOW)), only=("Duplication",))
    assert "READ" not in text and all(r.passed for r in results), text

