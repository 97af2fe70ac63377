"""Judging in the parent: expected values computed beside the ranks, results read as data.

* `Expectations`: every check's expected values and rules, computed in one thread of the
  parent while the ranks run (serial torch only, never student code: the parent is idle
  then, and a check is judged as soon as its results are in). The same thread builds the
  modules a rank asks for as its own inputs (checker/provider.py), ahead of the
  expected values: both seed torch's global generator, and a rank waits for its module.
* `judge` is the one entry point for a check's verdict at one world size, whether every
  rank finished it (its outcomes are compared, verdict.py) or the group ended during it (a
  rank's exception, then the watchdog's or the launcher's stop: diagnosis.py). It never
  raises: what a rank wrote cannot crash the grader. `judging` judges each check as soon as
  every rank has written its result.
* `load_outcome` is where a rank's outcome file becomes an `Outcome` (checker/types.py).
"""
from __future__ import annotations

import concurrent.futures
import itertools
import queue
import threading
from pathlib import Path

from rtp_course.checker import diagnosis, inputs, outcome_file, verdict
from rtp_course.checker.registry import check_modules, load_checks
from rtp_course.checker.types import Outcome, RankStatus, Result, Verdict
from rtp_course.course import EXERCISES

WORLD_SIZES = (1, 2, 3, 4)

# (check id, world size) -> (check class, (expected, rules)): the public checks', computed once
# by the warm check server (cli/warm.py) before it forks its runs, which then only look them up.
PRECOMPUTED = {}


def precompute_expectations(world_sizes=WORLD_SIZES) -> None:
    """Every public check's expected values and rules, kept for the runs forked later."""
    for check in load_checks(check_modules(list(EXERCISES), False)):
        for ws in world_sizes:
            if check.applies(ws):
                PRECOMPUTED[(check.id, ws)] = (type(check), _compute(check, ws))


def _expectation(check, ws):
    cls, found = PRECOMPUTED.get((check.id, ws), (None, None))
    return found if cls is type(check) else _compute(check, ws)


def _compute(check, ws):
    with inputs.scope(check.id):          # the ranks' own data of this check (checker.inputs)
        return check.expected(ws), check.comm_rules(ws)


class Expectations:
    """Expected values and rules of `pairs` [(check, world size)], in a thread of their own."""

    def __init__(self, pairs):
        self._queue = queue.PriorityQueue()
        self._order = itertools.count()
        self._futures = {(c.id, ws): self._submit(1, _expectation, c, ws) for c, ws in pairs}
        self._thread = threading.Thread(target=self._work, name="expected", daemon=True)
        self._thread.start()

    def _submit(self, priority: int, fn, *args) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        self._queue.put((priority, next(self._order), future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            _, _, future, fn, args = self._queue.get()
            if fn is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - the future carries it
                future.set_exception(e)

    def get(self, check, ws):
        key = (check.id, ws)
        if key not in self._futures:
            self._futures[key] = self._submit(1, _expectation, check, ws)
        return self._futures[key].result()

    def urgent(self, fn, *args) -> concurrent.futures.Future:
        """`fn(*args)` in the same thread, before the expected values still to compute."""
        return self._submit(0, fn, *args)

    def close(self):
        """Stop: what is still queued (expected values no longer needed, modules a rank asked
        for and no longer waits for) is cancelled, not computed."""
        self._queue.put((-1, next(self._order), None, None, ()))
        self._thread.join()
        while not self._queue.empty():
            future = self._queue.get_nowait()[2]
            if future is not None:
                future.cancel()


def now(fn, *args) -> concurrent.futures.Future:
    """fn(*args), done, as a future (a launch without an expectations thread)."""
    future = concurrent.futures.Future()
    try:
        future.set_result(fn(*args))
    except Exception as e:  # noqa: BLE001 - the future carries it
        future.set_exception(e)
    return future


def load_outcome(path: Path, rank: int) -> Outcome | None:
    """A rank's outcome of one check, read as data (never unpickling code); None if missing."""
    try:
        if not path.exists() or path.stat().st_size == 0:
            return None
        return Outcome.parse(outcome_file.load(path))
    except Exception as e:  # noqa: BLE001 - what a rank wrote never crashes the grader
        why = str(e).splitlines()[0][:200] if isinstance(e, ValueError) and str(e) \
            else type(e).__name__
        return Outcome.malformed(rank, why)


def load_outcomes(rundir: Path, cid: str, ws: int) -> dict[int, Outcome] | None:
    outcomes = {}
    for r in range(ws):
        o = load_outcome(rundir / f"result.{cid}.{r}.pt", r)
        if o is None:
            return None
        outcomes[r] = o
    return outcomes


class _ByException:
    """The expected values of outcomes judged by their exception alone: none (a rank missing,
    or a file of the code under test that does not parse)."""

    @staticmethod
    def get(check, ws):
        return {}, []


BY_EXCEPTION = _ByException()


def judge(check, ws: int, outcomes: dict[int, Outcome], stuck=None, *, expect=None,
          rundir: Path | None = None) -> Result:
    """The verdict of `check` at world size `ws`.

    `outcomes`: {rank: Outcome} the ranks wrote. `stuck`: None when every rank finished the
    check; else why the group ended during it (watchdog.Stuck, launcher.RankFailed or
    RankHung), `outcomes` then holds the ranks that finished, and `rundir` the launch's
    status and output files. `expect`: where the expected values and rules come from
    (Expectations, BY_EXCEPTION; default: computed here)."""
    if stuck is not None:
        if all(o.ok for o in outcomes.values()):
            return diagnosis.diagnose(check, ws, rundir, stuck, outcomes)
        # the rank that failed first explains the rest (and why its peers were left waiting)
        res = _compared(check, ws, outcomes, BY_EXCEPTION)
        return diagnosis.after_exception(check, ws, rundir, res, outcomes)
    return _compared(check, ws, outcomes, expect)


def _compared(check, ws, outcomes, expect) -> Result:
    try:
        expected, rules = expect.get(check, ws) if expect else _expectation(check, ws)
    except Exception as e:  # a bug in the course's own check, not the student's
        return Result(check.exercise, check.name, ws, Verdict.ERROR,
                      f"internal error in the check itself ({type(e).__name__}: {e}); "
                      f"please report it to the course staff")
    try:
        return verdict.compare(check, ws, outcomes, expected, rules)
    except Exception as e:  # noqa: BLE001 - what a rank wrote never crashes the grader
        return Result(check.exercise, check.name, ws, Verdict.ERROR,
                      f"the checker could not compare what the ranks recorded "
                      f"({type(e).__name__}): the check fails; if your code returns plain "
                      f"dense tensors, please report it to the course staff")


def judging(todo, ws, rundir: Path, expect, judged: dict):
    """A watchdog callback: judge each check as soon as every rank's status says it is past
    it, while the ranks go on (reading and comparing after the launch left them idle).
    `judged`: {check id: (outcomes, Result)}."""
    def on_change(statuses: dict[int, RankStatus]):
        finished = min((st.index + st.done if st.index is not None else -1
                        for st in statuses.values()), default=0)
        for check in todo[:max(finished, 0)]:
            if check.id in judged:
                continue
            outcomes = load_outcomes(rundir, check.id, ws)
            if outcomes is None:
                return
            judged[check.id] = (outcomes, judge(check, ws, outcomes, expect=expect))
    return on_change
