"""The unit layer is pure and quick: no test here starts a process, and `pytest tests/unit`
takes about a minute. A test that needs ranks, a kernel, a forkserver or nbgrader's
commands belongs at the top level; one that is pure but runs over a whole corpus or the
process's heap (the review's scan and similarity over every entry, the memory rule's heap
walks) in tests/grading/. The tiers and the xdist scheduling of tests/conftest.py take care
of their cost.

The guard wraps every way this interpreter starts a process (subprocess.Popen's one method
that starts its child; _posixsubprocess.fork_exec, multiprocessing's spawn; os.fork, which
multiprocessing's fork and os.spawn* use; posix_spawn, os.system; Process.start) during a unit test's setup, call and teardown; one that does fails,
even where the code under test catches the exception the guard raises."""
from __future__ import annotations

import _posixsubprocess
import contextlib
import multiprocessing.process
import os
import subprocess

import pytest

STARTERS = [(subprocess.Popen, "_execute_child"), (_posixsubprocess, "fork_exec"), (os, "fork"), (os, "forkpty"), (os, "system"),
            (os, "posix_spawn"), (os, "posix_spawnp"),
            (multiprocessing.process.BaseProcess, "start")]


class ProcessStarted(RuntimeError):
    """A unit test started a process."""


@contextlib.contextmanager
def no_processes(started: list):
    saved = [(owner, name, getattr(owner, name)) for owner, name in STARTERS if hasattr(owner, name)]

    def refuse(what):
        def starter(*args, **kwargs):
            started.append(what)
            raise ProcessStarted(f"a unit test started a process ({what}): move it out of "
                                 f"tests/unit, or fake what starts it")
        return starter
    for owner, name, _ in saved:
        setattr(owner, name, refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
    try:
        yield
    finally:
        for owner, name, real in saved:
            setattr(owner, name, real)


def _guarded(item):
    started = []
    with no_processes(started):
        result = yield
    if started:
        pytest.fail(f"{item.nodeid} started a process ({', '.join(started)}): the unit layer "
                    f"launches none (tests/unit/conftest.py)", pytrace=False)
    return result


# Setup and teardown too: a fixture that launches something is the test's doing. Not the last
# teardown of a run (nextitem None): it ends the session's fixtures, which top-level tests own.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None:
        return (yield)
    return (yield from _guarded(item))
