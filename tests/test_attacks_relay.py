"""The communication a rule judges is observed outside the rank (runtime/relay, checker/audit).

On CPU a checker rank reaches its peers only through the relay, a thread of the grader that
carries every operation and keeps the account of it; the rank's own log of its calls is held
against that account. And a rank holds no key: its own inputs come from the parent, as
values. Each recipe below is one a class could share; each must fail, with a message that
says what happened. The honest reference keeps its points.
"""
import pytest

from rtp_course.checker import engine, report
from rtp_course.runtime import netns
from rtp_course.runtime import relay as _relay
from test_attacks import hostile, needs_landlock

pytestmark = pytest.mark.skipif(not _relay.supported(), reason="this torch cannot run the relay "
                                "(torch.distributed's C++ does not call a Python handle's wait)")

ALL_REDUCE = "        out = x.contiguous().clone()\n        dist.all_reduce(out, group=group)\n"


def all_reduce_becomes(code: str) -> dict:
    """comm.AllReduce's forward, with `code` in place of its all-reduce (`out` holds x)."""
    body = "".join(f"        {line}\n" for line in code.splitlines())
    return {"comm": [(ALL_REDUCE, "        out = x.contiguous().clone()\n" + body)]}


def comm_run(impl, only=("AllReduce",), world_sizes=(2, 3)):
    results = engine.run(["comm"], impl=str(impl), world_sizes=list(world_sizes), only=list(only))
    return results, report.text(results)


# The documented forge of the last version: each rank put its keys on the launch's TCP store,
# took the others', drew every rank's input and summed them, and all-reduced zeros for the log.
STORE_FORGE = """import datetime as _dt
import torch.distributed.distributed_c10d as _c10d
_store = _c10d._get_default_store()
_me, _n = dist.get_rank(group), dist.get_world_size(group)
_store.set(f"x {_me}", ",".join(map(repr, x.reshape(-1).tolist())))
_store.wait([f"x {q}" for q in range(_n)], _dt.timedelta(seconds=2))
out = sum(torch.tensor([float(v) for v in _store.get(f"x {q}").decode().split(",")],
                       dtype=x.dtype).reshape(x.shape) for q in range(_n))
dist.all_reduce(torch.zeros_like(out), group=group)"""


def test_the_launch_has_no_store_to_carry_data(tmp_path):
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(STORE_FORGE)))
    assert results and not any(r.passed for r in results), text


# Data that crossed the relay, with the call erased from the rank's log.
ERASED = """from rtp_course.runtime import commlog as _log
_parts = [torch.empty_like(out) for _ in range(dist.get_world_size(group))]
dist.all_gather(_parts, out, group=group)
del _log.STATE.events[-1]
out = sum(_parts)
dist.all_reduce(torch.zeros_like(out), group=group)"""

# A made-up entry: the honest all-reduce, and one more call that never happened.
MADE_UP = """from rtp_course.runtime import commlog as _log
dist.all_reduce(out, group=group)
_log.STATE.events.append(_log.Event("all_reduce", _log.STATE.phase, out.numel() * 8, None,
                                    "comm.py:31 in forward", "all_reduce"))"""

# A process group's C++ method called directly: torch.distributed's functions never see it.
BEHIND_THE_LOG = """import torch.distributed.distributed_c10d as _c10d
_g = group if group is not None else _c10d._get_default_group()
_g.allreduce([out]).wait()"""


@pytest.mark.parametrize("forge,said", [
    (ERASED, "that no torch.distributed call in the rank's log accounts for"),
    (MADE_UP, "and the relay saw nothing more from this rank"),
    (BEHIND_THE_LOG, "that no torch.distributed call in the rank's log accounts for"),
])
def test_the_log_is_held_against_what_the_relay_carried(tmp_path, forge, said):
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(forge)))
    assert results and not any(r.passed for r in results), text
    assert said in text and "rule 'Communication'" in text, text


