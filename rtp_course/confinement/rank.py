"""A rank confined before the code under test runs (grading only): what it may see and do.

Called by worker.run_checks once the checks are loaded and every file the rank writes is
open, before the first line of code under test: from then on the rank (and every process
it starts) keeps the environment, limits and confinement set here, and cannot lift them.
"""
from __future__ import annotations

import ctypes
import gc
import os
import resource
import tempfile
from pathlib import Path

import rtp_course
from rtp_course.confinement import identity, landlock, launch, netns, reveal, scratch, seccomp
from rtp_course.runtime import forkserver

FILE_CAP_MB = 512     # no file a rank writes (its results, its stderr, its own) grows past this
DISK_CAP_MB = 512     # what a rank's private directory holds in all (its tmpfs)
MEMORY_CAP_MB = 4096  # a CPU rank's memory (its heap and anonymous mappings); checks use ~0.5 GB
TASK_CAP = 4096       # a launch's processes and threads, all its ranks together: gloo keeps two
#                       threads a rank for every check's group, so a run of every hidden check
#                       at world size 4 holds about 1400 at its end
MAPPED_SLACK_MB = 2048  # address space beyond the memory cap: libraries, stacks, malloc's arenas
FILES_CAP = 4096      # a rank's open descriptors (a rank holds about twenty)
KEPT_ENV = ("RTP_COURSE_EMULATE", "RTP_COURSE_IMPL", "MPLCONFIGDIR")
_PR_SET_NO_NEW_PRIVS, _CAPABILITY_V3 = 38, 0x20080522


def confine(rank: int, job: dict, impl_dir: str) -> str:
    """Confine this rank; returns the report's line on how."""
    private = Path(tempfile.gettempdir())       # the launcher made it: rundir/tmp.<rank>.<secret>
    os.environ["HOME"] = os.environ["MPLCONFIGDIR"] = str(private)
    tasks = int(os.environ.get("RTP_COURSE_RANK_TASKS", 0)) or TASK_CAP    # (before the scrub)
    _scrub_environment()
    gpu = job["backend"] == "nccl"
    package = Path(rtp_course.__file__).resolve().parent
    # The checks' own files were loaded before this: the code under test cannot load them
    # again (a class loaded afresh would have its parent side back). The hidden checks and
    # the reference (unless it is the code under test) are outside what is granted: the
    # parent names them in the job (job["closed"], course/material.py), as only it knows them.
    closed = [package / "checker" / "public",
              *(Path(d) for d in job.get("closed", ())
                if Path(d).resolve() != Path(impl_dir).resolve())]
    read = [str(package), impl_dir]
    uid = launch.ENTERED["uid"]                 # a root grader's: the uid to drop to
    mounts = reveal.own_mounts()
    scratched = mounts and scratch.mount_private(
        str(private), int(job.get("disk_cap_mb") or DISK_CAP_MB), owner=uid)
    who = _unprivileged(uid, private, scratched, mounts,
                        [*landlock.python_dirs(), *read,
                         *landlock.library_dirs(avoid=[*closed, private])])
    counted = bool(netns.MADE[0] & netns.CLONE_NEWUSER) or who.startswith("as uid")
    _cap_resources(job, tasks if counted else None)
    # NCCL's shared-memory transport creates its segments in /dev/shm; gloo needs none of it.
    write = [str(private)] + (["/dev/shm"] if gpu else [])
    done = landlock.confine(read=read, write=write, unreadable=closed,
                            devices=landlock.gpu_devices() if gpu else (), other_processes=gpu,
                            rendezvous=gpu, tcp=True, scope_sockets=not gpu)
    filtered = seccomp.install(gpu) if no_new_privs() else "no seccomp filter: no_new_privs"
    no_capabilities()
    if done.active and done.abi < landlock.TSYNC_ABI and not gpu:
        _world_group_again()
    how = [f"Landlock ABI {done.abi}" if done.active else f"no Landlock: {done.reason}",
           filtered or "seccomp" + (" (GPU's)" if gpu else ""), who]
    return ("confined (" if done.active else "unconfined: ") + "; ".join(filter(None, how)) \
        + (")" if done.active else "")


