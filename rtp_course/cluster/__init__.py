"""Slurm: submit a checker job or a benchmark (`submit_check`, `submit_bench`), follow it (`Job`)."""
from rtp_course.cluster.job import Job
from rtp_course.cluster.slurm import check_on_slurm, slurm_available, submit_bench, submit_check

__all__ = ["Job", "check_on_slurm", "slurm_available", "submit_bench", "submit_check"]
