"""Run checks: one spawned group per world size, a watchdog, and the verdict in this process.

The parent never imports the code under test. It launches the workers
(worker.run_checks), watches their status files, and when a group ends early
(an exception, a deadlock) judges what finished, diagnoses the check that
broke, and relaunches the group for the checks that remain.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from rtp_course import course
from rtp_course.course import COURSE, EXERCISES, edition
from rtp_course.checker import exception_causes, hang_causes, inputs, outcome_file
from rtp_course.checker.registry import check_modules, load_checks
from rtp_course.checker.verdict import Result, fallout, judge
from rtp_course.checker.worker import DISK_CAP_MB, run_checks, syntax_error_outcome
from rtp_course.course.impl import resolve
from rtp_course.runtime import output, reaper, scratch
from rtp_course.runtime.relay import supported as relay_supported
from rtp_course.runtime.relay.server import Relay
from rtp_course.runtime.launcher import (LaunchError, RankFailed, RankHung, default_backend,
                                         died_how, launch, stderr_tail, validate)

DEFAULT_WORLD_SIZES = tuple(sorted({n for ex in COURSE for n in ex.world_sizes}))
IMPORT_TIMEOUT = 10.0   # s to import the exercise modules under test, before any check
STALL = 6.0             # s with every rank blocked in a communication call and no rank moving
# NCCL's wait() only makes the stream wait; blocking wait makes it block the host, as gloo's
# does, so a stuck transfer is seen in the wait() that the status names, and hang diagnosis
# and budgets are the same on GPU and CPU.
NCCL_ENV = {"TORCH_NCCL_BLOCKING_WAIT": "1"}
HANG_BUDGET = 20.0      # s an exercise's checks may spend hung, in all, before the rest are not run
# Wall-time budgets of the checks, hung or merely slow (x timeout_scale). The slowest
# exercise's public and hidden checks take about 10 s on a 2-core machine, 20 s with two
# gradings at once; a run of all six, about 35 s.
EXERCISE_BUDGET = 45.0  # s the checks of one exercise may take in all
RUN_BUDGET = 120.0      # s the checks of one run (a submission) may take in all
STARTUP = 30.0          # s for the ranks to start and join their group
HARNESS = 5.0           # s for a rank to load its checks and confine itself, before imports
SLACK = 2.0             # s the parent's clock allows over a limit (a rank reports a little late)
LEAVING = 15.0          # s for ranks that finished every check to leave (NCCL's destroy: 10 s)
DISK_FILES = scratch.FILES   # a rank's files in the run's directory (as many as its tmpfs holds)


class _Stuck(Exception):
    def __init__(self, check_id, stacks, statuses, why="", reason="own", elapsed=0.0):
        self.check_id, self.stacks, self.statuses, self.why = check_id, stacks, statuses, why
        self.reason, self.elapsed = reason, elapsed


def _disk_use(rundir: Path, world_size: int) -> tuple[dict, dict]:
    """({rank: bytes}, {rank: files}) of what each rank wrote in the run's directory: its
    result, error and status files, and its private directory. Not its captured stdout and
    stderr, which the launcher caps as it drains them."""
    used, files = {r: 0 for r in range(world_size)}, {r: 0 for r in range(world_size)}

    def add(rank, entry):
        try:
            used[rank] += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            pass
        files[rank] += 1

    def walk(rank, folder):
        stack = [folder]
        while stack and files[rank] <= DISK_FILES:
            try:
                with os.scandir(stack.pop()) as it:
                    for e in it:
                        add(rank, e)
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
            except OSError:
                pass
    try:
        entries = list(os.scandir(rundir))
    except OSError:
        return used, files
    for e in entries:
        parts = e.name.split(".")
        if parts[0] in ("stdout", "stderr"):
            continue
        where = parts[1] if parts[0] == "tmp" else parts[-2] if len(parts) >= 3 else ""
        if not where.isdigit() or int(where) not in used:
            continue
        if parts[0] == "tmp":
            walk(int(where), e.path)
        else:
            add(int(where), e)
    return used, files


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class _Watchdog:
    """Called by launch() about every 0.1 s: stops the group when a check runs past its limit,
    or at once when it is a plain deadlock (every rank waits in a communication call, or for
    the others, done, and no status has changed for `stall` seconds).

    Time is the parent's own clock. A rank's status file only names the check it is in, and
    only forward: a rank that writes nothing, nonsense or a made-up start time is stopped
    no later than an honest one (what it writes can make it stop sooner, never later). Each
    check's time, from the moment every rank had left the previous one, is charged to the
    budgets. `on_change(statuses)` is called whenever a rank's status changed."""

    def __init__(self, rundir: Path, world_size: int, todo: list, budgets: "_Budgets",
                 stall: float, tick=None, on_change=None, disk_mb: int = DISK_CAP_MB):
        self.rundir, self.world_size, self.budgets, self.stall = rundir, world_size, budgets, stall
        self.disk_mb, self.disk_looked = disk_mb, 0.0
        self.order, self.by_id = [c.id for c in todo], {c.id: c for c in todo}
        self.imports = len({c.exercise for c in todo})
        self.tick, self.on_change = tick, on_change
        self.reached = {r: -1 for r in range(world_size)}  # per rank: checks it has left
        # The group's place: -2 starting, -1 importing (from when every rank's status file
        # exists: the harness makes it before any code under test runs), then the index of
        # the check that some rank is still in; and since when, on this clock.
        self.step, self.since = -2, time.monotonic()
        self.text, self.changed = None, time.monotonic()

    def __call__(self, processes):
        now = time.monotonic()
        statuses = {r: _read_json(self.rundir / f"status.{r}.json") for r in range(self.world_size)}
        text = json.dumps(statuses, sort_keys=True)
        if text != self.text:
            self.text, self.changed = text, now
            self._advance(statuses, now)
            if self.on_change:
                self.on_change(statuses)
        self._stop_if_stuck(statuses, processes, now)
        if now - self.disk_looked > 0.5:
            self.disk_looked = now
            self._stop_if_flooding(statuses)

    def _stop_if_flooding(self, statuses) -> None:
        """RLIMIT_FSIZE caps each file, not how many a rank fills: its results (one file per
        check, opened before it was confined) and, without a tmpfs of its own
        (runtime/scratch.py), its private directory. Past the disk cap in all, the group stops."""
        used, files = _disk_use(self.rundir, self.world_size)
        for r in range(self.world_size):
            if used[r] > self.disk_mb << 20 or files[r] > DISK_FILES:
                st = statuses.get(r)
                check = st.get("check") if isinstance(st, dict) else None
                check = check if check in self.by_id else \
                    self.order[max(0, min(self.step, len(self.order) - 1))]
                what = f"{used[r] >> 20} MB of files" if files[r] <= DISK_FILES \
                    else f"{files[r]} files"
                flood = _Stuck(check, {}, statuses,
                               f"rank {r} wrote {what} (a rank's cap is {self.disk_mb} "
                               f"MB and {DISK_FILES} files in all, RTP_COURSE_RANK_DISK_MB)",
                               reason="disk")
                flood.rank = r
                raise flood

    def _advance(self, statuses: dict, now: float) -> None:
        if self.step == -2 and all((self.rundir / f"status.{r}.json").exists()
                                   for r in range(self.world_size)):
            self.budgets.charge_run(now - self.since)
            self.step, self.since = -1, now
        for r, st in statuses.items():
            if isinstance(st, dict) and type(st.get("index")) is int \
                    and 0 <= st["index"] < len(self.order) and st.get("check") == self.order[st["index"]]:
                self.reached[r] = max(self.reached[r], st["index"] + (st.get("phase") == "done"))
        step = min(self.reached.values())
        if step > self.step and step >= 0:
            spent = now - self.since
            if self.step >= 0:
                self.budgets.charge(self.by_id[self.order[self.step]], spent)
            else:
                self.budgets.charge_run(spent)        # starting up and importing
            self.step, self.since = step, now
            if self.tick:
                self.tick(step)

    def elapsed(self) -> float:
        """Seconds the group has been in its current check (or starting up)."""
        return time.monotonic() - self.since

    def _stop_if_stuck(self, statuses, processes, now) -> None:
        current = self.order[self.step] if 0 <= self.step < len(self.order) else None
        if self.step == -2:
            limit, reason = STARTUP, "own"
        elif self.step == -1:
            limit, reason = HARNESS + IMPORT_TIMEOUT * self.imports, "own"
        elif current is not None:
            limit, reason = self.budgets.limit(self.by_id[current])
        else:       # every check done (by the ranks' word): leaving together takes moments
            limit, reason = LEAVING, "own"
        if now - self.since > limit + SLACK:
            who = current or self._named(statuses) or self.order[min(self.step, len(self.order) - 1)
                                                                 if self.step >= 0 else 0]
            self._stuck(who, statuses, processes, self._why(limit, reason, who), reason)
        # What the ranks say can only stop them sooner: a plain deadlock, or a check that
        # started (by the rank's own word) longer ago than its limit.
        running = [st for st in statuses.values() if isinstance(st, dict)
                   and st.get("check") in self.by_id and st.get("phase") != "done"]
        if running and now - self.changed > self.stall and all(
                isinstance(st, dict) and st.get("check") == running[0]["check"] and st.get("call")
                for st in statuses.values()):
            self._stuck(running[0]["check"], statuses, processes,
                        f"no rank moved for {self.stall:.0f} s, each waiting in a communication call")
        for st in statuses.values():
            if not isinstance(st, dict) or st.get("phase") == "done":
                continue
            check_id, started = str(st.get("check", "")), st.get("started")
            importing = check_id.startswith("import:")
            if (importing or check_id in self.by_id) and isinstance(started, (int, float)):
                limit, reason = (IMPORT_TIMEOUT, "own") if importing \
                    else self.budgets.limit(self.by_id[check_id])
                if time.time() - started > limit:
                    self._stuck(check_id, statuses, processes, self._why(limit, reason, check_id), reason)

    def _named(self, statuses) -> str | None:
        """The import a rank says it is in, if any (for the report of an import hang)."""
        for st in statuses.values():
            if isinstance(st, dict) and str(st.get("check", "")).startswith("import:"):
                return st["check"]
        return None

    def _why(self, limit: float, reason: str, check_id: str) -> str:
        if reason in ("exercise", "run"):
            return self.budgets.why(reason, check_id.split(".")[0])
        return f"the check did not finish within {limit:.0f} s"

    def _stuck(self, check_id, statuses, processes, why, reason="own"):
        for p in processes:
            if p.is_alive():
                os.kill(p.pid, signal.SIGUSR1)
        time.sleep(0.3)
        stacks = {q: (self.rundir / f"stack.{q}.txt").read_text()
                  for q in range(self.world_size) if (self.rundir / f"stack.{q}.txt").exists()}
        raise _Stuck(check_id, stacks, statuses, why, reason, self.elapsed())


