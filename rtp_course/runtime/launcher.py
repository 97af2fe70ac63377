"""Run a function on N processes of this machine, or join a torchrun / srun job.

`launch(fn, world_size)` is what notebooks and the checker use: it starts
`world_size` processes with `torch.multiprocessing.start_processes` (spawn),
initialises a process group in each (gloo on CPU, NCCL with one GPU per rank),
calls `fn(rank, world_size, *args)` and returns every rank's return value.

Why not plain `mp.spawn`: it has no deadline. A rank stuck in a collective
would hang the caller forever, so `launch` joins with a deadline, asks stuck
ranks for their Python stacks (faulthandler on SIGUSR1) and ends them.
The parent opens the rendezvous store on port 0, so the OS picks a free port and
two launches never collide. An `isolation` (the grading layer, rtp_course/confinement)
may put a launch's ranks in namespaces of their own before anything else runs in them;
then the store is served inside the launch's private network instead.

Under torchrun or srun the processes already exist: call `init_from_env()`.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import shutil
import signal
import stat
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rtp_course.runtime import cgroup, forkserver, output, reaper
# The API: what a launch needs, in one place (backends.py, rank.py, torchrun.py hold them).
from rtp_course.runtime.backends import BACKENDS, LaunchError, default_backend, validate  # noqa: F401
from rtp_course.runtime.rank import _worker, own_channel, rank_device  # noqa: F401
from rtp_course.runtime.torchrun import init_from_env  # noqa: F401

# torch logs "Terminating process ... via SIGTERM" for every rank we end; the report says it better.
logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)


class RankFailed(LaunchError):
    def __init__(self, rank: int, traceback: str, stacks: dict[int, str] | None = None,
                 exit_code: int | None = None):
        self.rank, self.traceback, self.stacks, self.exit_code = rank, traceback, stacks or {}, exit_code
        super().__init__(f"rank {rank} raised an exception:\n{traceback}")


class RankHung(LaunchError):
    def __init__(self, timeout: float, stuck: list[int], stacks: dict[int, str]):
        self.timeout, self.stuck, self.stacks = timeout, stuck, stacks
        where = "\n".join(f"--- rank {r} ---\n{stacks.get(r, '(no stack)')}" for r in stuck)
        super().__init__(f"rank(s) {stuck} did not finish within {timeout:.0f} s "
                         f"(deadlock?); where they were:\n{where}")


@dataclass
class WorkerInfo:
    """What a worker needs to join the group; pickled to each spawned process."""
    store_host: str
    store_port: int
    world_size: int
    backend: str
    rundir: str
    pg_timeout: float
    mark: str = ""
    stderr_to_file: bool = True
    capture: bool = False           # stdout and stderr to the launcher's capped capture
    course_env: dict | None = None  # the parent's RTP_COURSE_* now (a forkserver's are stale),
                                    # and the launch's own variables
    cgroup: str = ""                # the launch's cgroup, which the rank joins first (or none)
    channels: list | None = None    # one socket per rank to the parent (each keeps its own)
    isolation: object = None        # enter(rank, info, keep) -> store port inside, or None
    nccl_rules: bool = True         # gloo calls behave as NCCL's (runtime/nccl)


def stderr_tail(rundir: Path, rank: int, lines: int = 4) -> str:
    """The last lines a rank wrote to its stderr (empty if none), without blank lines."""
    try:
        text = (Path(rundir) / f"stderr.{rank}.txt").read_text(errors="replace")
    except OSError:
        return ""
    kept = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


def _finished(rundir: Path, rank: int) -> bool:
    """The rank's function returned (it may be waiting for its peers to leave together)."""
    path = rundir / f"result.{rank}.pt"
    return path.exists() and path.stat().st_size > 0


def _read_stacks(rundir: Path, ranks) -> dict[int, str]:
    stacks = {}
    for r in ranks:
        p = rundir / f"stack.{r}.txt"
        if p.exists():
            stacks[r] = p.read_text().strip()
    return stacks