def test_the_bytes_judged_are_the_relays():
    """A log that under-reports what its calls moved is judged by the relay's count: a rule
    on bytes (flyweight's 'Traffic' bounds them) sees what crossed, not what was written."""
    from rtp_course.checker import verdict
    from rtp_course.checker.registry import Bound, Check, CommRule

    class Bytes(Check):
        exercise, name = "flyweight", "bytes_probe"
    rule = CommRule("forward", "send|isend", 1, "one shard", nbytes=Bound(high=64))
    event = {"kind": "isend", "family": "isend", "phase": "forward", "nbytes": 64, "peer": 1,
             "where": "flyweight.py:80 in forward", "completed": True}
    outcome = {"status": "ok", "records": {}, "values": {}, "events": [event]}
    honest = {0: dict(outcome, carried=[{"family": "send", "group": [0, 1], "peer": 1,
                                          "bytes": 64, "phase": "forward"}])}
    assert verdict.judge(Bytes(), 2, honest, {0: {}}, [rule]).passed
    forged = {0: dict(outcome, carried=[{"family": "send", "group": [0, 1], "peer": 1,
                                          "bytes": 4096, "phase": "forward"}])}
    result = verdict.judge(Bytes(), 2, forged, {0: {}}, [rule])
    assert not result.passed and "moved 4096 bytes" in result.message, result.message


def test_a_rank_cannot_ask_for_another_ranks_inputs(tmp_path):
    """The parent serves a rank only the data of sets it belongs to: it knows whose
    connection asks, whatever the request says."""
    probe = ("from rtp_course.runtime.relay import group as _g\n"
             "_other = 1 - dist.get_rank()\n"
             "try:\n"
             "    _g.ask_input({'what': 'randn', 'seed': 11, 'shape': [2, 3], "
             "'dtype': 'float64', 'owner': [_other]})\n"
             "except _g.RelayError as _e:\n"
             "    assert 'a rank gets only its own' in str(_e), _e\n"
             "else:\n"
             "    raise RuntimeError('GOT THE OTHER RANKS DATA')")
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe + "\n"
                                                                     "dist.all_reduce(out, group=group)")),
                             world_sizes=(2,))
    assert results and all(r.passed for r in results), text


def test_a_rank_holds_no_key_and_no_seed(tmp_path):
    """What would carry a whole input in a few bytes does not exist in a rank."""
    probe = ("from rtp_course.checker import inputs as _inputs\n"
             "assert _inputs._rank_keys == {} and _inputs._master is None, 'A KEY'\n"
             "try:\n"
             "    _inputs.seed(0, owner=dist.get_rank())\n"
             "except _inputs.NotYourInput as _e:\n"
             "    assert 'holds no key' in str(_e)\n"
             "else:\n"
             "    raise RuntimeError('A SEED OF ITS OWN DATA')\n"
             "dist.all_reduce(out, group=group)")
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and all(r.passed for r in results), text


def test_garbage_on_the_relay_fails_that_rank_only(tmp_path):
    """Bytes that are not an operation end the rank's connection (its check fails); the relay,
    the grader and the other checks go on."""
    probe = ("import socket as _socket\n"
             "from rtp_course.runtime.relay import group as _g\n"
             "_g.link().sock.sendall(b'\\xff' * 12 + b'not json')\n"
             "dist.all_reduce(out, group=group)")
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)),
                             only=("AllReduce", "AllGather"), world_sizes=(2,))
    by = {r.check: r for r in results}
    assert not by["AllReduce"].passed and by["AllGather"].passed, text


def test_a_relayed_frame_too_large_is_refused_before_it_is_read(tmp_path):
    probe = ("import struct as _struct\n"
             "from rtp_course.runtime.relay import group as _g\n"
             "_g.link().sock.sendall(_struct.pack('<IQ', 10, 1 << 40))\n"
             "dist.all_reduce(out, group=group)")
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and not any(r.passed for r in results), text


