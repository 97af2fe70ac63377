"""Reading and drawing what ranks did and when (recorded by `rtp_course.notebook.trace`).

* ``summary(per_rank)``: the slowest rank's total, compute, transfer and wait time, and how
  much of the transfers' time was hidden behind compute (the overlap).
* ``plot_timeline(per_rank)``: one row per rank, one lane per kind of region: compute,
  blocked in wait(), weight rotations in flight, accumulator rotations in flight (or, for
  FSDP's collectives, all-gathers and reduce-scatters in flight).
"""
from __future__ import annotations

import os
from typing import NamedTuple


KINDS = ("compute", "wait", "weight rotation", "accumulator rotation", "all-gather",
         "reduce-scatter")
COLORS = {"compute": "#4C72B0", "wait": "#C44E52", "weight rotation": "#DD8452",
          "accumulator rotation": "#55A868", "all-gather": "#DD8452", "reduce-scatter": "#55A868"}
TRANSFERS = ("weight rotation", "accumulator rotation", "all-gather", "reduce-scatter")
ROTATIONS = KINDS[:4]            # the lanes of a run that only rotates (notebooks 05, 06)
LANE_HEIGHT = 0.2


class Interval(NamedTuple):
    kind: str        # one of KINDS
    label: str
    start: float     # seconds since the run's time 0
    end: float


def _union(spans):
    """Sorted, disjoint [start, end] covering the same time as `spans`."""
    merged = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def busy_time(intervals, kind: str) -> float:
    """Seconds covered by intervals of `kind` (overlaps among them counted once)."""
    return sum(b - a for a, b in _union((i.start, i.end) for i in intervals if i.kind == kind))


def overlap_time(intervals) -> float:
    """Seconds during which a transfer was in flight while this rank computed."""
    compute = _union((i.start, i.end) for i in intervals if i.kind == "compute")
    transfer = _union((i.start, i.end) for i in intervals if i.kind in TRANSFERS)
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in compute for c, d in transfer)


def summary(per_rank) -> dict:
    """{"total", "compute", "transfer", "wait", "overlap", "hidden"} of the slowest rank:
    seconds, and "hidden" the fraction of transfer time spent under compute."""
    rows = []
    for intervals in per_rank:
        intervals = [Interval._make(i) for i in intervals]
        end = max((i.end for i in intervals), default=0.0)
        start = min((i.start for i in intervals), default=0.0)
        transfer = sum(b - a for a, b in _union((i.start, i.end) for i in intervals
                                                if i.kind in TRANSFERS))
        overlap = overlap_time(intervals)
        rows.append({"total": end - start, "compute": busy_time(intervals, "compute"),
                     "transfer": transfer, "wait": busy_time(intervals, "wait"),
                     "overlap": overlap, "hidden": overlap / transfer if transfer else 0.0})
    return max(rows, key=lambda r: r["total"]) if rows else {}


def overlap_verdict(stats: dict, ranks: int) -> str:
    """One honest sentence about the overlap a run showed."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    line = (f"of the {1e3 * stats['total']:.1f} ms (the slowest rank's), transfers were in "
            f"flight {1e3 * stats['transfer']:.1f} ms, and the rank was computing during "
            f"{100 * stats['hidden']:.0f}% of those ({1e3 * stats['overlap']:.1f} ms)")
    if stats["hidden"] < 0.5 and cores < 2 * ranks:
        line += (f"; little is hidden here, and this machine cannot do better: {cores} cores for "
                 f"{ranks} ranks, whose transfer threads compete with their compute for the same "
                 f"cores (on GPUs, NCCL moves data on its own stream and engines)")
    return line


def lanes(per_rank) -> list:
    """The kinds drawn, top to bottom: ROTATIONS, or, where collectives appear, compute, wait
    and the kinds of transfer present."""
    present = {Interval._make(i).kind for intervals in per_rank for i in intervals}
    if not present - set(ROTATIONS):
        return list(ROTATIONS)
    return ["compute", "wait"] + [k for k in TRANSFERS if k in present]


def plot_timeline(per_rank, ax=None, title: str = "", xmax: float | None = None,
                  unit: float = 1e-3, unit_name: str = "ms", names: dict | None = None):
    """One row per rank, one lane per kind (lanes(), top to bottom).

    `per_rank`: a list (index = rank) of lists of Interval (or equal tuples). `names`: the
    legend's words for some kinds (in ring attention a "weight rotation" carries keys and
    values)."""
    import matplotlib.pyplot as plt                 # here: ranks record without matplotlib
    from matplotlib.patches import Patch
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.8 + 1.0 * len(per_rank)))
    n, kinds = len(per_rank), lanes(per_rank)
    for rank, intervals in enumerate(per_rank):
        y = n - 1 - rank
        for iv in map(Interval._make, intervals):
            lane = kinds.index(iv.kind) if iv.kind in kinds else 0
            width = max((iv.end - iv.start) / unit, 1e-9)
            ax.broken_barh([(iv.start / unit, width)], (y + 0.85 - (lane + 1) * LANE_HEIGHT, 0.8 * LANE_HEIGHT),
                           facecolors=COLORS.get(iv.kind, "#888888"), edgecolor="white",
                           linewidth=0.5, hatch="//" if iv.kind == "wait" else None, alpha=0.9)
    ax.set_yticks([n - 1 - r + 0.45 for r in range(n)])
    ax.set_yticklabels([f"rank {r}" for r in range(n)])
    ax.set_ylim(-0.05, n)
    if xmax is not None:
        ax.set_xlim(0, xmax / unit)
    ax.set_xlabel(f"time ({unit_name})")
    ax.grid(True, axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=11)
    names = {"wait": "blocked in wait()", "weight rotation": "weight rotation in flight",
             "accumulator rotation": "accumulator rotation in flight",
             "all-gather": "all-gather in flight", "reduce-scatter": "reduce-scatter in flight",
             **(names or {})}
    ax.legend(handles=[Patch(facecolor=COLORS[k], hatch="//" if k == "wait" else None,
                             label=names.get(k, k)) for k in kinds],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9)
    return ax


def plot_phases(out, ranks: int, names: dict | None = None) -> None:
    """A demo's forward and backward timelines side by side (`out`: per rank, {"forward":
    intervals, "backward": intervals}), each from its own first event, with what overlapped;
    `names`: plot_timeline's legend words."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 2.6), gridspec_kw=dict(width_ratios=[1, 2]))
    for ax, phase in zip(axes, ("forward", "backward")):
        per_rank = [res[phase] for res in out]
        start = min(i.start for intervals in per_rank for i in intervals)
        per_rank = [[i._replace(start=i.start - start, end=i.end - start) for i in intervals]
                    for intervals in per_rank]
        stats = summary(per_rank)
        plot_timeline(per_rank, ax=ax, title=f"{phase}: {1e3 * stats['total']:.1f} ms",
                      names=names)
        if phase == "forward":
            ax.get_legend().remove()
        print(f"{phase}: {overlap_verdict(stats, ranks)}")
    fig.tight_layout()
    plt.show()