def _end(processes) -> None:
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def launch(fn, world_size: int, args: tuple = (), backend: str | None = None,
           timeout: float = 120.0, rundir: str | os.PathLike | None = None,
           on_poll=None, results: str = "data", env: dict | None = None,
           capture_output: bool = False, channels=None, isolation=None,
           nccl_rules: bool = True) -> list:
    """Run `fn(rank, world_size, *args)` on `world_size` local processes.

    `fn` must be importable (defined in a module, not a notebook cell: spawn
    pickles it by name). Returns the list of per-rank return values: plain data
    (tensors, numbers, strings, lists, dicts), read without unpickling code,
    unless `results="objects"` (demos that return their own classes); `results="none"`: Nones,
    the files not read (the checker's ranks, whose results are their outcome files). Raises
    RankFailed (with the rank and its traceback) if a rank raises or dies,
    RankHung if ranks are still running after `timeout` seconds. Every process
    is ended before this returns, with whatever they started, and a temporary
    run directory is removed. `on_poll(processes)` is called about every 0.1 s
    while waiting; it may raise to stop the launch (the checker's watchdog).
    `env`: variables set in each rank before its process group starts.
    `capture_output`: each rank's stdout and stderr go to capped files of the run
    (runtime/output.py), never to this process's streams (the checker); otherwise its
    stdout is this process's (a notebook shows it) and its stderr a file of the run.
    `channels`: an object whose `rank_ends()` are one socket per rank (`own_channel()` in
    the rank) and whose `close_rank_ends()` is called once the ranks started.
    `nccl_rules`: on gloo, torch.distributed calls behave as NCCL's where the two differ
    (runtime/nccl: one handle for a batch, waits that may be repeated, ...), so code runs on a
    laptop as it would on GPUs; False for a benchmark, which measures gloo as it is.
    `isolation`: an object whose `private_network(backend)` decides, in this process, whether
    the launch serves its own store, and whose `enter(rank, info, keep)`, called first in
    each rank, puts it in namespaces of its own and returns that store's port, or None
    (rtp_course.confinement).
    """
    backend = backend or default_backend(world_size)
    validate(world_size, backend)
    reaper.ensure_guardian()
    own_dir = rundir is None
    rundir = Path(tempfile.mkdtemp(prefix=reaper.temp_prefix("launch")) if own_dir else rundir)
    rundir.mkdir(parents=True, exist_ok=True)
    with reaper.subreaping():
        return _launch(fn, world_size, args, backend, timeout, rundir, own_dir, on_poll, results,
                       env or {}, capture_output, channels, isolation, nccl_rules)


def _launch(fn, world_size, args, backend, timeout, rundir: Path, own_dir: bool, on_poll, results,
            env: dict, capture_output: bool, channels=None, isolation=None, nccl_rules=True):
    mark, before = uuid.uuid4().hex, reaper.descendants()
    group = cgroup.create()
    private = isolation is not None and isolation.private_network(backend)
    store = None if private else \
        dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=60))
    info = WorkerInfo("127.0.0.1", store.port if store else 0, world_size, backend, str(rundir),
                      pg_timeout=timeout + 60, mark=mark, cgroup=str(group or ""),
                      capture=capture_output,
                      course_env={**{k: v for k, v in os.environ.items()
                                     if k.startswith("RTP_COURSE_")}, **env},
                      channels=channels.rank_ends() if channels is not None else None,
                      isolation=isolation, nccl_rules=nccl_rules)
    ctx = None
    captured = output.Capture(rundir, world_size) if capture_output else None
    try:
        if forkserver.method() == "forkserver":
            forkserver.start()                # with the rank environment only, if not running
        own_main = getattr(fn, "__module__", None) == "__main__"
        with reaper.LOCK, (contextlib.nullcontext() if own_main
                           else forkserver.without_main_module()):
            # (the lock: a concurrent launch's sweep must not see these workers unregistered)
            ctx = mp.start_processes(_worker, args=(info, fn, args), nprocs=world_size, join=False,
                                     start_method=forkserver.method())
            reaper.ACTIVE[mark] = {p.pid for p in ctx.processes}
        if channels is not None:
            channels.close_rank_ends()        # a rank's exit now ends its channel
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=0.1):
                if on_poll is not None:
                    on_poll(ctx.processes)
                if time.monotonic() > deadline:
                    stuck = [r for r, p in enumerate(ctx.processes)
                             if p.is_alive() and not _finished(rundir, r)]
                    for r in stuck:
                        os.kill(ctx.processes[r].pid, signal.SIGUSR1)
                    time.sleep(0.3)
                    raise RankHung(timeout, stuck, _read_stacks(rundir, stuck))
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
            if captured is not None:
                captured.flush()              # the failed rank's last words, for the report
            rank, trace, code = _first_failure(rundir, ctx.processes, e.error_index)
            raise RankFailed(rank, trace, exit_code=code) from None
        return [_load_result(rundir, r, results) for r in range(world_size)]
    finally:
        cgroup.kill(group)                    # every process of the run at once, where it can
        if ctx is not None:
            _end(ctx.processes)
            for path in ctx.error_files:      # torch's own error files, in the system temp dir
                with contextlib.suppress(OSError):
                    os.unlink(path)
        reaper.sweep(mark, before)
        reaper.ACTIVE.pop(mark, None)
        if captured is not None:
            captured.close()
        del store
        if own_dir:
            shutil.rmtree(rundir, ignore_errors=True)


