"""Ranks start as forks of a server that imported torch once: multiprocessing's forkserver.

Importing torch takes about 2 s; a backward given its upstream gradient pulls in sympy
(0.4 s more), the first optimizer dynamo (1.3 s more). A rank forked from a server that did
those imports starts in about 0.1 s. The server never touches CUDA, so forking it is safe.
`start()` launches it at once (the CLI calls it before importing torch itself, so that both
imports run side by side), without dynamo when no rank will build an optimizer; a launch
uses it through `method()`. $RTP_COURSE_START_METHOD=spawn restores plain spawn.

No torch import here: that is the point of starting the server early.
"""
from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import shutil
import sys
import tempfile
from multiprocessing import forkserver, process, util

from rtp_course.runtime import reaper

PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "torch.fx.experimental.symbolic_shapes",
           "rtp_course.runtime.launcher", "rtp_course.checker.worker",
           "rtp_course.runtime.preloaded"]
OPTIMIZER_ONLY = ("torch._dynamo",)    # what only an optimizer needs


def _own_tempdir() -> None:
    """multiprocessing keeps the server's socket in a `pymp-*` directory that only a normal
    exit removes; give it a name of this process's run directories, which the guardian removes
    when this process is killed (multiprocessing reads it from the process config, once)."""
    config = process.current_process()._config
    if config.get("tempdir") is None:
        base = tempfile.gettempdir()
        if len(base) > 60 and os.access("/tmp", os.W_OK):  # its sockets' paths: 107 bytes at most
            base = "/tmp"
        path = tempfile.mkdtemp(prefix=reaper.temp_prefix("mp"), dir=base)
        util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)
        config["tempdir"] = path


def serve_only(client_pid: int) -> None:
    """In the forkserver: accept fork requests from `client_pid` only (the launcher that started
    it), checked by the kernel's SO_PEERCRED. Its socket is a path, and Landlock does not govern
    connect() on a path socket: without this, a confined rank could connect and have the
    unconfined server unpickle what it sends, in a process of its own outside the sandbox.
    A refused connection is closed before a byte is read."""
    import socket as socket_module
    import struct
    server_pid, accept = os.getpid(), socket_module.socket.accept

    def accept_from_client(self):
        conn, address = accept(self)
        if os.getpid() != server_pid or self.family != socket_module.AF_UNIX:
            return conn, address           # a rank's own sockets, forked with this patch
        try:
            pid = struct.unpack("3i", conn.getsockopt(socket_module.SOL_SOCKET,
                                                      socket_module.SO_PEERCRED, 12))[0]
        except OSError:
            pid = -1
        if pid != client_pid:
            conn.close()
            raise ConnectionAbortedError(errno.ECONNABORTED, "not the launcher")  # the loop goes on
        return conn, address
    socket_module.socket.accept = accept_from_client


def in_spawned_forkserver() -> bool:
    """Whether this process is a forkserver that multiprocessing started (its preloads run here)."""
    import sys
    return any("multiprocessing.forkserver import main" in a for a in sys.orig_argv)


def method(optimizers: bool = True) -> str:
    """The start method for launched ranks: "forkserver" (configured) unless overridden."""
    name = os.environ.get("RTP_COURSE_START_METHOD", "forkserver")
    if name == "forkserver":
        _own_tempdir()
        multiprocessing.set_forkserver_preload(
            PRELOAD if optimizers else [m for m in PRELOAD if m not in OPTIMIZER_ONLY])
    return name


# What the ranks' environment keeps of the launcher's, by exact name: what Python, torch,
# CUDA and NCCL read, and the job's. Nothing else (a grader's tokens, paths, the course's own
# settings, which the launch passes per run) reaches a rank: not os.environ, nor
# /proc/self/environ, which shows the environment the forkserver was started with.
RANK_ENVIRONMENT = frozenset({
    "PATH", "HOME", "TZ", "TMPDIR", "LANG", "LANGUAGE",
    "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES",
    "LD_LIBRARY_PATH", "PYTHONHASHSEED", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX",
    "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME",
    "CUDA_PATH", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_CACHE_PATH",
    "CUDA_CACHE_DISABLE", "CUDA_DEVICE_MAX_CONNECTIONS", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_TF32_OVERRIDE", "GLOO_SOCKET_IFNAME",
    "GLOO_DEVICE_TRANSPORT", "NCCL_IB_PKEY", reaper.MARK_ENV, reaper.OWNER_ENV,
    # the Slurm job's shape, which the launch and torch read; never who submitted it, from
    # where, under which account (SLURM_JOB_USER, SLURM_SUBMIT_HOST, SLURM_JOB_ACCOUNT ...)
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_GPUS_PER_TASK",
    "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST"})
