"""Grading processes for a class: each on cores of its own, each submission under a wall-clock guard.

A submission is graded in a process of its own (spawned: the serial references seed torch's
global generator, so two gradings in one process would draw each other's weights). The
process keeps to a share of the cores (`cores_for`), it and every process it starts, so a
submission that starts busy processes slows only itself. A process is reused for the next
submission, which saves its start (torch's import); it is killed, with everything it
started, when a submission's grading passes `guard_s` wall seconds, and a fresh one takes
its place. The guard counts from the moment the process takes the submission up (a fresh
process's start, slow on a loaded machine, is bounded apart: `START_S`). Whatever happens to
one submission (an exception, a crash, the guard) is its `Outcome`; the next submission is
graded all the same.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_any


@dataclass
class Outcome:
    key: str
    value: object = None
    error: str = ""          # why there is no value: an exception, a crash, the guard
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error


def default_jobs() -> int:
    """Submissions graded at once on this machine: one per two cores. A submission's ranks
    wait on each other much of the time and use about two cores; on fewer than two, one
    submission grades slower than one at a time on both."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def cores_for(slot: int, jobs: int, cores: list) -> list:
    """The cores of grading slot `slot` of `jobs`: a share of its own where there are enough."""
    if jobs <= len(cores):
        return cores[slot * len(cores) // jobs:(slot + 1) * len(cores) // jobs]
    return [cores[slot % len(cores)]]


def _take_cores(slot: int, jobs: int, cores: list) -> None:
    os.sched_setaffinity(0, cores_for(slot, jobs, cores))


def _serve(conn, slot: int, jobs: int, cores: list) -> None:
    """A grading process: keep to the slot's cores, then run what the parent sends."""
    _take_cores(slot, jobs, cores)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        fn, args = task
        conn.send(("started", None))     # the guard counts from here
        try:
            reply = ("ok", fn(*args))
        except BaseException as e:      # SystemExit and KeyboardInterrupt too: report, go on
            tail = "".join(traceback.format_exception(e)[-3:]).strip()
            reply = ("error", f"{type(e).__name__}: {e}" + (f"\n{tail}" if tail else ""))
        try:
            conn.send(reply)
        except Exception as e:          # a value that does not pickle
            conn.send(("error", f"its result could not be sent back: {e}"))


START_S = 300    # a fresh grading process's start (Python, torch's import), on a loaded machine


class _Slot:
    """One grading process and the submission it grades now."""

    def __init__(self, index: int, jobs: int, cores: list):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, index, jobs, cores))
        self.process.start()
        child.close()
        self.key, self.started, self.deadline = None, 0.0, float("inf")

    def give(self, key: str, fn, args, guard_s: float) -> None:
        self.key, self.started, self.guard_s = key, time.monotonic(), guard_s
        self.deadline = self.started + START_S + guard_s     # until it says it started
        self.conn.send((fn, args))

    def take(self) -> Outcome | None:
        """The finished submission's outcome (its process ended: a crash); None when the
        process only said it took the submission up (the guard starts then)."""
        seconds = time.monotonic() - self.started
        try:
            kind, value = self.conn.recv()
            if kind == "started":
                self.started = time.monotonic()
                self.deadline = self.started + self.guard_s
                return None
        except (EOFError, OSError):
            self.process.join(1)
            code = self.process.exitcode
            why = (f"killed by signal {signal.Signals(-code).name}" if code and code < 0
                   else f"exit code {code}")
            return Outcome(self.key, error=f"its grading process ended ({why})", seconds=seconds)
        if kind == "ok":
            return Outcome(self.key, value, seconds=seconds)
        return Outcome(self.key, error=value, seconds=seconds)

    def kill(self) -> None:
        """This process and every process it started (the checker's forkserver and ranks, and
        its guardian), then what the guardian would have swept: the processes marked as this
        one's, its run directories."""
        import tempfile

        from rtp_course.runtime import reaper
        for pid in sorted(reaper.descendants(self.process.pid)) + [self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.join(5)
        reaper.clean_up_after(self.process.pid, tempfile.gettempdir())

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(10)
        if self.process.is_alive():
            self.kill()


def run(tasks, jobs: int, guard_s: float, on_done=None) -> dict:
    """{key: Outcome} for `tasks`, a list of (key, fn, args) with `fn` a module-level function,
    at most `jobs` at once. `on_done(outcome)` is called in this process as each finishes (in
    the order they finish): the one place that writes the gradebook."""
    cores = sorted(os.sched_getaffinity(0))
    todo, slots, out = deque(tasks), {}, {}
    busy: dict[int, _Slot] = {}
    try:
        while todo or busy:
            for i in range(jobs):
                if todo and i not in busy:
                    slot = slots.get(i) or slots.setdefault(i, _Slot(i, jobs, cores))
                    key, fn, args = todo.popleft()
                    slot.give(key, fn, args, guard_s)
                    busy[i] = slot
            _collect(busy, slots, jobs, cores, out, on_done, guard_s)
    finally:
        for slot in slots.values():
            slot.close()
    return out


def _collect(busy: dict, slots: dict, jobs: int, cores: list, out: dict, on_done, guard_s) -> None:
    """Wait for a submission to finish or pass its guard; record what happened."""
    waits = {s.conn: i for i, s in busy.items()} | {s.process.sentinel: i for i, s in busy.items()}
    timeout = max(0.0, min(s.deadline for s in busy.values()) - time.monotonic())
    done = {waits[r] for r in wait_any(list(waits), timeout=timeout)}
    for i in list(busy):
        slot = busy[i]
        if i in done:
            outcome = slot.take()
            if outcome is None:
                continue
            if not slot.process.is_alive():
                slots.pop(i)
        elif time.monotonic() >= slot.deadline:
            slot.kill()
            slots.pop(i)
            outcome = Outcome(slot.key, error=f"its grading took longer than {guard_s:.0f} s "
                                              f"(stopped)", seconds=guard_s)
        else:
            continue
        del busy[i]
        out[outcome.key] = outcome
        if on_done:
            on_done(outcome)


def grading_pool(jobs: int) -> ProcessPoolExecutor:
    """`jobs` plain processes on cores of their own (no guard): for a caller that only needs
    the cores kept apart."""
    ctx = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_pool_slot,
                               initargs=(ctx.Value("i", 0), jobs, sorted(os.sched_getaffinity(0))))


def _pool_slot(counter, jobs: int, cores: list) -> None:
    with counter.get_lock():
        slot, counter.value = counter.value, counter.value + 1
    _take_cores(slot, jobs, cores)