class _Budgets:
    """The wall time checks may take, on the parent's clock, x timeout_scale: each check its
    own timeout; an exercise's checks HANG_BUDGET s hung and EXERCISE_BUDGET s in all, at
    every world size; the whole run RUN_BUDGET s. Slow checks are charged as well as hung
    ones, so a submission is graded in bounded time whatever its code does. An explicit
    --timeout (a person debugging) lifts the exercise and run budgets."""

    def __init__(self, scale: float = 1.0, timeout: float | None = None):
        self.scale, self.timeout = scale, timeout
        lifted = float("inf") if timeout else None
        self.hang_left = {ex: HANG_BUDGET * scale for ex in EXERCISES}
        self.left = {ex: lifted or EXERCISE_BUDGET * scale for ex in EXERCISES}
        self.run_left = lifted or RUN_BUDGET * scale

    def limit(self, check) -> tuple[float, str]:
        """(seconds the check may still run, which bound that is)."""
        own = self.timeout or check.timeout * self.scale
        hang = max(self.hang_left.get(check.exercise, own), STALL * self.scale)
        return min((own, "own"), (hang, "hang"), (self.left.get(check.exercise, own), "exercise"),
                   (self.run_left, "run"), key=lambda x: x[0])

    def charge(self, check, seconds: float, hung: bool = False) -> None:
        if check.exercise in self.left:
            self.left[check.exercise] -= seconds
        self.run_left -= seconds
        if hung and check.exercise in self.hang_left:
            self.hang_left[check.exercise] -= seconds

    def charge_run(self, seconds: float) -> None:
        self.run_left -= seconds

    def spent(self, check) -> str | None:
        """Why no more of the check's exercise runs ('hang', 'exercise', 'run'), or None."""
        if self.hang_left.get(check.exercise, 1) <= 0:
            return "hang"
        if self.left.get(check.exercise, 1) <= 0:
            return "exercise"
        return "run" if self.run_left <= 0 else None

    def why(self, reason: str, exercise: str = "") -> str:
        if reason == "hang":
            return (f"checks of {exercise} already hung for {HANG_BUDGET * self.scale:.0f} s in "
                    f"all (the hang budget of an exercise)")
        if reason == "exercise":
            return (f"too slow: the checks of an exercise may take {EXERCISE_BUDGET * self.scale:.0f} s "
                    f"in all, and {exercise or 'this exercise'}'s have used them")
        return (f"too slow: the checks of one run may take {RUN_BUDGET * self.scale:.0f} s in all, "
                f"and this run has used them")


