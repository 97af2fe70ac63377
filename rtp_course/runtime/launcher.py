"""Run a function on N processes of this machine, or join a torchrun / srun job.

`launch(fn, world_size)` is what notebooks and the checker use: it starts
`world_size` processes with `torch.multiprocessing.start_processes` (spawn),
initialises a process group in each (gloo on CPU, NCCL with one GPU per rank),
calls `fn(rank, world_size, *args)` and returns every rank's return value.

Why not plain `mp.spawn`: it has no deadline. A rank stuck in a collective
would hang the caller forever, so `launch` joins with a deadline, asks stuck
ranks for their Python stacks (faulthandler on SIGUSR1) and ends them.
On gloo the ranks run on a network of their own (runtime/netns.py), where rank 0
serves the rendezvous store: no other launch can reach their store or their gloo
ports, and none collides with them. Otherwise (NCCL, or a kernel without
unprivileged user namespaces) the parent opens the store on port 0, so the OS
picks a free port. The checker's CPU launches use neither: given a `relay`
(runtime/relay), the ranks' process groups send everything through it, and each
rank runs alone in namespaces of its own, with no store and no network.

Under torchrun or srun the processes already exist: call `init_from_env()`.
"""
from __future__ import annotations

import contextlib
import datetime
import faulthandler
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rtp_course.runtime import cgroup, devices, forkserver, netns, output, pidns, quiet, reaper

BACKENDS = ("gloo", "nccl")
# torch logs "Terminating process ... via SIGTERM" for every rank we end; the report says it better.
logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)


class LaunchError(RuntimeError):
    """A launch that could not start or did not finish; the message says why."""


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
    private_network: bool = False   # the ranks on a network of their own, rank 0 the store
    course_env: dict | None = None  # the parent's RTP_COURSE_* now (a forkserver's are stale),
                                    # and the launch's own variables
    cgroup: str = ""                # the launch's cgroup, which the rank joins first (or none)
    relay: list | None = None       # the ranks' ends of the relay's socketpairs (each keeps its own)


def default_backend(world_size: int = 1) -> str:
    """NCCL when every rank can have its own GPU, gloo otherwise (counted without initialising
    CUDA: this process forks ranks)."""
    return "nccl" if devices.gpu_count() >= world_size else "gloo"


def device_for(backend: str, local_rank: int, ranks_on_node: int | None = None) -> torch.device:
    """The rank's device: its GPU under NCCL (mapped onto what this process sees), else the CPU."""
    if backend == "nccl":
        return devices.local_device(local_rank, ranks_on_node)
    return torch.device("cpu")


def validate(world_size, backend: str) -> None:
    if not isinstance(world_size, int) or world_size < 1:
        raise LaunchError(f"world_size must be a positive integer, got {world_size!r}")
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "nccl":
        gpus = devices.gpu_count()
        if world_size > gpus:
            raise LaunchError(f"NCCL needs one GPU per rank: {world_size} rank(s) asked for, "
                              f"{gpus} GPU(s) visible (CUDA_VISIBLE_DEVICES="
                              f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); ask for one GPU "
                              f"per rank (Slurm: --gpus-per-task=1), or run on CPU with gloo")


def _dump_stack_on_sigusr1(rundir: str, rank: int) -> None:
    path = Path(rundir) / f"stack.{rank}.txt"
    fh = open(path, "w")  # kept open for the life of the process
    faulthandler.register(signal.SIGUSR1, file=fh, all_threads=False)


