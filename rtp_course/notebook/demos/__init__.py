"""Worker functions the notebooks run on several processes, and helpers to run them kindly.

`launch` starts processes with the spawn method, which pickles the function
by its module and name: a function defined in a notebook cell cannot travel.
So every function a notebook passes to `launch` lives in this package:

    hello.py          who am I: rank, world size, backend, device (also a torchrun/srun script)
    collectives.py    each collective on small tensors, before and after; a deadlock
    data_parallel.py  notebook 02: gradient averaging, DataParallel, training, profiling
    tp_comm.py        notebook 03: f, g, all-gather and split; a column/row MLP by hand
    rotation.py       notebook 05: the ring rotation, its async form, overlap timelines
    context_parallel.py  notebook 10: ring attention against serial attention, its timeline
    sharding.py       notebook 09: ZeRO-1 against DDP, one FSDP step, FSDP's prefetch timeline
    threed.py         notebook 11's capstone: DP x TP x PP on a 2 x 2 x 2 DeviceMesh against serial

Demos that use an exercise load it with `rtp_course.course.impl.current(name)`, so
they run the student's code (or the reference solutions when
RTP_COURSE_IMPL=solutions). `run_demo` turns "not implemented yet" into a
friendly message instead of a traceback, so a notebook always runs top to bottom.
"""
from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.course.todo import from_traceback
from rtp_course.runtime.launcher import RankFailed, RankHung, launch

SKIPPED = "[demo skipped]"
FAILED = "[demo failed]"


_PEER_LEFT = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def short_failure(trace: str) -> str:
    """A rank's failure in a few lines: the exception and where in exercise code it was raised
    (not torch's or gloo's frames)."""
    lines = trace.strip().splitlines()
    if not lines:
        return "it ended without saying why"
    last = lines[-1].strip()
    if any(m in last for m in _PEER_LEFT):
        last = ("another rank left a collective this rank was waiting in (every rank must make "
                "the same collective calls in the same order)")
    elif not lines[0].startswith("Traceback"):
        return last                                   # a crash: how the process died
    frames = [m for m in _FRAME_TB.finditer(trace) if Path(m["path"]).stem in EXERCISES]
    where = "".join(f"\n    at {Path(m['path']).name}:{m['line']} in {m['func']}()" for m in frames[-2:])
    return last + where


_FRAME_TB = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def run_demo(fn, world_size: int, *args, needs: str = "", timeout: float = 90.0):
    """`launch(fn, world_size, args)`, but a missing exercise prints what to implement.

    Returns the per-rank results, or None when the demo could not run (the
    reason is printed: not implemented yet, an exception on a rank, a hang), or
    was not run: during nbgrader's autograding, where it would grade nothing (the
    points for code come from `rtp-course grade`) and cost every submission its time.
    """
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        print(f"{SKIPPED} demos are not re-run while autograding: they grade nothing (your own "
              f"run's output is in the notebook you submitted)")
        return None
    try:
        return launch(fn, world_size, args=args, timeout=timeout, results="objects")
    except RankFailed as e:
        todo = from_traceback(e.traceback)
        if todo is not None:
            print(f"{SKIPPED} this demo runs your {needs or 'exercise code'}, which is not "
                  f"implemented yet:\n    {todo}\nImplement it, then run this cell again.")
        else:
            print(f"{FAILED} rank {e.rank}: {short_failure(e.traceback)}\n"
                  f"(the check cell of this exercise gives the full diagnosis)")
    except RankHung as e:
        print(f"{FAILED} rank(s) {e.stuck} were still running after {e.timeout:.0f} s "
              f"(a deadlock?). Where they waited:")
        for rank in e.stuck:
            print(f"  rank {rank}: {where_waiting(e.stacks.get(rank, ''))}")
    return None


_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_INTERNAL = ("site-packages", "/lib/python3", "<string>", "rtp_course/runtime/launcher.py")


def where_waiting(stack: str) -> str:
    """One line from a faulthandler stack: the torch.distributed call and the user code that made it.

    faulthandler lists the most recent call first; we keep the innermost
    `torch/distributed` function and the innermost frame of our own code.
    """
    frames = [m.groupdict() for m in _FRAME.finditer(stack)]
    if not frames:
        return "(no stack recorded)"
    call = next((f["func"] for f in frames if "torch/distributed" in f["path"]
                 and f["func"] not in ("wrapper", "_fn")), None)
    own = next((f for f in frames if not any(s in f["path"] for s in _INTERNAL)), None)
    where = f"{_short_path(own['path'])}:{own['line']} in {own['func']}()" if own else "?"
    return f"waiting in dist.{call}(), called from {where}" if call else f"running {where}"


def _short_path(path: str) -> str:
    marker = "rtp_course/"
    return path[path.index(marker):] if marker in path else path


def show_source(obj) -> None:
    """Display the source of a function (or class) with syntax colours in a notebook."""
    source = inspect.getsource(obj)
    try:
        from IPython.display import Code, display
        display(Code(source, language="python"))
    except ImportError:
        print(source)