def _deadlock_message(check, statuses: dict, world_size: int,
                      why: str = "the check did not finish in time") -> tuple[str, int | None]:
    lines, first = [], None
    for r in range(world_size):
        st = statuses.get(r) or {}
        if st.get("check") != check.id:
            lines.append(f"rank {r} never started this check")
            continue
        if st.get("phase") == "done":
            lines.append(f"rank {r} finished the check and waited for the others")
            continue
        call = st.get("call")
        if first is None:
            first = r
        where = f"waited in {call}" if call else "was computing (no communication call in progress)"
        lines.append(f"rank {r} {where} during phase '{st.get('phase')}'")
    msg = f"deadlock: {why}; " + "; ".join(lines)
    return msg, first


def _syntax_errors(exercises, impl_dir: str) -> dict:
    """{exercise: outcome} for exercise files of the code under test that do not parse.

    compile() only parses: nothing of the student's runs in this process."""
    bad = {}
    for ex in exercises:
        path = Path(impl_dir) / f"{ex}.py"
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            bad[ex] = syntax_error_outcome(e)
        except Exception:  # noqa: BLE001  (a missing file, a RecursionError on absurd nesting:
            pass           # the workers report what importing it does)
    return bad


def _refuse_world_sizes(checks, world_sizes, exercises) -> None:
    for ws in world_sizes:
        if not isinstance(ws, int) or ws < 1:
            raise ValueError(f"world size {ws!r}: a world size is a number of processes, 1 or more")
    if checks and not any(c.applies(ws) for c in checks for ws in world_sizes):
        sizes = sorted({n for ex in exercises for n in course.exercise(ex).world_sizes})
        raise ValueError(f"no check of {', '.join(exercises)} runs at world size "
                         f"{', '.join(map(str, world_sizes))}: its checks run at world sizes "
                         f"{', '.join(map(str, sizes))}; pick some of these (or leave "
                         f"--world-size out)")