def _quiet_stderr(path: Path) -> None:
    """The rank's stderr (torch's warnings, gloo's C++ log lines, an abort's message) goes to a
    file of the run: what a person reads is the report, which quotes it when a rank crashed.
    At the file-descriptor level, because Jupyter shows its children's fd 2 in the cell."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    quiet.torch_warnings(everywhere=True)


def stderr_tail(rundir: Path, rank: int, lines: int = 4) -> str:
    """The last lines a rank wrote to its stderr (empty if none), without blank lines."""
    try:
        text = (Path(rundir) / f"stderr.{rank}.txt").read_text(errors="replace")
    except OSError:
        return ""
    kept = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


def _drop_helpers() -> None:
    """Close this rank's copies of the launcher's helper channels. multiprocessing hands every
    child the resource tracker's pipe (the tracker, unconfined, unlinks at exit whatever
    shared-memory name it is told was registered) and the forkserver's liveness pipe (a byte
    written there crashes the forkserver). A rank that needs a tracker (shared_memory)
    starts its own, inside its sandbox."""
    from multiprocessing import forkserver as mp_forkserver, resource_tracker
    tracker, server = resource_tracker._resource_tracker, mp_forkserver._forkserver
    for holder, attr in ((tracker, "_fd"), (server, "_forkserver_alive_fd")):
        fd = getattr(holder, attr, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(holder, attr, None)
    tracker._pid = None
    server._forkserver_address = server._forkserver_pid = None


def _detach_from_terminal() -> None:
    """A session of its own, and stdin from /dev/null: the forkserver hands every rank the
    launcher's standard input, which under a terminal is the instructor's; a rank there could
    type into it (ioctl TIOCSTI on fd 0 or /dev/tty), and the shell would run it after the
    grading. Without a controlling terminal no such ioctl is allowed on any descriptor."""
    with contextlib.suppress(OSError):
        os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _worker(local_rank: int, info: WorkerInfo, fn, args) -> None:
    rank = local_rank
    _detach_from_terminal()
    reaper.die_with_parent()
    cgroup.join(info.cgroup)                  # before anything else: what it forks stays in
    link = _own_relay_end(info, rank)
    if link is not None:
        if info.private_network and netns.isolate() & netns.CLONE_NEWPID:   # (one thread)
            pidns.split(close=[link])         # from here on: the rank, pid 2 of its namespace
    elif info.private_network:
        netns.create(info.rundir) if rank == 0 else netns.join(info.rundir)
    _drop_helpers()
    devices.allow_cuda()                      # the forkserver forbade it for itself
    os.environ[reaper.MARK_ENV] = info.mark
    for key in [k for k in os.environ if k.startswith("RTP_COURSE_")]:
        del os.environ[key]
    os.environ.update(info.course_env or {})
    rundir = Path(info.rundir)
    if info.capture:
        output.attach(info.rundir, rank)
        quiet.torch_warnings(everywhere=True)
    elif info.stderr_to_file:
        _quiet_stderr(rundir / f"stderr.{rank}.txt")
    # This rank's temp files go with the run, under a name no other rank can guess (it
    # cannot list the run's directory): a relay rank has no way to find a peer's files.
    private = rundir / f"tmp.{rank}.{secrets.token_hex(8)}"
    private.mkdir()
    os.environ["TMPDIR"] = tempfile.tempdir = str(private)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    _dump_stack_on_sigusr1(info.rundir, rank)
    # Opened now: `fn` may confine this process so that it can no longer open files here.
    result_fh = open(rundir / f"result.{rank}.pt", "wb")
    error_fh = open(rundir / f"error.{rank}.txt", "w")
    if link is not None:
        from rtp_course.runtime.relay import group as relay_group
        relay_group.connect(link, rank)
        store = dist.HashStore()              # nobody else's: torch wants one, the relay needs none
    elif info.private_network:
        store = dist.TCPStore("127.0.0.1", netns.PORT, info.world_size, is_master=rank == 0,
                              wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    else:
        store = dist.TCPStore(info.store_host, info.store_port, info.world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=60))
    global _DEVICE
    _DEVICE = _init_group("relay" if link is not None else info.backend, store, rank,
                          info.world_size, local_rank, info.pg_timeout,
                          ranks_on_node=info.world_size)
    try:
        if info.backend == "gloo" and devices.emulating_nccl():
            from rtp_course.runtime.gpu_placement import nccl_semantics
            with nccl_semantics():            # every tensor of the run watched, as on a GPU
                result = fn(rank, info.world_size, *args)
        else:
            result = fn(rank, info.world_size, *args)
        torch.save(_on_host(result), result_fh)
        result_fh.close()
        if link is None:                      # (relay ranks hold no sockets to each other)
            _leave_together(store, info.world_size,
                            serves_store=info.private_network and rank == 0)
    except BaseException:                     # as text: the parent never unpickles a worker's words
        error_fh.write(traceback.format_exc())
        error_fh.close()
        os._exit(1)
    finally:
        # NCCL: free the communicators before the process ends. Gloo holds only sockets, which
        # the exit closes; its destroy_process_group waits on every group the run made (the
        # checker makes one per check): 0.5 s a process at 2 ranks, 1 s at 4.
        if info.backend == "nccl":
            _destroy_within(10.0)


_DEVICE: torch.device | None = None


def _own_relay_end(info: WorkerInfo, rank: int):
    """This rank's end of its relay socketpair; the other ranks' ends it was handed (every rank
    gets them all) are closed before anything else runs."""
    if info.relay is None:
        return None
    mine = None
    for r, sock in enumerate(info.relay):
        if r == rank:
            mine = sock
        else:
            sock.close()
    info.relay = None
    return mine


def rank_device() -> torch.device:
    """This launched rank's device (its GPU under NCCL, else the CPU)."""
    return _DEVICE if _DEVICE is not None else torch.device("cpu")


