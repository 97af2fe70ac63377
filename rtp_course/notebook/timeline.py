"""What each rank did, and when: intervals recorded in a real run, and their picture.

In a worker:

    tl = Timeline()                       # after a barrier, so every rank's t0 is (nearly) the same
    with tl.span("compute", "shard 1"):
        y = x @ w
    handle = tl.rotation(rotation.rotate_async(w))    # "transfer": posted -> completed
    w = tl.wait(handle)                   # "wait": the time this rank sat blocked in wait()
    return tl.intervals                   # plain tuples: they pickle back to the notebook

`recording_rotations(rotation_module, tl)` does the same for code you did not
write (an RTP layer): it patches `rotate_async` of the exercise module so every
rotation it starts is timed, and records the time between two rotations as compute.

The clock is `time.perf_counter()` (CLOCK_MONOTONIC on Linux): one clock for
every process of a machine, so intervals of different ranks line up after each
rank subtracts the t0 it read right after a common barrier.

A transfer's end is the moment a poller thread first sees `is_completed()`
(polled every 0.5 ms; sleeping releases the GIL), so an overlapped transfer
shows its real length, not the moment someone asked for it.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import NamedTuple

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

COLORS = {"compute": "#4C72B0", "transfer": "#DD8452", "wait": "#C44E52"}
LANES = {"compute": 0.55, "wait": 0.55, "transfer": 0.1}      # y offset inside a rank's row
POLL_SECONDS = 0.0005


class Interval(NamedTuple):
    kind: str        # "compute", "transfer" or "wait"
    label: str
    start: float     # seconds since the timeline's t0
    end: float


class Timeline:
    """Intervals of one rank, in seconds since t0 (construction, or `restart()`)."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.intervals: list[Interval] = []
        self._lock = threading.Lock()

    def restart(self) -> None:
        """Forget everything and start the clock again (call it right after a barrier)."""
        self.intervals.clear()
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def add(self, kind: str, label: str, start: float, end: float) -> None:
        """Record an interval given in seconds since t0."""
        with self._lock:
            self.intervals.append(Interval(kind, label, start, end))

    @contextlib.contextmanager
    def span(self, kind: str = "compute", label: str = ""):
        start = self.now()
        try:
            yield
        finally:
            self.add(kind, label, start, self.now())

    def rotation(self, handle, label: str = "", posted: float | None = None):
        """Time an in-flight transfer (anything with is_completed()); returns the handle.

        `posted`: when it was started (default: now). A handle whose
        is_completed() is not implemented is timed until its wait() returns.
        """
        start = self.now() if posted is None else posted
        handle._rtp_timeline = (self, label, start, threading.Event())
        threading.Thread(target=self._poll, args=(handle,), daemon=True).start()
        return handle

    def _poll(self, handle) -> None:
        tl, label, start, done = handle._rtp_timeline
        try:
            while not done.is_set() and not handle.is_completed():
                time.sleep(POLL_SECONDS)
        except Exception:          # e.g. is_completed not implemented: wait() records the end
            return
        if not done.is_set():
            done.set()
            tl.add("transfer", label, start, tl.now())

    def wait(self, handle, label: str = ""):
        """handle.wait(), recording the blocked time as "wait" (and the transfer's end)."""
        start = self.now()
        result = handle.wait()
        end = self.now()
        self.add("wait", label, start, end)
        info = getattr(handle, "_rtp_timeline", None)
        if info is not None and not info[3].is_set():     # the poller had not seen it finish
            info[3].set()
            self.add("transfer", info[1], info[2], end)
        return result

    def finished(self) -> list[Interval]:
        """The intervals, sorted, once pollers have reported (as plain tuples)."""
        time.sleep(4 * POLL_SECONDS)
        with self._lock:
            return sorted(self.intervals, key=lambda i: (i.start, i.kind))


class _TimedHandle:
    """A rotation handle whose wait() records "wait" and the compute since the previous event."""

    def __init__(self, handle, recorder):
        self._handle, self._recorder = handle, recorder

    def is_completed(self):
        return self._handle.is_completed()

    def wait(self):
        rec = self._recorder
        rec.compute_until_now()
        out = rec.timeline.wait(self._handle, rec.label)
        rec.mark = rec.timeline.now()
        return out

    def __getattr__(self, name):
        return getattr(self._handle, name)


