"""Which backend a run uses, gloo (CPU) or NCCL (one GPU per rank), and whether this machine
can run it: what the launcher (its own ranks) and torchrun.py (a torchrun or srun job's)
both ask before a process group is made. `LaunchError` says why a run cannot start.
"""
from __future__ import annotations

import os

from rtp_course.runtime import devices

BACKENDS = ("gloo", "nccl")


class LaunchError(RuntimeError):
    """A launch that could not start or did not finish; the message says why."""


def default_backend(world_size: int = 1) -> str:
    """NCCL when every rank can have its own GPU, gloo otherwise (counted without initialising
    CUDA: this process forks ranks)."""
    return "nccl" if devices.gpu_count() >= world_size else "gloo"


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