# Families read by name at run time, too many to list and changing with each release:
# OpenMP's and MKL's threading (OMP_*, KMP_*, MKL_*), NCCL's ~100 settings (NCCL_*), torch's
# (TORCH_*, PYTORCH_*). A member whose name says it holds a secret is refused all the same
# (NCCL_IB_PKEY, a partition key, is listed above).
RANK_FAMILIES = ("OMP_", "KMP_", "MKL_", "NCCL_", "TORCH_", "PYTORCH_")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "CRED", "AUTH", "COOKIE",
                "PRIVATE", "CERT", "SIGN")


def kept_for_ranks(name: str) -> bool:
    if name in RANK_ENVIRONMENT:
        return True
    return name.startswith(RANK_FAMILIES) and not any(w in name.upper() for w in SECRET_WORDS)


def rank_environment(env) -> dict:
    """The kept variables; PATH and HOME neutral (the grader's own say where its files are)."""
    kept = {k: v for k, v in env.items() if kept_for_ranks(k)}
    kept["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.defpath.strip(os.pathsep)])
    kept["HOME"] = tempfile.gettempdir()
    return kept


@contextlib.contextmanager
def _environment_for_ranks():
    saved = dict(os.environ)
    kept = rank_environment(saved)
    os.environ.clear()
    os.environ.update(kept)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def without_main_module():
    """Start processes that do not run the caller's __main__ again. multiprocessing has each
    new process import the parent's main script first, so a script that calls the checker
    without `if __name__ == "__main__":` ran it again in every rank (a wall of tracebacks and
    a failed report). Ranks run course code only; for a function defined in __main__ itself
    the launcher keeps the default."""
    from multiprocessing import spawn
    original = spawn.get_preparation_data

    def preparation(name):
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data
    spawn.get_preparation_data = preparation
    try:
        yield
    finally:
        spawn.get_preparation_data = original


def start(optimizers: bool = True) -> None:
    """Start the server now (no-op if it runs, or with another start method); returns at once,
    while the server imports. optimizers=False: no rank will build one (a rank that does
    imports dynamo itself, 1.3 s). It starts with the rank environment only."""
    if method(optimizers) == "forkserver":
        with _environment_for_ranks():
            forkserver.ensure_running()


def start_forked(close=(), forget=()) -> bool:
    """Start the ranks' forkserver as a FORK of this process, which must have imported what
    PRELOAD lists and run nothing with torch yet (the warm check server's children): no new
    interpreter, so no import. It serves multiprocessing's own protocol, and exits, as a
    spawned one does, when this process and the ranks it forked are gone. Call it before
    this process starts any thread. `close`: descriptors the forkserver must not keep;
    `forget`: functions the forkserver calls first, to drop what the ranks must not see.
    False (nothing started) where multiprocessing's forkserver differs from Python 3.11's
    (3.13 authenticates its clients): start() then spawns one as usual."""
    import inspect
    import socket
    from multiprocessing import connection, resource_tracker
    if method() != "forkserver" or list(inspect.signature(forkserver.main).parameters) != [
            "listener_fd", "alive_r", "preload", "main_path", "sys_path"]:
        return False
    reaper.ensure_guardian()           # before the fork: the ranks inherit the owner mark
    config = process.current_process()._config
    config["tempdir"] = None           # a server's would not be this process's
    method()
    resource_tracker.ensure_running()
    server = forkserver._forkserver
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()
    guardian = reaper.guardian_fd()   # read here: in the child, getpid() is no longer its owner
    pid = os.fork()
    if pid == 0:
        try:
            os.close(alive_w)
            for fd in [*close, guardian]:   # the guardian acts when its pipe's last copy closes
                if fd is not None:
                    os.close(fd)
            for fn in forget:
                fn()
            serve_only(os.getppid())
            forkserver.main(listener.fileno(), alive_r, [])
        finally:
            os._exit(0)
    os.close(alive_r)
    listener.close()
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = (
        address, alive_w, pid)
    return True