class _Recorder:
    def __init__(self, timeline, label):
        self.timeline, self.label, self.mark = timeline, label, timeline.now()

    def compute_until_now(self):
        now = self.timeline.now()
        if now > self.mark:
            self.timeline.add("compute", self.label, self.mark, now)
        self.mark = now


@contextlib.contextmanager
def recording_rotations(rotation_module, timeline: Timeline, label: str = ""):
    """Time every rotation started through `rotation_module.rotate_async` inside the block.

    Everything between two rotation events (a start, a wait returning) counts as
    compute, so wrap only the code whose communication is all rotations (a layer's
    forward or backward): the block starts and ends with a compute mark.
    """
    original = rotation_module.rotate_async
    recorder = _Recorder(timeline, label)

    def timed(*args, **kwargs):
        recorder.compute_until_now()
        posted = timeline.now()
        handle = original(*args, **kwargs)
        recorder.mark = timeline.now()
        return _TimedHandle(timeline.rotation(handle, label, posted=posted), recorder)

    rotation_module.rotate_async = timed
    try:
        yield recorder
    finally:
        rotation_module.rotate_async = original
        recorder.compute_until_now()


# ----------------------------------------------------------------------------- reading it

def busy_time(intervals, kind: str) -> float:
    """Seconds covered by intervals of `kind` (overlaps among them counted once)."""
    spans = sorted((i.start, i.end) for i in intervals if i.kind == kind)
    total, cur_start, cur_end = 0.0, None, None
    for a, b in spans:
        if cur_end is None or a > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    return total + (cur_end - cur_start if cur_end is not None else 0.0)


def overlap_time(intervals) -> float:
    """Seconds during which a transfer was in flight while this rank computed."""
    compute = [(i.start, i.end) for i in intervals if i.kind == "compute"]
    transfer = [(i.start, i.end) for i in intervals if i.kind == "transfer"]
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in compute for c, d in transfer)


def summary(per_rank) -> dict:
    """{"total", "compute", "transfer", "wait", "overlap"} in seconds, the slowest rank's."""
    rows = []
    for intervals in per_rank:
        end = max((i.end for i in intervals), default=0.0)
        start = min((i.start for i in intervals), default=0.0)
        rows.append({"total": end - start, "compute": busy_time(intervals, "compute"),
                     "transfer": busy_time(intervals, "transfer"),
                     "wait": busy_time(intervals, "wait"), "overlap": overlap_time(intervals)})
    return max(rows, key=lambda r: r["total"]) if rows else {}


def plot_timeline(per_rank, ax=None, title: str = "", xmax: float | None = None,
                  unit: float = 1e-3, unit_name: str = "ms"):
    """One row per rank: compute and blocked waits on the upper lane, transfers below.

    `per_rank`: a list (index = rank) of lists of Interval (or equal tuples).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.8 + 0.7 * len(per_rank)))
    for rank, intervals in enumerate(per_rank):
        y = len(per_rank) - 1 - rank
        for iv in map(Interval._make, intervals):
            width = max((iv.end - iv.start) / unit, 1e-9)
            ax.broken_barh([(iv.start / unit, width)], (y + LANES[iv.kind], 0.35),
                           facecolors=COLORS[iv.kind], edgecolor="white", linewidth=0.5,
                           hatch="//" if iv.kind == "wait" else None, alpha=0.9)
    ax.set_yticks([len(per_rank) - 1 - r + 0.5 for r in range(len(per_rank))])
    ax.set_yticklabels([f"rank {r}" for r in range(len(per_rank))])
    ax.set_ylim(0, len(per_rank))
    if xmax is not None:
        ax.set_xlim(0, xmax / unit)
    ax.set_xlabel(f"time ({unit_name})")
    ax.grid(True, axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=11)
    ax.legend(handles=[Patch(facecolor=COLORS["compute"], label="compute"),
                       Patch(facecolor=COLORS["wait"], hatch="//", label="blocked in wait()"),
                       Patch(facecolor=COLORS["transfer"], label="transfer in flight")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9)
    return ax
