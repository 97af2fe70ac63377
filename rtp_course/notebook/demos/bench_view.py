"""Notebook 07: reading `rtp-course bench` results, and setting them next to the RTP paper's.

* ``read_rows``: bench.csv as dicts with numbers.
* ``rank0``: rank 0's row per strategy, for strategies that ran.
* ``at_world_size``: what the measured categories become on more ranks, by each strategy's rule
  (sharded states / N; FSDP's gathered unit fixed; RTP's in-flight shards / N).
* ``relative_to_ddp``: per-rank totals as a fraction of DDP's.
Nothing here runs the benchmark; rtp_course.training.bench does.
"""
import csv

from rtp_course.training.bench import CATEGORIES, PAPER_GB

SHARDED = {"fsdp", "tp", "rtp"}                   # parameters, gradients, optimizer / N
COMMUNICATION_SHARDED = {"rtp"}                   # in-flight buffers are shards: / N
TEXT_COLUMNS = ("strategy", "model", "device", "dtype", "status")


def read_rows(path) -> list[dict]:
    """bench.csv rows; numeric columns as numbers (empty cells as None)."""
    rows = []
    with open(path) as fh:
        for row in csv.DictReader(fh):
            for key, value in row.items():
                if key not in TEXT_COLUMNS and value != "":
                    row[key] = float(value) if "." in value or "e" in value else int(value)
                elif value == "":
                    row[key] = None
            rows.append(row)
    return rows


def rank0(rows) -> dict:
    """{strategy: rank 0's row} for the strategies whose status is ok."""
    return {r["strategy"]: r for r in rows if r["rank"] == 0 and r["status"] == "ok"}


def at_world_size(row, measured_on: int, world_size: int) -> dict:
    """`row`'s categories rescaled from `measured_on` ranks to `world_size` ranks.

    Activations and buffers are one rank's own batch's: unchanged. Not meant for TP, whose
    ranks all run the global batch (N slices) and keep some parameters replicated.
    """
    scale = measured_on / world_size
    out = {c: row[c] for c in CATEGORIES}
    if row["strategy"] in SHARDED:
        for c in ("parameters", "gradients", "optimizer"):
            out[c] = row[c] * scale
    if row["strategy"] in COMMUNICATION_SHARDED:
        out["communication"] = row["communication"] * scale
    out["total"] = sum(out[c] for c in CATEGORIES)
    return out


def relative_to_ddp(totals: dict) -> dict:
    """{strategy: total / DDP's total} (DDP must be present)."""
    return {s: t / totals["ddp"] for s, t in totals.items()}


def paper_relative() -> dict:
    """The paper's peak memory per GPU (8 GPUs, 340M parameters) as a fraction of DDP's."""
    return {s: gb / PAPER_GB["ddp"] for s, gb in PAPER_GB.items()}
