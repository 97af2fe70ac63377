"""What a rank did, and when, recorded by torch.profiler in a real run.

In a worker:

    with Trace() as tr:                    # starts torch.profiler on this rank
        dist.barrier(); tr.restart()       # every rank's time 0 at (nearly) the same moment
        with tr.span("compute", "shard 1"):
            y = x @ w
        handle = tr.rotation(rotation.rotate_async(w))        # "weight rotation": posted -> completed
        w = tr.wait(handle)                # "wait": the time this rank sat blocked in wait()
    return tr.intervals(), tr.events()     # plain data: they travel back to the notebook

Compute and waits are `record_function` regions named `rtp/<kind>/<label>`, so
they are in the profiler's trace beside every aten op. A transfer runs in
gloo's (or NCCL's) own thread, which the profiler does not follow from a
`record_function`: a poller thread sees the moment `is_completed()` turns true
(polled every 0.5 ms), and the transfer is added to the trace as a region of
its own track, on the profiler's clock (aligned through a marker region).
`write_trace` merges the ranks' events into one Chrome trace file, which
Perfetto (ui.perfetto.dev) or chrome://tracing opens: one process per rank.

`recording_rotations(rotation_module, tr)` does the same for code you did not
write (an RTP layer): every rotation it starts through `rotate_async` is
timed, and the time between two rotation events is a compute region.
`recording_collectives(tr)` does it for the all-gathers and reduce-scatters that code makes
through torch.distributed (your FSDP): an async one is in flight until it completes, a
blocking one is a wait region.

On a GPU the host only queues work: a region that ended when the host moved on would hold
kernel launches, not kernels, and NCCL's wait() returns at once (it makes the compute stream
wait for the transfer's stream). So where the rank uses CUDA, every region ends by
synchronizing the current stream: a compute region lasts until its kernels are done, and a
wait region until the transfer is, as long as the GPU would stall for it. The host then
queues no further work ahead of the GPU, which a real training loop would: the regions are
the GPU's times, the total a little longer than the loop's without the profiler.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from rtp_course.notebook.timeline import KINDS, Interval

POLL_SECONDS = 0.0005
PREFIX = "rtp/"
CLOCK_MARKS = 5


def _offset_us(events, clocks) -> float:
    """Profiler time minus perf_counter time, in microseconds: mark i's perf_counter reading
    lies within its profiled region, so the middle of the shortest region is the best match."""
    marks = {e["name"]: e for e in events if str(e.get("name", "")).startswith(PREFIX + "clock ")
             and e.get("ph") == "X"}
    found = [(marks[f"{PREFIX}clock {i}"], c) for i, c in enumerate(clocks)
             if f"{PREFIX}clock {i}" in marks]
    if not found:
        return 0.0
    mark, clock = min(found, key=lambda m: m[0].get("dur", 0.0))
    return mark["ts"] + mark.get("dur", 0.0) / 2 - clock * 1e6


def _synchronize() -> None:
    torch.cuda.current_stream().synchronize()


class Trace:
    """One rank's profiled run; intervals in seconds since `restart()`. `synchronize`: end
    each region once the GPU is done (default: where this process has initialised CUDA)."""

    def __init__(self, synchronize: bool | None = None):
        self._synchronize = synchronize
        self.t0 = time.perf_counter()
        self._transfers: list[tuple[str, str, float, float]] = []   # perf_counter seconds
        self._lock = threading.Lock()
        self._prof = None
        self._events: list[dict] = []
        self._pending: dict[int, tuple] = {}   # id(handle) -> (kind, label, start, done event)

    def __enter__(self):
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_initialized() else [])
        self._prof = profile(activities=activities)
        self._prof.__enter__()
        # The profiler's clock against perf_counter (transfers are timed with the latter):
        # several marks, of which the shortest is kept. The first op the profiler records
        # can take milliseconds to set up, between the mark's start and the clock read in
        # it, which would shift every compute region against the transfers.
        self._clocks = []
        for i in range(CLOCK_MARKS):
            with record_function(f"{PREFIX}clock {i}"):
                self._clocks.append(time.perf_counter())
        return self

    def __exit__(self, *exc):
        time.sleep(4 * POLL_SECONDS)                 # let pollers report
        self._prof.__exit__(*exc)
        with tempfile.TemporaryDirectory() as d:     # the only export torch offers is to a file
            path = os.path.join(d, "trace.json")
            self._prof.export_chrome_trace(path)
            events = json.loads(Path(path).read_text()).get("traceEvents", [])
        offset_us = _offset_us(events, self._clocks)
        pid = next((e.get("pid") for e in events if e.get("ph") == "X"), 0)
        for kind, label, start, end in self._transfers:
            events.append({"name": f"{PREFIX}{kind}/{label}", "ph": "X", "cat": "rtp transfer",
                           "ts": start * 1e6 + offset_us, "dur": (end - start) * 1e6,
                           "pid": pid, "tid": f"{kind} (in flight)"})
        self._offset_us, self._events = offset_us, events
        return False

    def restart(self) -> None:
        """Time 0 is now (call it right after a barrier)."""
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    @contextlib.contextmanager
    def span(self, kind: str = "compute", label: str = ""):
        """A region; on a GPU it ends when the work queued in it is done."""
        with record_function(f"{PREFIX}{kind}/{label}"):
            yield
            self._device_done()

    def _device_done(self) -> None:
        sync = torch.cuda.is_initialized() if self._synchronize is None else self._synchronize
        if sync:
            _synchronize()

    def rotation(self, handle, label: str = "", kind: str = "weight rotation",
                 posted: float | None = None):
        """Time an in-flight transfer (anything with is_completed()); returns the handle.
        `posted`: when it was started, in perf_counter seconds (default: now)."""
        start = time.perf_counter() if posted is None else posted
        self._pending[id(handle)] = (kind, label, start, threading.Event())
        threading.Thread(target=self._poll, args=(handle,), daemon=True).start()
        return handle

    def _poll(self, handle) -> None:
        done = self._pending[id(handle)][3]
        try:
            while not done.is_set() and not handle.is_completed():
                time.sleep(POLL_SECONDS)
        except Exception:          # e.g. is_completed not implemented: wait() records the end
            return
        self._finish(handle, time.perf_counter())

    def _finish(self, handle, end) -> None:
        with self._lock:
            kind, label, start, done = self._pending.get(id(handle), (None,) * 4)
            if done is not None and not done.is_set():
                done.set()
                self._transfers.append((kind, label, start, end))

    def wait(self, handle, label: str = ""):
        """handle.wait() inside a "wait" region (and the transfer's end, if not seen yet); on a
        GPU the region lasts until the transfer is done (span)."""
        with self.span("wait", label):
            result = handle.wait()
        self._finish(handle, time.perf_counter())
        return result

    def intervals(self) -> list[Interval]:
        """Our regions, from the trace, in seconds since restart(), sorted (after the block)."""
        out = []
        for e in self._events:
            name = str(e.get("name", ""))
            if e.get("ph") != "X" or not name.startswith(PREFIX) or name.count("/") < 2:
                continue
            kind, label = name[len(PREFIX):].split("/", 1)
            if kind in KINDS:
                start = (e["ts"] - self._offset_us) / 1e6 - self.t0
                out.append(Interval(kind, label, start, start + e["dur"] / 1e6))
        return sorted(out, key=lambda i: (i.start, i.kind))

    def events(self) -> list[dict]:
        """The whole trace of this rank: every profiled op, our regions and the transfers."""
        return self._events


def write_trace(per_rank_events, path) -> Path:
    """One Chrome trace file with every rank's events (rank r as process r), for Perfetto."""
    merged = []
    for rank, events in enumerate(per_rank_events):
        merged.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
        merged += [{**e, "pid": rank} for e in events if e.get("ph") != "M"]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": merged, "displayTimeUnit": "ms"}))
    return path


class _Recorder:
    """Compute regions between rotation events, opened and closed by hand."""

    def __init__(self, trace, label):
        self.trace, self.label, self.region = trace, label, None

    def compute_from_now(self):
        self.region = self.trace.span("compute", self.label)
        self.region.__enter__()

    def compute_until_now(self):
        if self.region is not None:
            self.region.__exit__(None, None, None)
            self.region = None


class _TimedHandle:
    def __init__(self, handle, recorder):
        self._handle, self._recorder = handle, recorder

    def is_completed(self):
        return self._handle.is_completed()

    def wait(self):
        rec = self._recorder
        rec.compute_until_now()
        out = rec.trace.wait(self._handle, rec.label)
        rec.compute_from_now()
        return out

    def __getattr__(self, name):
        return getattr(self._handle, name)


@contextlib.contextmanager
def recording_rotations(rotation_module, trace: Trace, label: str = "", kind_of=None):
    """Time every rotation started through `rotation_module.rotate_async` inside the block.

    Everything between two rotation events (a start, a wait returning) is a compute region,
    so wrap only code whose communication is all rotations (a layer's forward or backward).
    `kind_of(tensor)` names what a rotation carries ("weight rotation" by default)."""
    original = rotation_module.rotate_async
    recorder = _Recorder(trace, label)

    def timed(tensor, *args, **kwargs):
        recorder.compute_until_now()
        posted = time.perf_counter()
        handle = original(tensor, *args, **kwargs)
        kind = kind_of(tensor) if kind_of else "weight rotation"
        timed_handle = _TimedHandle(trace.rotation(handle, label, kind, posted=posted), recorder)
        recorder.compute_from_now()
        return timed_handle

    rotation_module.rotate_async = timed
    recorder.compute_from_now()
    try:
        yield recorder
    finally:
        rotation_module.rotate_async = original
        recorder.compute_until_now()


COLLECTIVES = {"all_gather_into_tensor": "all-gather", "all_gather": "all-gather",
               "reduce_scatter_tensor": "reduce-scatter", "reduce_scatter": "reduce-scatter"}


@contextlib.contextmanager
def recording_collectives(trace: Trace, label: str = ""):
    """Time every all-gather and reduce-scatter made through torch.distributed inside the block
    (looked up on `torch.distributed` when called, as `dist.all_gather_into_tensor(...)` is).

    One started with async_op=True is in flight from its call until it completes, and its
    wait() is a wait region; a blocking one is a wait region and a transfer of its own. The
    time between two such events is a compute region: wrap only code whose communication
    is all collectives of these kinds (an FSDP forward or backward)."""
    import torch.distributed as dist
    recorder = _Recorder(trace, label)
    saved = {name: getattr(dist, name) for name in COLLECTIVES}

    def timed(name, fn):
        kind = COLLECTIVES[name]

        def call(*args, **kwargs):
            recorder.compute_until_now()
            posted = time.perf_counter()
            if kwargs.get("async_op"):
                out = _TimedHandle(trace.rotation(fn(*args, **kwargs), label, kind, posted=posted),
                                   recorder)
            else:
                with trace.span("wait", label):
                    out = fn(*args, **kwargs)
                with trace._lock:
                    trace._transfers.append((kind, label, posted, time.perf_counter()))
            recorder.compute_from_now()
            return out
        return call

    for name, fn in saved.items():
        setattr(dist, name, timed(name, fn))
    recorder.compute_from_now()
    try:
        yield recorder
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
        recorder.compute_until_now()