def _load_result(rundir: Path, rank: int, results: str):
    path = rundir / f"result.{rank}.pt"
    if not path.exists() or path.stat().st_size == 0:
        raise RankFailed(rank, died_how(0), exit_code=0)
    if results == "none":      # only that it returned: its file is the code under test's too
        return None
    try:
        return torch.load(path, weights_only=(results != "objects"))
    except Exception as e:
        raise RankFailed(rank, f"its result could not be read as plain data ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}); a launched function "
                               f"must return tensors, numbers, strings, lists or dicts") from None


def _first_failure(rundir: Path, processes, reported: int) -> tuple[int, str, int | None]:
    """(rank, traceback or how it died, exit code) of the rank that failed first: its peers
    then fail too ("Connection closed by peer"), and torch reports the lowest failed rank. A
    rank that crashed (a signal) may be seen late, after its peers' fallout: what failed is
    looked at for up to a second while only fallout is known."""
    deadline = time.monotonic() + 1.0
    while True:
        time.sleep(0.1)  # let the peers' error files land
        found = []
        for r in range(len(processes)):
            path = rundir / f"error.{r}.txt"
            if path.exists() and path.stat().st_size > 0:
                found.append((path.stat().st_mtime, r, _read_bounded(path)))
        original = [f for f in found if not any(m in f[2] for m in _PEER_GONE)]
        crashed = [r for r, p in enumerate(processes)       # by a signal of its own doing,
                   if p.exitcode is not None and p.exitcode < 0  # not the launcher's ending it
                   and -p.exitcode not in (signal.SIGTERM, signal.SIGKILL)
                   and r not in {f[1] for f in found}]
        if original or crashed or time.monotonic() > deadline:
            break
    if original:
        _, rank, trace = min(original)
        return rank, trace.strip(), processes[rank].exitcode
    if crashed:
        reported = crashed[0]
    elif found:
        _, rank, trace = min(found)
        return rank, trace.strip(), processes[rank].exitcode
    code = processes[reported].exitcode
    said = stderr_tail(rundir, reported)
    return reported, died_how(code) + (f"; it printed:\n{said}" if said else ""), code


ERROR_READ = 64 << 10   # bytes of a rank's error file read: its head and tail


def _read_bounded(path: Path) -> str:
    """What a rank wrote as its error, read at bounded cost: a plain file only (not a link or
    a FIFO put there instead), its first and last ERROR_READ/2 bytes when it is longer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        data = fh.read(ERROR_READ)
        if st.st_size > ERROR_READ:
            data = data[:ERROR_READ // 2]
            fh.seek(st.st_size - ERROR_READ // 2)
            data += (f"\n[... {st.st_size - ERROR_READ} bytes not read ...]\n".encode()
                     + fh.read(ERROR_READ // 2))
    return data.decode(errors="replace")


def died_how(code: int | None) -> str:
    """'process killed by signal SIGSEGV (segmentation fault)' / 'process exited with code 0'."""
    if code is not None and code < 0:
        sig = signal.Signals(-code)
        what = {signal.SIGSEGV: "segmentation fault", signal.SIGKILL: "killed",
                signal.SIGABRT: "aborted", signal.SIGBUS: "bus error",
                signal.SIGXFSZ: "it wrote a file past a rank's cap, 512 MB unless "
                                "RTP_COURSE_RANK_FILE_MB says otherwise"}.get(sig, "")
        return f"process killed by signal {sig.name}" + (f" ({what})" if what else "")
    return (f"process exited with code {code} before it finished (os._exit or sys.exit in "
            f"the code it ran, or killed)")


# A peer's end as the others see it: gloo's pairs, or the store its rank 0 served.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "Connection was likely closed")
