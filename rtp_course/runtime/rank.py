"""A launched rank's side of launcher.launch: from the forkserver's fork to its result.

`_worker` is what each launched process runs: it leaves the grader's terminal, dies with
its parent, joins the launch's cgroup and (grading) namespaces, joins the process group on
its device, runs the launched function under NCCL's rules on gloo, and writes its result
(or its traceback, as text) for the parent. Nothing here runs in the parent.
"""
from __future__ import annotations

import contextlib
import datetime
import faulthandler
import os
import secrets
import signal
import tempfile
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from rtp_course.runtime import cgroup, devices, output, quiet, reaper

_DEVICE: torch.device | None = None
_CHANNEL = None


def device_for(backend: str, local_rank: int, ranks_on_node: int | None = None) -> torch.device:
    """The rank's device: its GPU under NCCL (mapped onto what this process sees), else the CPU."""
    if backend == "nccl":
        return devices.local_device(local_rank, ranks_on_node)
    return torch.device("cpu")


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


def _worker(local_rank: int, info, fn, args) -> None:
    rank = local_rank
    _detach_from_terminal()
    reaper.die_with_parent()
    cgroup.join(info.cgroup)                  # before anything else: what it forks stays in
    global _CHANNEL
    _CHANNEL = _own_channel(info, rank)
    # (one thread still: namespaces are entered here, or never)
    store_port = info.isolation.enter(rank, info, keep=[_CHANNEL]) if info.isolation else None
    _drop_helpers()
    devices.allow_cuda()                      # the forkserver forbade it for itself
    os.environ[reaper.MARK_ENV] = info.mark
    for key in [k for k in os.environ if k.startswith("RTP_COURSE_")]:
        del os.environ[key]
    os.environ.update(info.course_env or {})
    os.environ.update(devices.shared_gpu_environment(rank, info.backend))  # RTP_COURSE_SHARE_GPU
    rundir = Path(info.rundir)
    if info.capture:
        output.attach(info.rundir, rank)
        quiet.torch_warnings(everywhere=True)
    elif info.stderr_to_file:
        _quiet_stderr(rundir / f"stderr.{rank}.txt")
    # This rank's temp files go with the run, under a name no other rank can guess.
    private = rundir / f"tmp.{rank}.{secrets.token_hex(8)}"
    private.mkdir()
    os.environ["TMPDIR"] = tempfile.tempdir = str(private)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    _dump_stack_on_sigusr1(info.rundir, rank)
    # Opened now: `fn` may confine this process so that it can no longer open files here.
    result_fh = open(rundir / f"result.{rank}.pt", "wb")
    error_fh = open(rundir / f"error.{rank}.txt", "w")
    if store_port is not None:                # the launch's private network
        store = dist.TCPStore("127.0.0.1", store_port, info.world_size, is_master=False,
                              wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    else:
        store = dist.TCPStore(info.store_host, info.store_port, info.world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=60))
    global _DEVICE
    _DEVICE = _init_group(info.backend, store, rank, info.world_size, local_rank,
                          info.pg_timeout, ranks_on_node=info.world_size)
    try:
        if info.backend == "gloo" and info.nccl_rules:
            # one semantics on CPU and GPU: gloo calls behave as NCCL's where the two differ
            # (runtime/nccl); RTP_COURSE_EMULATE=nccl also watches every tensor's device
            from rtp_course.runtime.gpu_placement import nccl_semantics
            with nccl_semantics(every_tensor=devices.emulating_nccl()):
                result = fn(rank, info.world_size, *args)
        else:
            result = fn(rank, info.world_size, *args)
        torch.save(_on_host(result), result_fh)
        result_fh.close()
        _leave_together(store, info.world_size, serves_store=store_port is not None and rank == 0)
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


def _own_channel(info, rank: int):
    """This rank's socket to the parent; the other ranks' sockets it was handed (every rank
    gets them all) are closed before anything else runs."""
    if info.channels is None:
        return None
    mine = None
    for r, sock in enumerate(info.channels):
        if r == rank:
            mine = sock
        else:
            sock.close()
    info.channels = None
    return mine


def own_channel():
    """In a launched rank: its socket to the parent (launch's `channels`), or None."""
    return _CHANNEL


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
