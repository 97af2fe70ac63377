"""Which GPUs a process may use, found without initialising CUDA; which one a rank takes.

A process that has initialised CUDA cannot fork: a forked child dies in its first CUDA
call ("CUDA error: initialization error"). The course forks its ranks (from a forkserver,
itself forked from the warm check server's run), so every process on that path must
count GPUs without touching the driver. `torch.cuda.is_available()` initialises it
(cudaGetDeviceCount); `gpu_count()` asks NVML, as torch's own `device_count()` does, and
only where NVML cannot answer does it ask the driver, in a child process.

`forbid_cuda(role)` makes that a rule, not a habit: in a process that forks ranks, a call
that would initialise CUDA raises and names the process, and torch's own availability
questions (`torch.cuda.is_available`, `device_count`: torch 2.14's optimizers ask one in
every step) are answered from `gpu_count()` instead of the driver. It is installed on every
machine, GPU or not, so a CPU test run catches what would break the first GPU run.

Under srun and torchrun each task may see only its own GPUs (`--gpus-per-task=G` binds G
devices to each task, in CUDA_VISIBLE_DEVICES) or all of the node's: `local_device` maps a
local rank onto what is visible.

RTP_COURSE_SHARE_GPU=1 (an explicit opt-in, for scripts/gpu_proof.sh on a one-GPU machine)
lets up to RANKS_PER_SHARED_GPU ranks of a launch share each GPU. NCCL refuses two ranks of
one host on one device, so each rank gets a host id of its own (NCCL_HOSTID) and they talk
over sockets on the loopback, as ranks on different machines would: `shared_gpu_environment`.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import torch

EMULATE = "RTP_COURSE_EMULATE"
SHARE = "RTP_COURSE_SHARE_GPU"
RANKS_PER_SHARED_GPU = 4        # the course's largest world size


class CudaInForkingProcess(RuntimeError):
    """A process that forks ranks was about to initialise CUDA."""


def emulating_nccl() -> bool:
    """RTP_COURSE_EMULATE=nccl: on CPU, enforce what NCCL and CUDA would refuse."""
    return os.environ.get(EMULATE, "").strip().lower() == "nccl"


_COUNT_IN_CHILD = """
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int(0)
    ok = cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0
    print(n.value if ok else 0)
except OSError:
    print(0)
"""


@functools.lru_cache(maxsize=None)
def _count(visible: str | None) -> int:
    if not torch.cuda._is_compiled():          # a CPU build of torch
        return 0
    if torch.cuda.is_initialized():            # nothing left to protect in this process
        return torch.cuda.device_count()
    n = torch.cuda._device_count_nvml()        # NVML: no CUDA context (-1: NVML failed)
    if n >= 0:
        return n
    try:                                        # the driver, in a process of its own
        out = subprocess.run([sys.executable, "-c", _COUNT_IN_CHILD], capture_output=True,
                             text=True, timeout=60).stdout
        return int(out.strip() or 0)
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def physical_gpu_count() -> int:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES applied), without initialising CUDA."""
    return _count(os.environ.get("CUDA_VISIBLE_DEVICES"))


def sharing_gpu() -> bool:
    """RTP_COURSE_SHARE_GPU=1: several ranks of a launch may share one GPU (see the module)."""
    return os.environ.get(SHARE, "").strip() == "1"


def gpu_count() -> int:
    """How many ranks of this node may take a GPU: the visible GPUs, or RANKS_PER_SHARED_GPU
    times as many under RTP_COURSE_SHARE_GPU=1 (what the launcher counts before NCCL)."""
    n = physical_gpu_count()
    return n * RANKS_PER_SHARED_GPU if sharing_gpu() else n


def shared_gpu_environment(rank: int, backend: str) -> dict:
    """The variables a launched rank sets before NCCL starts when ranks share a GPU: its own
    NCCL host id (NCCL refuses two ranks of one host on one device), and sockets over the
    loopback, not the peer-to-peer and shared-memory transports of one host. A variable the
    user set is kept."""
    if backend != "nccl" or not sharing_gpu():
        return {}
    loopback = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                "NCCL_IB_DISABLE": "1"}
    return {"NCCL_HOSTID": f"rank-{rank}",
            **{k: v for k, v in loopback.items() if k not in os.environ}}


