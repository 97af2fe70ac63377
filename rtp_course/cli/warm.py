"""A warm `rtp-course check`: a per-user server that imported torch once runs later checks.

Before its first rank starts, a check spends 2-4 s importing torch (and dynamo, which the
first optimizer step pulls in), in the checker and in the forkserver of its ranks. So an
interactive `rtp-course check` (a terminal on stdin or stdout) that finds no server runs
the check itself and then starts one in the background, which does those imports and
waits on a Unix socket in a directory only its user can open. Each later `rtp-course
check` (waiting for a server that is starting) connects and passes its arguments, working
directory, environment and its stdin, stdout and stderr (SCM_RIGHTS); the server forks a
child that runs the check exactly as the command would have, writing to the user's
terminal, and sends back the exit status.

* Stale code never runs: the socket is named by a fingerprint of the interpreter, the
  torch installation, every file of the course package except the exercise files,
  the environment variables read at import time, and the Slurm job, step and cgroup the
  command runs in (a server never serves another allocation). Change any of them and another
  server starts; a server ends after IDLE seconds without a request. The exercise files
  are not in the fingerprint because neither the server nor the child ever imports them:
  the ranks do, fresh on every run.
* Runs share nothing but the imports: the server never runs a check, and each run is a
  fresh fork of it with its own forkserver for the ranks, forked from that child before it
  starts any thread (forking a process that computed with torch is not safe).
* Nothing outlives the command: when it ends (Ctrl-C, kill), its connection closes and
  the run's child kills its descendants and exits; its guardian covers a SIGKILL.
* Only `rtp-course check` in a terminal uses it: batch jobs, grading and notebooks never
  do. RTP_COURSE_WARM=0 turns it off, =1 forces it on (tests).
* Code under test cannot use it: Landlock does not stop a confined rank from connecting
  to a socket by its path, so the server serves only a peer of its own user whose
  process may still gain privileges (confinement sets no_new_privs, for good), and only
  `check`. A refused command runs the check itself.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import rtp_course
from rtp_course.course import EXERCISES

IDLE = float(os.environ.get("RTP_COURSE_WARM_IDLE", 900))   # s without a request before exit
START_TIMEOUT = 60.0    # s a command waits for a starting server to be ready
REFUSED = -(2 ** 31)    # the exit status a server sends to a peer it does not serve
ENV_AT_IMPORT = ("RTP_COURSE_", "OMP_", "MKL_", "TORCH_", "CUDA_", "PYTHON", "LD_LIBRARY_PATH")
SLURM_IDS = ("SLURM_JOB_ID", "SLURM_STEP_ID")
PRELOAD = ["rtp_course.checker.engine", "rtp_course.checker.report", "rtp_course.cli.progress"]


def wanted() -> bool:
    setting = os.environ.get("RTP_COURSE_WARM", "")
    if setting in ("0", "1"):
        return setting == "1"
    return hasattr(socket, "AF_UNIX") and (sys.stdin.isatty() or sys.stdout.isatty())


def fingerprint() -> str:
    """What the server's imports depend on (stat only: a command pays about a millisecond)."""
    package = Path(rtp_course.__file__).resolve().parent
    exercises = {package / f"{ex}.py" for ex in EXERCISES}
    h = hashlib.sha256(f"{sys.executable}\0{sys.version}\0{package}\0{os.getuid()}".encode())
    try:
        import importlib.util
        torch_init = Path(importlib.util.find_spec("torch").origin)
        st = torch_init.stat()
        h.update(f"{torch_init}\0{st.st_mtime_ns}\0{st.st_size}".encode())
    except (AttributeError, OSError, TypeError):
        pass
    for path in sorted(package.rglob("*.py")):
        if path not in exercises:
            st = path.stat()
            h.update(f"{path}\0{st.st_mtime_ns}\0{st.st_size}\0".encode())
    for k in sorted(os.environ):
        if k.startswith(ENV_AT_IMPORT) and k not in ("RTP_COURSE_WARM", "RTP_COURSE_WARM_IDLE"):
            h.update(f"{k}={os.environ[k]}\0".encode())
    h.update(_allocation().encode())
    return h.hexdigest()[:20]