def _unprivileged(uid, private: Path, scratched: bool, mounts: bool, needed) -> str:
    """Under a root grader, this rank as `uid` from now on (identity.py), the trees it needs
    shown to it (reveal.py); the report's words on it ('' where the grader is not root)."""
    if uid is None:
        return ""
    if not scratched:
        os.chown(private, uid, uid)             # (root-owned: the launcher made it)
    covers, why = identity.plan([*needed, private], uid)
    if not why and covers and not mounts:
        why = f"no mount namespace to show {', '.join(map(str, covers))}'s trees to uid {uid} in"
    try:
        if not why:
            reveal.reveal(covers)
            identity.drop(uid)
    except OSError as e:
        why = f"{e}"
    return f"not unprivileged: {why}" if why else f"as uid {uid}"


def _world_group_again() -> None:
    """gloo's world group, made again now: Landlock before ABI 8 confines the thread that
    asks and the threads it starts later, and the world group's two worker threads, started
    before, run its futures' callbacks (`work.get_future().then(f)` runs f there, free to
    read the hidden checks). Made again, under a store prefix of its own (its first keys
    are still there), its threads are confined; the old ones end with the old group. The
    checks' groups are all made after this. About 40 ms a rank, once a launch."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    store, rank, world = c10d._get_default_store(), dist.get_rank(), dist.get_world_size()
    try:
        timeout = c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError):
        timeout = None
    dist.destroy_process_group()
    gc.collect()                              # (the old group, and its threads, go now)
    dist.init_process_group("gloo", store=dist.PrefixStore("confined/", store), rank=rank,
                            world_size=world, **({"timeout": timeout} if timeout else {}))


def no_new_privs() -> bool:
    """Set (Landlock set it already, where the kernel has Landlock): what seccomp needs."""
    return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


def no_capabilities() -> None:
    """None left in the launch's user namespace (its maker and joiners hold them all): the
    code under test needs none, and no_new_privs keeps an exec from regaining any."""
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_V3, 0)
    ctypes.CDLL(None, use_errno=True).capset(header, (ctypes.c_uint32 * 6)())


def _scrub_environment() -> None:
    """What the code under test may see of the environment: the rank environment (the
    forkserver's, with nothing of the grader's) and the course's own run settings."""
    for key in [k for k in os.environ if k not in forkserver.rank_environment(os.environ)
                and k not in KEPT_ENV]:
        del os.environ[key]


def _cap_resources(job: dict, tasks: int | None) -> None:
    """Hard limits, set before the code under test runs (it cannot raise them again), named in
    the report when reached (diagnosis.py, launcher.died_how).

    RLIMIT_FSIZE: a write past the file cap fails ("File too large"), or kills with SIGXFSZ.
    RLIMIT_DATA (CPU ranks): an allocation past the memory cap fails in torch's allocator
    ("can't allocate memory"), so one rank cannot take the machine's memory; RLIMIT_AS,
    MAPPED_SLACK_MB above it, caps shared mappings, which RLIMIT_DATA does not count. Not on
    a GPU rank: the CUDA driver maps host memory of its own. A rank's private directory is a
    tmpfs of DISK_CAP_MB where it has a mount namespace (scratch.py). RLIMIT_NPROC: a fork
    bomb stops at `tasks` (TASK_CAP, or RTP_COURSE_RANK_TASKS), counted per uid in the
    launch's user namespace or for the launch's own uid (None where neither: the count
    would take in the grader's other processes). The kernel exempts root from it: a root
    grader's ranks drop to a uid of their own (identity.py)."""
    caps = [(resource.RLIMIT_FSIZE, int(job.get("file_cap_mb") or FILE_CAP_MB))]
    if job.get("backend") != "nccl":
        memory = int(job.get("memory_cap_mb") or MEMORY_CAP_MB)
        caps += [(resource.RLIMIT_DATA, memory), (resource.RLIMIT_AS, memory + MAPPED_SLACK_MB)]
    # no core file: a crash would write one where the rank's sandbox lets it write nothing
    limits = [(which, mb << 20) for which, mb in caps] + [(resource.RLIMIT_CORE, 0)]
    if tasks is not None:
        limits += [(resource.RLIMIT_NPROC, tasks), (resource.RLIMIT_NOFILE, FILES_CAP)]
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