def run(exercises=None, impl="rtp_course", world_sizes=None, hidden=False, dtype=None,
        timeout_scale=1.0, backend=None, progress=None, only=None,
        timeout=None) -> list[Result]:
    """Run the checks of `exercises` on `impl`; return one Result per check and world size.

    A check that makes no progress for `timeout` seconds (default: its own
    timeout x `timeout_scale`) is stopped and reported as a deadlock."""
    budgets = _Budgets(timeout_scale, timeout)
    exercises = list(exercises or EXERCISES)
    for ex in exercises:
        if ex not in EXERCISES:
            raise ValueError(f"unknown exercise {ex!r}: choose from {', '.join(EXERCISES)}")
    impl_dir = str(resolve(impl))
    modules = check_modules(exercises, hidden)
    checks = sorted(load_checks(modules), key=_task_order)   # a task's checks before later tasks'
    if only:
        unknown = [n for n in only if not any(n in (c.name, c.id) for c in checks)]
        if unknown:
            raise ValueError(f"no check named {', '.join(map(repr, unknown))} in "
                             f"{', '.join(exercises)}; its checks are "
                             f"{', '.join(c.name for c in checks)}")
        checks = [c for c in checks if c.name in only or c.id in only]
    if timeout_scale <= 0 or (timeout is not None and timeout <= 0):
        raise ValueError("a timeout and a timeout scale are positive numbers of seconds "
                         "(leave them out for each check's own)")
    world_sizes = tuple(world_sizes or DEFAULT_WORLD_SIZES)
    _refuse_world_sizes(checks, world_sizes, exercises)
    # One backend for every world size: a run whose small sizes went to NCCL and large ones
    # to gloo would grade one submission by two sets of rules. Asked-for NCCL with fewer
    # GPUs than ranks refuses here, before anything starts.
    backend = backend or default_backend(max(world_sizes))
    validate(max(world_sizes), backend)
    results: list[Result] = []
    unreadable = _syntax_errors(exercises, impl_dir)
    for c in [c for c in checks if c.exercise in unreadable]:
        results += [judge(c, ws, {0: unreadable[c.exercise]}, {}, [])
                    for ws in world_sizes if c.applies(ws)]
    checks_run = [c for c in checks if c.exercise not in unreadable]
    hung: dict[str, Result] = {}   # check id -> where it hung: not run again at larger sizes
    total = len(results) + sum(c.applies(ws) for c in checks_run for ws in world_sizes)
    expect = _Expectations([(c, ws) for ws in world_sizes for c in checks_run if c.applies(ws)])
    try:
        _run_sizes(checks_run, world_sizes, impl_dir, modules, dtype, budgets, backend,
                   timeout_scale, hung, results, total, progress, expect)
    finally:
        expect.close()
    order = {c.id: i for i, c in enumerate(checks)}
    tasks = {c.id: c.task_id for c in checks}
    for r in results:
        r.task = tasks.get(f"{r.exercise}.{r.check}", "")
    results.sort(key=lambda r: (EXERCISES.index(r.exercise), order[f"{r.exercise}.{r.check}"],
                                r.world_size))
    _blame_earlier_tasks(results)
    if progress:
        progress(total, total, "done")
    return results


def _task_order(check) -> tuple:
    """(exercise, task) position of a check in the course table (stable sort: within a task,
    the order the checks are defined in)."""
    ex = course.exercise(check.exercise)
    tasks = [t.id for t in ex.tasks]
    return (EXERCISES.index(check.exercise),
            tasks.index(check.task_id) if check.task_id in tasks else len(tasks))


def _blame_earlier_tasks(results: list[Result]) -> None:
    """Tasks build on the earlier ones of their exercise (rotate finds its peers with
    ring_peers), and a variant of a check (its name and a suffix, or a subgroup check) on
    the functions the plain checks test: where such an earlier check failed, a later check's
    failure names it as the likely cause, instead of a hint about its own code that may not
    hold."""
    failed: list[Result] = []       # failing results so far, in report order
    for r in results:
        if r.passed or r.status == "notimpl" or not r.task:
            continue
        order = [t.id for t in course.exercise(r.exercise).tasks]
        rank = order.index(r.task) if r.task in order else -1

        def explains(e: Result) -> bool:
            if e.exercise != r.exercise or e.check == r.check or e.task not in order:
                return False
            earlier = order.index(e.task)
            return earlier < rank or r.check.startswith(e.check + "_") or (
                "subgroup" in r.check.lower() and "subgroup" not in e.check.lower()
                and earlier <= rank)
        cause = next((e for e in failed if explains(e)), None)
        if cause is not None:
            then = f"; if this check still fails after that: {r.hint}" if r.hint else ""
            r.hint = (f"this may follow from [{cause.task}] {cause.exercise}.{cause.check}, "
                      f"which fails its own check (above): fix that first{then}")
        failed.append(r)


