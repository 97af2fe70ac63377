"""Say which exercise function a demo is waiting for, and where the course teaches it.

A demo of notebook 06 runs the student's RTP, which runs their rotation (notebook
05). If `rotate_async` is still a stub, the bare hint "rotate_async: peers from
ring_peers..." does not say that the fix is in another notebook. Decorating a
worker with `@needs_exercises` turns a NotImplementedError raised in an exercise
module into

    implement rotation.rotate_async first (notebook 05, section 2). Its hint: ...

`run_demo` prints that line instead of a traceback.
"""
from __future__ import annotations

import functools
import sys
import traceback
from pathlib import Path

from rtp_course import EXERCISES

# (exercise, top-level name that raises) -> (notebook, section) where it is taught.
WHERE = {
    ("data_parallel", "average_gradients"): ("02", 3), ("data_parallel", "DataParallel"): ("02", 4),
    ("comm", "Duplication"): ("03", 2), ("comm", "AllReduce"): ("03", 2),   # duplicate(), all_reduce()
    ("comm", "AllGather"): ("03", 3), ("comm", "Split"): ("03", 3),           # and their function forms
    ("tensor_parallel", "ColumnParallelLinear"): ("04", 1),
    ("tensor_parallel", "RowParallelLinear"): ("04", 2),
    ("tensor_parallel", "ParallelMLP"): ("04", 3),
    ("tensor_parallel", "ParallelEmbedding"): ("04", 4),
    ("tensor_parallel", "ParallelSelfAttention"): ("04", 5),
    ("tensor_parallel", "parallelize_transformer"): ("04", 6),
    ("rotation", "ring_peers"): ("05", 1), ("rotation", "RotationHandle"): ("05", 2),
    ("rotation", "rotate_async"): ("05", 2), ("rotation", "rotate"): ("05", 2),
    ("rotation", "ring_all_gather"): ("05", 3), ("rotation", "ring_reduce_scatter"): ("05", 4),
    ("flyweight", "FlyweightWrapper"): ("06", 2), ("flyweight", "RotatedTensorParallel"): ("06", 3),
    ("groups", "build_groups"): ("08", 1), ("groups", "parallelize_2d"): ("08", 2),
    ("groups", "sync_gradients"): ("08", 3), ("groups", "train_step_2d"): ("08", 3),
}


def locate(exc: BaseException):
    """(exercise, name) of the innermost exercise-module frame that raised `exc`, or None."""
    pkg = sys.modules.get("rtp_impl")
    impl_dir = Path(getattr(pkg, "IMPL_DIR", "")) if pkg is not None else None
    found = None
    while exc is not None and found is None:     # a wrapper may re-raise `from` the stub's error
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            path = Path(frame.f_code.co_filename)
            if path.stem in EXERCISES and (impl_dir is None or path.parent == impl_dir):
                qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
                found = (path.stem, qualname.split(".")[0])
        exc = exc.__cause__ or exc.__context__
    return found


def message(exc: NotImplementedError) -> str:
    where = locate(exc)
    if where is None:
        return str(exc)
    while exc.__cause__ is not None and isinstance(exc.__cause__, NotImplementedError):
        exc = exc.__cause__                      # the stub's own hint, not a wrapper's
    exercise, name = where
    taught = WHERE.get(where)
    place = f" (notebook {taught[0]}, section {taught[1]})" if taught else ""
    return f"implement {exercise}.{name} in rtp_course/{exercise}.py first{place}. Its hint: {exc}"


def needs_exercises(worker):
    """Decorator for demo workers: a stub's NotImplementedError names the function and its
    notebook section. The worker stays picklable by name (functools.wraps)."""
    @functools.wraps(worker)
    def wrapped(*args, **kwargs):
        try:
            return worker(*args, **kwargs)
        except NotImplementedError as e:
            raise NotImplementedError(message(e)) from None
    return wrapped
