"""The one way the course says "this exercise is not implemented yet".

A demo of notebook 06 runs the student's RTP, which runs their rotation
(notebook 05). If `rotate_async` is still a stub, its bare hint does not say
that the fix is in another notebook. Wherever given code runs exercise code
(demos, training, benchmark), a stub's NotImplementedError becomes

    implement rotation.rotate_async in rtp_course/rotation.py first
    (task E4.2, notebook 05 section 2). Its hint: ...

`guard()` / `needs_exercises` make that message inside a worker;
`from_traceback()` reads it back out of a worker's traceback in the parent.
"""
from __future__ import annotations

import contextlib
import functools
import re
import sys
import traceback
from pathlib import Path

from rtp_course.course import BY_MODULE, where_taught

PREFIX = "not implemented yet: "


class ExerciseNotImplemented(NotImplementedError):
    """An exercise function is still a stub; the message says which, and where it is taught."""


def locate(exc: BaseException):
    """(exercise module, top-level name) of the innermost exercise frame that raised `exc`, or None."""
    pkg = sys.modules.get("rtp_impl")
    impl_dir = Path(getattr(pkg, "IMPL_DIR", "")) if pkg is not None else None
    found = None
    while exc is not None and found is None:     # a wrapper may re-raise `from` the stub's error
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            path = Path(frame.f_code.co_filename)
            if path.stem in BY_MODULE and (impl_dir is None or path.parent == impl_dir):
                qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
                found = (path.stem, qualname.split(".")[0])
        exc = exc.__cause__ or exc.__context__
    return found


def message(exc: NotImplementedError, default_module: str | None = None) -> str:
    """What to implement, where it is taught, and the stub's own hint."""
    if isinstance(exc, ExerciseNotImplemented):
        return str(exc)
    where = locate(exc)
    while isinstance(exc.__cause__, NotImplementedError):
        exc = exc.__cause__                      # the stub's own hint, not a wrapper's
    hint = str(exc) or "not implemented yet"
    if where is None:
        if default_module is None:
            return hint
        ex = BY_MODULE[default_module]
        return (f"implement {default_module} (rtp_course/{default_module}.py) first "
                f"(exercise {ex.id}, notebook {ex.notebook_number}). Its hint: {hint}")
    module, name = where
    taught = where_taught(module, name)
    return (f"implement {module}.{name} in rtp_course/{module}.py first"
            f"{f' ({taught})' if taught else ''}. Its hint: {hint}")


@contextlib.contextmanager
def guard(default_module: str | None = None):
    """Inside: a stub's NotImplementedError becomes ExerciseNotImplemented with `message`."""
    try:
        yield
    except ExerciseNotImplemented:
        raise
    except NotImplementedError as e:
        raise ExerciseNotImplemented(message(e, default_module)) from e


def needs_exercises(worker):
    """Decorator for workers that run exercise code; the worker stays picklable by name."""
    @functools.wraps(worker)
    def wrapped(*args, **kwargs):
        with guard():
            return worker(*args, **kwargs)
    return wrapped


_LINE = re.compile(r"(?:ExerciseNotImplemented|NotImplementedError): (.*)")


def from_traceback(text: str) -> str | None:
    """The not-implemented message in a worker's traceback text, or None if that is not what failed."""
    found = _LINE.findall(text or "")
    return found[-1].strip() if found else None