def _run_sizes(checks_run, world_sizes, impl_dir, modules, dtype, budgets, backend,
               timeout_scale, hung, results, total, progress, expect) -> None:
    """One worker group per world size, smallest first; `results` grows as they finish."""
    for ws in world_sizes:
        todo = [c for c in checks_run if c.applies(ws)]
        for c in [c for c in todo if c.id in hung]:
            first = hung[c.id]
            results.append(Result(c.exercise, c.name, ws, "deadlock", phase=first.phase,
                                  message=f"not run: it did not finish at world size "
                                          f"{first.world_size} ({first.message.split(';')[0]})",
                                  hint=first.hint))
        todo = [c for c in todo if c.id not in hung]
        for c in [c for c in todo if budgets.spent(c)]:
            results.append(_over_budget(c, ws, budgets))
        todo = [c for c in todo if not budgets.spent(c)]
        if not todo:
            continue
        finished = len(results)
        tick = (lambda i, ws=ws, base=finished: progress(base + i, total, f"world size {ws}")) \
            if progress else None
        backend_ws = backend
        res, outcomes = _run_world(todo, ws, impl_dir, modules, dtype, budgets, backend_ws,
                                   STALL * timeout_scale, tick, expect)
        _compare_with_reference(res, outcomes, todo, ws, impl_dir, modules, dtype,
                                backend_ws, expect)
        hung.update({f"{r.exercise}.{r.check}": r for r in res if r.status == "deadlock"})
        results += res


def _compare_with_reference(results, outcomes, checks, ws, impl_dir, modules, dtype,
                            backend, expect=None) -> None:
    """Instructor edition: tell how the reference communicated where a check failed."""
    if edition() != "instructor":  # the student edition has no reference to compare with
        return
    from rtp_course.instructor import reference
    ref_dir = reference.reference_dir()
    failed = [r for r in results if r.status == "failed" and r.phase and r.rank is not None]
    if ref_dir is None or str(ref_dir) == impl_dir or not failed:
        return
    by_name = {c.name: c for c in checks}
    wanted = [by_name[r.check] for r in failed if r.check in by_name]
    missing = [c for c in wanted if reference.load(c, ws, dtype) is None]
    if missing:
        _, ref_outcomes = _run_world(missing, ws, str(ref_dir), modules, dtype, _Budgets(),
                                     backend, expect=expect)
        for c in missing:
            if c.id in ref_outcomes:
                reference.save(c, ws, dtype, ref_outcomes[c.id])
    for r in failed:
        c = by_name.get(r.check)
        if c is not None:
            reference.annotate(r, outcomes.get(c.id), reference.load(c, ws, dtype))


def _judging(todo, ws, rundir: Path, expect, judged: dict, relay=None):
    """Judge each check as soon as every rank has written its result (its status says "done"
    or a later check), while the ranks go on: reading and comparing results took the parent
    4 s of the public suite with the ranks idle. The relay first reads what the ranks have
    sent (`settle`): everything a result depends on was sent before it was written.
    `judged`: {check id: (outcomes, Result)}."""
    def on_change(statuses):
        finished = min(((st or {}).get("index", -1) + ((st or {}).get("phase") == "done")
                        for st in statuses.values()), default=0)
        for i, check in enumerate(todo[:max(finished, 0)]):
            if check.id in judged:
                continue
            try:
                outcomes = _load_outcomes(rundir, check.id, ws)
                if outcomes is None or (relay is not None and not relay.settle()):
                    return
                _attach_account(outcomes, relay, i)
                judged[check.id] = (outcomes, _judge(check, ws, outcomes, expect))
            except Exception:  # noqa: BLE001 - judged again, and reported, after the launch
                return
    return on_change


def _now(fn, *args) -> concurrent.futures.Future:
    """fn(*args), done, as a future (a launch without an expectations thread)."""
    future = concurrent.futures.Future()
    try:
        future.set_result(fn(*args))
    except Exception as e:  # noqa: BLE001 - the future carries it
        future.set_exception(e)
    return future


def _attach_account(outcomes: dict, relay, index: int) -> None:
    """Each rank's operations in check `index` of the launch, as the relay carried them
    (checker/audit.py holds the rank's log against them); what a rank posted before its
    first check (at import) counts toward the first."""
    if relay is None:
        return
    notes = dict(relay.account.notes)
    for r, o in outcomes.items():
        o["carried"] = (relay.account.of(r, None) if index == 0 else []) \
            + relay.account.of(r, index)
        o["relay_notes"] = notes