def _allocation() -> str:
    """The Slurm job and step, and the cgroup, this command runs in: two jobs of one user on
    a node may see the same CUDA_VISIBLE_DEVICES, and a server of one job would check on its
    GPUs and CPUs (its cgroup's) for the other."""
    slurm = "\0".join(f"{k}={os.environ.get(k, '')}" for k in SLURM_IDS)
    try:
        with open("/proc/self/cgroup") as fh:
            cgroup = fh.read()
    except OSError:
        cgroup = ""
    return f"{slurm}\0{cgroup}\0"


def runtime_dir() -> Path | None:
    """The user's private directory for the sockets, or None if it is not private."""
    base = os.environ.get("RTP_COURSE_WARM_DIR") or (
        os.path.join(os.environ["XDG_RUNTIME_DIR"], "rtp-course") if os.environ.get("XDG_RUNTIME_DIR")
        else f"/tmp/rtp-course-{os.getuid()}")
    path = Path(base)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None              # someone else's, or open to others: never trust it
    return path


# ---- the command's side ----------------------------------------------------------------------

def run_check(argv: list[str]) -> int | None:
    """Run `rtp-course check argv` in the warm server (waiting for one that is starting); its
    exit status, or None if no server is there (the caller then calls start_after_this_command()
    and runs the check itself)."""
    where = runtime_dir()
    if where is None:
        return None
    fp = fingerprint()
    sock_path = where / f"{fp}.sock"
    conn = _connect(sock_path)
    deadline = time.monotonic() + START_TIMEOUT
    while conn is None and _starting(where, fp) and time.monotonic() < deadline:
        time.sleep(0.05)
        conn = _connect(sock_path)
    if conn is None:
        return None
    with conn:
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        try:
            socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        except OSError:           # nothing ran yet (a closed stdin, say): run it here
            return None
        try:
            reply = _recv_exactly(conn, 4)
        except OSError:
            reply = b""
        if len(reply) != 4:
            print("rtp-course check: the warm check server stopped; run again, or set "
                  "RTP_COURSE_WARM=0", file=sys.stderr)
            return 2
        code = struct.unpack("!i", reply)[0]
        return None if code == REFUSED else code


_COMMAND_ENDS = []     # the pipe end whose closing (this process's exit) lets the server start


def start_after_this_command() -> None:
    """Start a server for the checks that follow, now, so that it predates this command's
    launches and guardian (they spare it); it waits until this process has exited (not to
    slow down its check), then takes the lock (a command then waits for it) and imports."""
    where = runtime_dir()
    if where is not None and not _COMMAND_ENDS:
        r, w = os.pipe()      # not inheritable: only this process holds w
        _start_server(where, fingerprint(), after=r)
        os.close(r)
        _COMMAND_ENDS.append(w)