def _init_group(backend: str, store, rank: int, world_size: int, local_rank: int,
                timeout: float, ranks_on_node: int | None = None) -> torch.device:
    """init_process_group on the rank's device. Under NCCL the communicator is created now
    (device_id), and so is every later new_group's: a lazy one is built at its group's first
    operation, while the peers already wait in it (a check that holds one rank back then sees
    the others' transfers 'done' before they started), and point-to-point on a lazy group
    builds a 2-rank communicator per pair."""
    device = device_for(backend, local_rank, ranks_on_node)
    kwargs = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout), **kwargs)
    return device


def _destroy_within(seconds: float) -> None:
    """destroy_process_group, given `seconds`: with an unmatched operation still in flight on
    a group (a check that failed half-way) NCCL's destroy blocks for good; the process exit
    frees what it holds then."""
    import threading
    done = threading.Event()

    def destroy():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        done.set()
    threading.Thread(target=destroy, daemon=True).start()
    done.wait(seconds)


def _on_host(result):
    """A rank's return value with every tensor a plain CPU tensor: the caller (a notebook
    plotting it, the checker comparing it) neither initialises CUDA to read a GPU tensor nor
    unpickles a tensor subclass."""
    if isinstance(result, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            t = result.detach().to("cpu")
            return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)
    if isinstance(result, dict):
        return {k: _on_host(v) for k, v in result.items()}
    if isinstance(result, (list, tuple)) and type(result) in (list, tuple):
        return type(result)(_on_host(v) for v in result)
    return result


def _leave_together(store, world_size: int, serves_store: bool = False) -> None:
    """A rank that has finished waits for every peer before it exits: its sockets close with
    it, and a peer may still be in the handshake of a group this rank is done creating
    (new_group), which would fail there with "Connection closed by peer". The rank that
    serves the store leaves last: a peer still waiting for its answer would lose it."""
    forever = datetime.timedelta(days=1)                  # the launch's timeout rules
    if store.add("launcher/finished", 1) == world_size:
        store.set("launcher/all finished", "")
    store.wait(["launcher/all finished"], forever)
    if world_size == 1:
        return
    if serves_store:
        store.wait(["launcher/all left"], forever)
    elif store.add("launcher/left", 1) == world_size - 1:
        store.set("launcher/all left", "")


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
           capture_output: bool = False, relay=None) -> list:
    """Run `fn(rank, world_size, *args)` on `world_size` local processes.

    `fn` must be importable (defined in a module, not a notebook cell: spawn
    pickles it by name). Returns the list of per-rank return values: plain data
    (tensors, numbers, strings, lists, dicts), read without unpickling code,
    unless `results="objects"` (demos that return their own classes). Raises
    RankFailed (with the rank and its traceback) if a rank raises or dies,
    RankHung if ranks are still running after `timeout` seconds. Every process
    is ended before this returns, with whatever they started, and a temporary
    run directory is removed. `on_poll(processes)` is called about every 0.1 s
    while waiting; it may raise to stop the launch (the checker's watchdog).
    `env`: variables set in each rank before its process group starts.
    `capture_output`: each rank's stdout and stderr go to capped files of the run
    (runtime/output.py), never to this process's streams (the checker); otherwise its
    stdout is this process's (a notebook shows it) and its stderr a file of the run.
    `relay`: a started `relay.server.Relay` for `world_size` ranks (gloo only): the ranks
    communicate through it alone, each in namespaces of its own; the caller reads its
    account and stops it.
    """
    backend = backend or default_backend(world_size)
    validate(world_size, backend)
    reaper.ensure_guardian()
    own_dir = rundir is None
    rundir = Path(tempfile.mkdtemp(prefix=reaper.temp_prefix("launch")) if own_dir else rundir)
    rundir.mkdir(parents=True, exist_ok=True)
    with reaper.subreaping():
        return _launch(fn, world_size, args, backend, timeout, rundir, own_dir, on_poll, results,
                       env or {}, capture_output, relay)