def _over_budget(check, ws, budgets: "_Budgets") -> Result:
    reason = budgets.spent(check) or "run"
    if reason == "hang":
        return Result(check.exercise, check.name, ws, "deadlock",
                      message=f"not run: {budgets.why('hang', check.exercise)}",
                      hint="fix the hang reported above first; the checks after it then run again")
    return Result(check.exercise, check.name, ws, "failed",
                  message=f"not run: {budgets.why(reason, check.exercise)}",
                  hint=SLOW_HINT)


SLOW_HINT = ("each check computes on tensors of a few kilobytes, in well under a second: look "
             "for a Python loop over elements, a sleep, or communication repeated in a loop; "
             "on a slow machine, --timeout-scale gives every check and budget more time")


def _run_world(todo, ws, impl_dir, modules, dtype, budgets, backend, stall=STALL, tick=None,
               expect=None):
    """Run `todo` on `ws` ranks; returns (results, {check id: per-rank outcomes}).

    `budgets` is charged for the time every check took, hung or not; an exercise that has
    used its budget runs no further checks, and neither does any once the run has used its."""
    results, seen = [], {}
    while todo:
        first_of_launch = len(results)    # this launch's results start here
        rundir = Path(tempfile.mkdtemp(prefix=reaper.temp_prefix(f"check-w{ws}")))
        job = dict(rundir=str(rundir), impl=impl_dir, modules=modules, backend=backend,
                   check_ids=[c.id for c in todo], dtype=dtype,
                   file_cap_mb=int(os.environ.get("RTP_COURSE_RANK_FILE_MB", 0)) or None,
                   memory_cap_mb=int(os.environ.get("RTP_COURSE_RANK_MEMORY_MB", 0)) or None,
                   disk_cap_mb=int(os.environ.get("RTP_COURSE_RANK_DISK_MB", 0)) or None,
                   confine=os.environ.get("RTP_COURSE_CONFINE", "1") != "0")
        relayed = backend == "gloo" and relay_supported()
        if not relayed:             # a relay rank asks the parent for its inputs instead
            inputs.write_rank_keys(rundir, ws)
        deadline = sum(budgets.limit(c)[0] for c in todo) + STARTUP + 60   # the watchdog's backstop
        failure, judged = None, {}
        # On CPU every byte between the ranks crosses the relay (runtime/relay), which keeps
        # the account of it; NCCL ranks talk to each other directly.
        relay = Relay(ws, inputs.Provider(ws, todo, expect.urgent if expect else _now),
                      checks=len(todo)).start() if relayed else None
        watchdog = _Watchdog(rundir, ws, todo, budgets, stall,
                             tick and (lambda i, base=len(results): tick(base + i)),
                             _judging(todo, ws, rundir, expect, judged, relay),
                             disk_mb=job["disk_cap_mb"] or DISK_CAP_MB)
        try:
            launch(run_checks, ws, args=(job,), backend=backend, timeout=deadline, rundir=rundir,
                   env=NCCL_ENV if backend == "nccl" else None, on_poll=watchdog,
                   capture_output=True, relay=relay)
        except (_Stuck, RankFailed, RankHung) as e:
            failure = e
        except LaunchError:
            shutil.rmtree(rundir, ignore_errors=True)    # nothing ran: nothing to keep
            raise
        finally:
            if relay is not None:
                relay.stop()
        if 0 <= watchdog.step < len(todo):  # the check the group ended in: its time, hung or not
            budgets.charge(todo[watchdog.step], watchdog.elapsed(),
                           hung=isinstance(failure, _Stuck) and failure.reason in ("own", "hang"))
        else:                               # starting, or leaving after the last check
            budgets.charge_run(watchdog.elapsed())
        done = 0
        for i, check in enumerate(todo):
            if check.id in judged:
                outcomes, result = judged[check.id]
            else:
                outcomes = _load_outcomes(rundir, check.id, ws)
                if outcomes is None:
                    break
                _attach_account(outcomes, relay, i)
                result = _judge(check, ws, outcomes, expect)
            results.append(result)
            seen[check.id] = outcomes
            done += 1
        confinement = _read_json(rundir / "confinement.0.json") or {}
        if relay is not None and confinement.get("describe"):
            confinement["describe"] += ", its ranks linked only through the relay"
        if isinstance(failure, _Stuck) and failure.check_id.startswith("import:"):
            module = failure.check_id.split(":", 1)[1]
            message = _import_hang_message(module, failure, impl_dir)
            results += [Result(c.exercise, c.name, ws, "deadlock", message, phase="import",
                               hint=IMPORT_HINT) for c in todo[done:] if c.exercise == module]
            todo = [c for c in todo[done:] if c.exercise != module]
            done = 0
        elif done < len(todo) and done > 0 and not _started(rundir, ws, todo[done]):
            pass    # the group ended after its last judged check (a rank whose relay link broke
            #         in that check left): the checks that remain run in a new group
        elif done < len(todo):
            broken = todo[done]
            results.append(_diagnose(broken, ws, rundir, failure, relay))
            done += 1
            over = [c for c in todo[done:] if budgets.spent(c)]
            results += [_over_budget(c, ws, budgets) for c in over]
            todo = todo[:done] + [c for c in todo[done:] if c not in over]
        printed = _printed(rundir, ws)
        for r in results[first_of_launch:]:    # what this launch's ranks printed, not another's
            r.details.setdefault("confinement", confinement.get("describe", ""))
            if printed and not r.passed:
                r.details["printed"] = printed
        shutil.rmtree(rundir, ignore_errors=True)
        todo = todo[done:]
    return results, seen