@needs_landlock
def test_ranks_share_no_socket_fifo_or_ipc(tmp_path):
    """No channel between two ranks of one launch but the relay: no network (each rank has its
    own, with nothing up), no socket file or FIFO (a relay rank cannot make one), its own
    System V IPC namespace."""
    probe = "\n".join([
        "import ctypes as _ct, os as _os, socket as _socket, tempfile as _tf",
        "_said = []",
        "try:",
        "    _s = _socket.socket(_socket.AF_UNIX); _s.bind(_tf.gettempdir() + '/sock')",
        "    _said.append('BOUND A SOCKET FILE')",
        "except OSError:",
        "    pass",
        "try:",
        "    _os.mkfifo(_tf.gettempdir() + '/fifo'); _said.append('MADE A FIFO')",
        "except OSError:",
        "    pass",
        "try:",
        "    _socket.create_connection(('127.0.0.1', 29500), timeout=1); _said.append('TCP')",
        "except OSError:",
        "    pass",
        "_libc = _ct.CDLL(None, use_errno=True)",
        "_q = _libc.msgget(0x5254500 + dist.get_rank(), 0o1600)   # IPC_CREAT | 0600",
        "_other = _libc.msgget(0x5254500 + 1 - dist.get_rank(), 0o600)",
        "import time as _time; _time.sleep(0.3)",
        "_other = _libc.msgget(0x5254500 + 1 - dist.get_rank(), 0o600)",
        "if _other >= 0:",
        "    _said.append('SAW THE OTHER RANKS MESSAGE QUEUE')",
        "if _said:",
        "    raise RuntimeError(' / '.join(_said))",
        "dist.all_reduce(out, group=group)",
    ])
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and all(r.passed for r in results), text


@pytest.mark.skipif(not netns.available(), reason="this machine makes no private network")
def test_mismatched_collectives_are_named_not_hung(tmp_path):
    """The relay knows what each rank posted: ranks that call different collectives get an
    error that says so at once (gloo would hang or mix them up)."""
    wrong = ("if dist.get_rank(group) == 0:\n"
             "    dist.all_reduce(out, group=group)\n"
             "else:\n"
             "    dist.broadcast(out, 0, group=group)")
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(wrong)), world_sizes=(2,))
    assert results and not any(r.passed for r in results), text
    assert "the ranks' collective calls do not match: rank 0 called all_reduce, rank 1 called " \
           "broadcast" in text, text
    assert "relay note" not in text, text


@needs_landlock
def test_no_tcp_even_without_a_network_namespace(tmp_path, monkeypatch):
    """Where no namespace of its own can be made (RTP_COURSE_NETNS=0 stands for such a
    kernel), a relay rank still binds and connects no TCP socket: Landlock (ABI 4) refuses
    both, since it needs none."""
    import socket
    from rtp_course.runtime import sandbox
    if sandbox.abi_version() < 4:
        pytest.skip("Landlock before ABI 4 has no network rules")
    monkeypatch.setenv("RTP_COURSE_NETNS", "0")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe = ("import socket as _s\n"
                 "try:\n"
                 f"    _s.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)\n"
                 "    raise RuntimeError('CONNECTED')\n"
                 "except PermissionError:\n"
                 "    pass\n"
                 "dist.all_reduce(out, group=group)")
        results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and all(r.passed for r in results), text


@pytest.mark.skipif(not netns.available(), reason="this machine makes no namespaces")
def test_a_rank_can_name_no_process_but_its_own(tmp_path):
    """The calls that take a pid, not governed by Landlock, reach nothing outside the rank's
    PID namespace: not the grader (here the test's process), whose priority, CPUs, limits
    and existence it would otherwise see and set (the values set are the ones it has, so a
    failure of this test harms nothing)."""
    import os
    import resource
    me = os.getpid()
    nice, core = os.getpriority(os.PRIO_PROCESS, me), resource.getrlimit(resource.RLIMIT_CORE)
    cpus = sorted(os.sched_getaffinity(me))
    probe = "\n".join([
        "import os as _os, resource as _res",
        f"_grader, _said = {me}, []",
        "for _what, _call in [",
        f"        ('its priority', lambda: _os.setpriority(_os.PRIO_PROCESS, _grader, {nice})),",
        f"        ('its CPUs', lambda: _os.sched_setaffinity(_grader, {cpus})),",
        f"        ('its limits', lambda: _res.prlimit(_grader, _res.RLIMIT_CORE, {core})),",
        "        ('that it exists', lambda: _os.kill(_grader, 0)),",
        "        ('its scheduler', lambda: _os.sched_getscheduler(_grader))]:",
        "    try:",
        "        _call()",
        "        _said.append(_what)",
        "    except OSError:",
        "        pass",
        "if _os.getpid() == _grader or _said:",
        "    raise RuntimeError('REACHED THE GRADER: ' + ', '.join(_said))",
        "dist.all_reduce(out, group=group)",
    ])
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and all(r.passed for r in results), text
    assert os.getpriority(os.PRIO_PROCESS, me) == nice and \
        resource.getrlimit(resource.RLIMIT_CORE) == core