def _launch(fn, world_size, args, backend, timeout, rundir: Path, own_dir: bool, on_poll, results,
            env: dict, capture_output: bool, relay=None):
    mark, before = uuid.uuid4().hex, reaper.descendants()
    if relay is not None and (backend != "gloo" or relay.world_size != world_size):
        raise LaunchError(f"a relay serves {relay.world_size} CPU ranks; this launch is "
                          f"{world_size} {backend} ranks")
    group = cgroup.create()
    private = backend == "gloo" and netns.available()
    store = None if private or relay is not None else \
        dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=60))
    info = WorkerInfo("127.0.0.1", store.port if store else 0, world_size, backend, str(rundir),
                      pg_timeout=timeout + 60, mark=mark, cgroup=str(group or ""),
                      capture=capture_output, private_network=private,
                      course_env={**{k: v for k, v in os.environ.items()
                                     if k.startswith("RTP_COURSE_")}, **env},
                      relay=relay.rank_ends() if relay is not None else None)
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
        if relay is not None:
            relay.close_rank_ends()           # a rank's exit now ends its connection
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
    try:
        return torch.load(path, weights_only=(results != "objects"))
    except Exception as e:
        raise RankFailed(rank, f"its result could not be read as plain data ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}); a launched function "
                               f"must return tensors, numbers, strings, lists or dicts") from None


def _first_failure(rundir: Path, processes, reported: int) -> tuple[int, str, int | None]:
    """(rank, traceback or how it died, exit code) of the rank that failed first: its peers
    then fail too ("Connection closed by peer"), and torch reports the lowest failed rank."""
    time.sleep(0.2)  # let the peers' error files land
    found = []
    for r in range(len(processes)):
        path = rundir / f"error.{r}.txt"
        if path.exists() and path.stat().st_size > 0:
            found.append((path.stat().st_mtime, r, path.read_text(errors="replace")))
    original = [f for f in found if not any(m in f[2] for m in _PEER_GONE)] or found
    if original:
        _, rank, trace = min(original)
        return rank, trace.strip(), processes[rank].exitcode
    code = processes[reported].exitcode
    said = stderr_tail(rundir, reported)
    return reported, died_how(code) + (f"; it printed:\n{said}" if said else ""), code


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


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "ended before this operation completed")


# --- already-launched processes: torchrun (RANK/WORLD_SIZE/LOCAL_RANK) or srun (SLURM_*) ---

def env_rank_info(env=os.environ) -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's or Slurm's variables."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    raise LaunchError("no RANK/WORLD_SIZE (torchrun) or SLURM_PROCID/SLURM_NTASKS (srun) in the "
                      "environment: start this program with torchrun or srun, or use launch()")


def _slurm_master(env) -> tuple[str, str]:
    """First host of the allocation and a port derived from the job id (same on every task)."""
    import subprocess
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "localhost"
    try:
        host = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True,
                              text=True, check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        host = nodes.split(",")[0]
    port = 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000
    return host, str(port)


def init_from_env(backend: str | None = None, timeout: float = 600.0) -> tuple[int, int, torch.device]:
    """Join the job's process group; returns (rank, world_size, device). Under srun each task
    may see only its own GPU: the local rank is mapped onto the visible devices."""
    rank, world_size, local_rank = env_rank_info()
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = _slurm_master(os.environ)
    backend = backend or ("nccl" if devices.gpu_count() > 0 else "gloo")
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    try:
        device = device_for(backend, local_rank)
    except RuntimeError as e:
        raise LaunchError(str(e)) from None
    kwargs = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout), **kwargs)
    global _DEVICE
    _DEVICE = device
    return rank, world_size, device


def free_port() -> int:
    """A currently free TCP port (for tools that need a port number up front)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