def _started(rundir: Path, ws: int, check) -> bool:
    """Whether some rank says it began `check` (its status names it)."""
    return any((_read_json(rundir / f"status.{r}.json") or {}).get("check") == check.id
               for r in range(ws))


def _printed(rundir: Path, ws: int, lines: int = 6) -> dict:
    """{rank: the last lines it printed}, for the report of a check that failed."""
    found = {}
    for r in range(ws):
        try:
            said = output.text(rundir, "stdout", r).read_text(errors="replace")
        except OSError:
            continue
        kept = [ln.rstrip() for ln in said.splitlines() if ln.strip()]
        if kept:
            found[r] = "\n".join(ln[:300] for ln in kept[-lines:])
    return found


DISK_HINT = ("code under test has nothing to write to disk: a check's results are a few "
             "tensors, kept in memory")
IMPORT_HINT = ("code at the top level of a module runs when it is imported: keep it to "
               "definitions, and move work into the functions the checks call")


def _import_hang_message(module: str, failure, impl_dir: str) -> str:
    where = ""
    for stack in failure.stacks.values():
        lines = [ln for ln in stack.splitlines() if impl_dir in ln]
        if lines:
            where = " at " + lines[0].strip().replace(impl_dir + "/", "")
            break
    return (f"importing {module}.py did not finish within {IMPORT_TIMEOUT:.0f} s{where}: an "
            f"endless loop or a blocking call at import time? Every check of {module} fails")


def _load_outcome(path: Path, rank: int):
    """A rank's outcome of one check, read as data (never unpickling code); None if missing."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        outcome = outcome_file.load(path)
        if not isinstance(outcome, dict) or outcome.get("status") not in OUTCOME_STATUSES:
            raise ValueError("not an outcome record")
        return outcome
    except Exception as e:
        why = str(e).splitlines()[0][:200] if isinstance(e, ValueError) and str(e) \
            else type(e).__name__
        return {"status": "error", "type": "MalformedResult", "phase": "",
                "message": f"rank {rank}'s result file is not a result the checker can judge "
                           f"({why}); it is not graded", "where": "",
                "records": {}, "values": {}, "events": [], "peak_recv": {}}


OUTCOME_STATUSES = ("ok", "notimpl", "error")


def _load_outcomes(rundir: Path, cid: str, ws: int):
    outcomes = {}
    for r in range(ws):
        o = _load_outcome(rundir / f"result.{cid}.{r}.pt", r)
        if o is None:
            return None
        outcomes[r] = o
    return outcomes


# (check id, world size) -> (check class, (expected, rules)): the public checks', computed once
# by the warm check server (cli/warm.py) before it forks its runs, which then only look them up.
_PRECOMPUTED = {}


def precompute_expectations(world_sizes=DEFAULT_WORLD_SIZES) -> None:
    """Every public check's expected values and rules, kept for the runs forked later."""
    for check in load_checks(check_modules(list(EXERCISES), False)):
        for ws in world_sizes:
            if check.applies(ws):
                _PRECOMPUTED[(check.id, ws)] = (type(check), _compute_expectation(check, ws))


def _expectation(check, ws):
    cls, found = _PRECOMPUTED.get((check.id, ws), (None, None))
    return found if cls is type(check) else _compute_expectation(check, ws)


def _compute_expectation(check, ws):
    with inputs.scope(check.id):          # the ranks' own data of this check (checker.inputs)
        return check.expected(ws), check.comm_rules(ws)


class _Expectations:
    """Every check's expected values and rules, computed in a thread of this process while
    the workers run (serial torch only, never student code): the parent is idle then, and a
    check is judged as soon as its results are in. The same thread builds the modules a relay
    rank asks for (checker.inputs.Provider), ahead of the expected values: both seed torch's
    global generator, and a rank waits for its module."""

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


def _judge(check, ws, outcomes, expect=None) -> Result:
    try:
        expected, rules = expect.get(check, ws) if expect else _expectation(check, ws)
    except Exception as e:  # a bug in the course's own check, not the student's
        return Result(check.exercise, check.name, ws, "error",
                      f"internal error in the check itself ({type(e).__name__}: {e}); "
                      f"please report it to the course staff")
    try:
        return judge(check, ws, outcomes, expected, rules)
    except Exception as e:  # noqa: BLE001 - what a rank wrote never crashes the grader
        return Result(check.exercise, check.name, ws, "error",
                      f"the checker could not compare what the ranks recorded "
                      f"({type(e).__name__}): the check fails; if your code returns plain "
                      f"dense tensors, please report it to the course staff")