def tasks_on_node(env=os.environ) -> int | None:
    """Ranks of this job on this node, from torchrun's or srun's variables (None: unknown).
    Slurm writes them per node as "4(x2),3": 4 on each of the first two nodes, then 3."""
    if env.get("LOCAL_WORLD_SIZE"):
        return int(env["LOCAL_WORLD_SIZE"])
    if env.get("SLURM_NTASKS_PER_NODE"):
        return int(env["SLURM_NTASKS_PER_NODE"])
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not spec:
        return None
    per_node = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            return None
        per_node += [int(m[1])] * int(m[2] or 1)
    node = int(env.get("SLURM_NODEID", 0))
    return per_node[node] if node < len(per_node) else None


def local_device(local_rank: int, ranks_on_node: int | None = None) -> torch.device:
    """The GPU of a rank on this node: its own index when the process sees every GPU of the
    node; its first visible device when it sees GPUs of its own (fewer than the node's ranks:
    srun --gpus-per-task=G binds G devices to each task, or a job that set
    CUDA_VISIBLE_DEVICES per task); under RTP_COURSE_SHARE_GPU=1, the GPUs in turn. Raises
    with what to do when it sees too few. `ranks_on_node` defaults to srun's or torchrun's."""
    n = gpu_count()
    if sharing_gpu() and n >= RANKS_PER_SHARED_GPU:
        return torch.device("cuda", local_rank % (n // RANKS_PER_SHARED_GPU))
    if n == 1:
        return torch.device("cuda", 0)
    ranks_on_node = ranks_on_node or tasks_on_node()
    if local_rank < n and (ranks_on_node is None or ranks_on_node <= n):
        return torch.device("cuda", local_rank)
    if ranks_on_node is not None and ranks_on_node > n >= 1 and os.environ.get("SLURM_GPUS_PER_TASK"):
        return torch.device("cuda", 0)        # this task's own GPUs: the first is its rank's
    raise RuntimeError(
        f"local rank {local_rank} has no GPU of its own: this process sees {n} GPU(s) "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}); ask Slurm "
        f"for one GPU per task (--gpus-per-task=1) or for every GPU of the node")


# --- no CUDA in a process that forks ranks ---

_GUARDED = ("init", "_lazy_init", "set_device", "current_device",
            "synchronize", "mem_get_info", "get_device_properties", "get_device_name")
_ANSWERED = {"is_available": lambda: physical_gpu_count() > 0,
             "device_count": lambda: physical_gpu_count()}
_role: str | None = None


def forbid_cuda(role: str) -> None:
    """From now on, a call that would initialise CUDA in this process raises. `role` says which
    process this is, for the message. Idempotent; the first role is kept."""
    global _role
    if _role is not None:
        return
    _role = role
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"    # torch's own fork-safe availability
    for name in _GUARDED:
        original = getattr(torch.cuda, name, None)
        if original is not None:
            setattr(torch.cuda, name, _refusing(name, original))
    for name, answer in _ANSWERED.items():
        original = getattr(torch.cuda, name)
        safe = functools.wraps(original)(lambda *a, _answer=answer, **k: _answer())
        safe.__rtp_guarded__ = original
        setattr(torch.cuda, name, safe)


def allow_cuda() -> None:
    """Lift forbid_cuda: a rank, forked from a process that forbade CUDA, uses its GPU."""
    global _role
    for name in (*_GUARDED, *_ANSWERED):
        fn = getattr(torch.cuda, name, None)
        original = getattr(fn, "__rtp_guarded__", None)
        if original is not None:
            setattr(torch.cuda, name, original)
    _role = None


def cuda_forbidden() -> str | None:
    """The role given to forbid_cuda, or None where CUDA is allowed."""
    return _role


def _refusing(name, original):
    @functools.wraps(original)
    def refuse(*args, **kwargs):
        raise CudaInForkingProcess(
            f"torch.cuda.{name}() was called in {_role}, which forks the ranks: a process that "
            f"initialised CUDA cannot fork (its children die in their first CUDA call); count "
            f"GPUs with rtp_course.runtime.devices.gpu_count(), and use CUDA only in a rank")
    refuse.__rtp_guarded__ = original
    return refuse