def _starting(where: Path, fp: str) -> bool:
    """Whether a server holds the fingerprint's lock (it takes it before importing)."""
    try:
        with open(where / f"{fp}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)   # released when closed
            return False
    except OSError:
        return True


def _connect(path: Path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return s
    except OSError:
        s.close()
        return None


def _recv_exactly(conn, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _start_server(where: Path, fp: str, after: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rtp_course.cli.warm_server", str(where), fp,
                             str(Path(rtp_course.__file__).resolve().parent), str(after)],
                            start_new_session=True, stdin=subprocess.DEVNULL, pass_fds=(after,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ---- the server --------------------------------------------------------------------------------

def serve(where: Path, fp: str, package: str, after: int, run) -> None:
    """Serve `rtp-course check` until IDLE: `run` is the command line's main (argv -> exit
    status), handed down by cli/warm_server.py, the server's process."""
    if str(Path(rtp_course.__file__).resolve().parent) != package:
        sys.exit(3)       # `-m` put another rtp_course first on the path: not the command's
    while os.read(after, 1):                     # until the command that started it exits
        pass
    os.close(after)
    lock = open(where / f"{fp}.lock", "w")
    for _ in range(10):                # a command's probe (_starting) holds it for an instant
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            time.sleep(0.02)
    else:
        return                                   # another server for this fingerprint runs
    import importlib
    from rtp_course.runtime import forkserver
    for name in forkserver.PRELOAD + PRELOAD:
        importlib.import_module(name)
    import torch
    from rtp_course.checker import judging
    from rtp_course.runtime import devices
    devices.forbid_cuda("the warm check server")     # it forks every run's ranks' forkserver
    # Serial torch on one thread (no intra-op pool to fork), course code only: the public
    # checks' expectations, which every run would otherwise compute again (~1 s of CPU).
    torch.set_num_threads(1)
    judging.precompute_expectations()
    leaked = [ex for ex in EXERCISES if f"rtp_course.{ex}" in sys.modules]
    assert not leaked, f"the warm server must never import exercise code: {leaked}"
    sock_path = where / f"{fp}.sock"
    sock_path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(16)
    listener.settimeout(5.0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # `kill`: remove the socket first
    last, served = time.monotonic(), 0
    state = where / f"{fp}.json"          # for people and tests: which process, how many runs
    state.write_text(json.dumps({"pid": os.getpid(), "served": served}))
    try:
        while time.monotonic() - last < IDLE and sock_path.exists():
            _reap()
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            if not _trusted(conn):
                with conn:
                    conn.sendall(struct.pack("!i", REFUSED))
                continue
            last, served = time.monotonic(), served + 1
            state.write_text(json.dumps({"pid": os.getpid(), "served": served}))
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                listener.close()
                os._exit(_serve_one(conn, run))
            conn.close()
    finally:
        sock_path.unlink(missing_ok=True)   # ours: no other server holds the lock
        state.unlink(missing_ok=True)


def _trusted(conn) -> bool:
    """A process of this user that is not confined (no no_new_privs: see the docstring)."""
    try:
        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, struct.error):
        return False
    return uid == os.getuid() and "\nNoNewPrivs:\t0" in status


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve_one(conn, run) -> int:
    """The run's child: becomes the command (its fds, directory, environment) and checks."""
    try:
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)   # the fds come with the first bytes
        size = struct.unpack("!I", msg[:4])[0]
        while len(msg) < 4 + size:
            more = conn.recv(4 + size - len(msg))
            if not more:
                return 1
            msg += more
        request = json.loads(msg[4:4 + size])
        if request["argv"][:1] != ["check"]:
            return 2
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _check(request["argv"], conn, run)
    except BaseException as e:  # noqa: BLE001 - tell the command, never hang it
        print(f"rtp-course check (warm server): {type(e).__name__}: {e}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.sendall(struct.pack("!i", code))
    except OSError:
        pass
    return code   # os._exit: the server's exit handlers are not this run's; the guardian
                  # removes the run's temporary directories when this process is gone


def _check(argv, conn, run) -> int:
    from rtp_course.runtime import forkserver
    os.environ["RTP_COURSE_WARM"] = "0"      # this run is the check itself
    from rtp_course.checker import inputs, judging
    # The ranks fork from the forkserver: the expected values stay out of their memory.
    if not forkserver.start_forked(close=[conn.fileno()],
                                   forget=[judging.PRECOMPUTED.clear, inputs.forget]):
        forkserver.start()
    threading.Thread(target=_end_with_the_command, args=(conn,), daemon=True).start()  # after the fork
    try:
        return run(argv)
    except SystemExit as e:            # argparse: its message is already on the user's stderr
        return e.code if isinstance(e.code, int) else 1


def _end_with_the_command(conn) -> None:
    """The command went away (Ctrl-C, killed): end this run and everything it started."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    from rtp_course.runtime import reaper
    for pid in reaper.descendants() - {reaper.guardian_pid()}:   # it removes the run's dirs
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(130)