@needs_landlock
def test_a_rank_reaches_no_service_by_a_socket_path(tmp_path):
    """A service of the grader's user listening on a Unix socket (a session bus, systemd's
    user manager; here the test's own) is out of reach: Landlock does not govern connect()
    by path, so a relay rank makes no socket at all (runtime/seccomp), and a vsock or UDP
    socket would reach the machine's services the same way."""
    import socket
    from rtp_course.runtime import seccomp
    if not seccomp.supported():
        pytest.skip("no seccomp filter for this architecture")
    path = tmp_path / "service.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        server.settimeout(0)
        probe = "\n".join([
            "import socket as _s",
            "_said = []",
            f"for _family, _address in [(_s.AF_UNIX, {str(path)!r}), (_s.AF_INET, None),",
            "                          (getattr(_s, 'AF_VSOCK', 40), None)]:",
            "    try:",
            "        _c = _s.socket(_family, _s.SOCK_DGRAM if _address is None else _s.SOCK_STREAM)",
            "        _said.append(f'made a socket of family {_family}')",
            "        if _address is not None:",
            "            _c.connect(_address)",
            "            _said.append('CONNECTED to ' + _address)",
            "    except OSError:",
            "        pass",
            "_a, _b = _s.socketpair()      # reaches nothing: allowed",
            "if _said:",
            "    raise RuntimeError(' / '.join(_said))",
            "dist.all_reduce(out, group=group)",
        ])
        results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
        with pytest.raises(BlockingIOError):
            server.accept()
    assert results and all(r.passed for r in results), text


@needs_landlock
def test_ranks_share_no_lock_watch_or_memory_count(tmp_path):
    """Files every rank may read carry nothing between ranks: no lock, lease or change
    notification can be set on them (runtime/seccomp), and no rank reads a count a peer
    moves at will: the launch's cgroup's memory (of /sys a rank reads only what describes
    the CPUs), the system's AIO contexts, open files and forks (sandbox.PROC_READ_ALONE)."""
    from rtp_course.runtime import seccomp
    if not seccomp.supported():
        pytest.skip("no seccomp filter for this architecture")
    probe = "\n".join([
        "import ctypes as _ct, fcntl as _fcntl, os as _os",
        "_said, _libc = [], _ct.CDLL(None, use_errno=True)",
        "_fh = open(torch.__file__, 'rb')",
        "for _what, _call in [",
        "        ('flock', lambda: _fcntl.flock(_fh, _fcntl.LOCK_SH | _fcntl.LOCK_NB)),",
        "        ('lockf', lambda: _fcntl.lockf(_fh, _fcntl.LOCK_SH | _fcntl.LOCK_NB, 1)),",
        "        ('F_OFD_SETLK', lambda: _fcntl.fcntl(_fh, 37, bytes(32))),",
        "        ('F_GETLK', lambda: _fcntl.fcntl(_fh, _fcntl.F_GETLK, bytes(32))),",
        "        ('a lease', lambda: _fcntl.fcntl(_fh, 1024, _fcntl.F_RDLCK)),",
        "        ('dnotify', lambda: _fcntl.fcntl(_os.open(_os.path.dirname(torch.__file__),",
        "                                                  _os.O_RDONLY), 1026, 1)),",
        "        ('the cgroups', lambda: _os.listdir('/sys/fs/cgroup')),",
        "        ('aio-nr', lambda: open('/proc/sys/fs/aio-nr').read()),",
        "        ('file-nr', lambda: open('/proc/sys/fs/file-nr').read()),",
        "        ('the count of forks', lambda: open('/proc/stat').read())]:",
        "    try:",
        "        _call()",
        "        _said.append(_what)",
        "    except OSError:",
        "        pass",
        "for _name, _args in [('inotify_init1', (0,)), ('fanotify_init', (0, 0))]:",
        "    if getattr(_libc, _name)(*_args) >= 0:",
        "        _said.append(_name)",
        "if _said:",
        "    raise RuntimeError('A CHANNEL: ' + ', '.join(_said))",
        "dist.all_reduce(out, group=group)",
    ])
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and all(r.passed for r in results), text
