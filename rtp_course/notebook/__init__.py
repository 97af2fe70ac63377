"""What the notebooks use: `demos/` (worker functions they launch on several processes),
`plots`, `diagrams`, `timeline` (figures) and `trace` (torch.profiler recordings of a run)."""


def where_checks_run() -> str:
    """What a notebook's `check(...)` cell runs on this machine, in one sentence: NCCL on its
    GPUs when it has one for every rank of the largest world size, else CPU processes with
    gloo (the checker's default backend, one for the whole run)."""
    from rtp_course.course import COURSE
    from rtp_course.runtime import devices
    from rtp_course.runtime.launcher import default_backend
    largest = max(n for ex in COURSE for n in ex.world_sizes)
    gpus = devices.physical_gpu_count()
    if default_backend(largest) == "nccl":
        return (f"check() runs here on this machine's GPUs with NCCL, one GPU per rank "
                f"({gpus} visible)")
    return (f"check() runs here on CPU processes with gloo, NCCL's rules applied (NCCL needs a "
            f"GPU per rank, {largest} for the largest world size; this machine has {gpus}): "
            f"the verdict a GPU run gives")