MISMATCH_HINT = ("a process killed by the communication library usually means the ranks' "
                 "collectives did not match (a different order, count or size on some rank); "
                 "what the rank printed last is quoted above")


def _crash_hint(exit_code: int, in_call: bool, said: str = "") -> str:
    """Why a rank's process ended, by what it printed last, else by how it ended."""
    cause = exception_causes.hint_for(said, "sure")
    if cause:
        return cause
    if exit_code == 0:
        return ("code under test must return its result, never end the process "
                "(no sys.exit, os._exit or signals)")
    if exit_code == -signal.SIGABRT and in_call:
        return MISMATCH_HINT
    if exit_code == -signal.SIGSEGV:
        return ("a segmentation fault usually means a tensor used after its memory was freed, "
                "or a wrong-sized buffer given to a communication call")
    return "the process was killed from outside or by the system (out of memory?)"


def _diagnose(check, ws, rundir: Path, failure, relay=None) -> Result:
    """The check during which the group ended early."""
    partial = {r: o for r in range(ws)
               if (o := _load_outcome(rundir / f"result.{check.id}.{r}.pt", r)) is not None}
    if relay is not None:
        for o in partial.values():
            o["relay_notes"] = dict(relay.account.notes)
    for status in ("notimpl", "error"):  # the rank that failed first explains the rest
        for r, o in sorted(partial.items(), key=lambda item: (fallout(item[1]), item[0])):
            if o["status"] == status:
                res = judge(check, ws, partial, {}, [])
                stuck = [q for q in range(ws) if q not in partial]
                if stuck:
                    res.message += f" (rank(s) {stuck} were left waiting for it)"
                return res
    base = dict(exercise=check.exercise, check=check.name, world_size=ws)
    if isinstance(failure, _Stuck) and failure.reason == "disk":
        return Result(**base, status="error", message=failure.why, rank=failure.rank,
                      hint=DISK_HINT)
    if isinstance(failure, _Stuck) and failure.reason in ("exercise", "run"):
        where = _deadlock_message(check, failure.statuses, ws)[0].split("; ", 1)[-1]
        return Result(**base, status="failed", hint=SLOW_HINT,
                      message=f"{failure.why}: this check was stopped after "
                              f"{failure.elapsed:.0f} s; at that moment {where}",
                      details={"stacks": failure.stacks})
    if isinstance(failure, _Stuck):
        msg, rank = _deadlock_message(check, failure.statuses, ws, failure.why or "the check did not finish in time")
        return Result(**base, status="deadlock", message=msg, rank=rank,
                      phase=(failure.statuses.get(rank) or {}).get("phase", "") if rank is not None else "",
                      hint=hang_causes.hint_for(check.id, failure.statuses) or
                      check.hints.get("deadlock") or  # the check may know the usual cause
                      "every rank must make the same collective calls in the same order; "
                      "point-to-point sends need a matching receive on the peer (post the "
                      "irecv before a blocking send, or use isend/irecv together)",
                      details={"stacks": failure.stacks})
    if isinstance(failure, RankFailed) and failure.exit_code is not None and failure.exit_code <= 0:
        statuses = {r: _read_json(rundir / f"status.{r}.json") for r in range(ws)}
        st = statuses.get(failure.rank) or {}
        call = f", in {st['call']}" if st.get("call") else ""
        said = stderr_tail(rundir, failure.rank, lines=2)
        said = f"; its last words: {' / '.join(said.splitlines())}" if said else ""
        return Result(**base, status="error", rank=failure.rank, phase=st.get("phase", ""),
                      message=f"rank {failure.rank} crashed during phase '{st.get('phase', '?')}'"
                              f"{call}: {died_how(failure.exit_code)}{said}",
                      hint=_crash_hint(failure.exit_code, bool(st.get("call")), said))
    if isinstance(failure, RankFailed):
        statuses = {r: _read_json(rundir / f"status.{r}.json") for r in range(ws)}
        where = _deadlock_message(check, statuses, ws)[0].split("; ", 1)[-1]
        return Result(**base, status="error", rank=failure.rank,
                      phase=(statuses.get(failure.rank) or {}).get("phase", ""),
                      message=f"rank {failure.rank} crashed: {failure.traceback.splitlines()[-1]}; "
                              f"at that moment: {where}",
                      hint=MISMATCH_HINT,
                      details={"traceback": failure.traceback})
    if isinstance(failure, RankHung):
        return Result(**base, status="deadlock", message=str(failure).splitlines()[0],
                      details={"stacks": failure.stacks})
    return Result(**base, status="error", message="the worker group ended without a result")
