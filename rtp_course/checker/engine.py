"""Run checks: select and order them, one launch group per world size, the verdict here.

The parent never imports the code under test. For each world size, smallest first,
group.run_world launches the ranks (worker.run_checks), its watchdog follows them, and
each check is judged in this process (judging.py) as soon as every rank has written its
result. A check that hung, or was too slow, at one world size is not run again at larger
ones. Checks that a budget shared with other checks left no time for ("not run") are run
once more, with fresh budgets (grading leaves them to its next round instead): a hang or a
slow loop in one function costs only the checks that call it, and the whole run stays
bounded (twice the run's budget at most).
"""
from __future__ import annotations

from pathlib import Path

from rtp_course import course
from rtp_course.checker import budgets as B
from rtp_course.checker import diagnosis, reference
from rtp_course.checker.group import over_budget, run_world
from rtp_course.checker.judging import BY_EXCEPTION, Expectations, judge
from rtp_course.checker.registry import check_modules, load_checks
from rtp_course.checker.types import Outcome, Result, Verdict
from rtp_course.checker.worker import syntax_error_outcome
from rtp_course.course import COURSE, EXERCISES, edition
from rtp_course.course.impl import resolve
from rtp_course.runtime.launcher import default_backend, validate

DEFAULT_WORLD_SIZES = tuple(sorted({n for ex in COURSE for n in ex.world_sizes}))


def _syntax_errors(exercises, impl_dir: str) -> dict[str, Outcome]:
    """{exercise: outcome} for exercise files of the code under test that do not parse.

    compile() only parses: nothing of the student's runs in this process."""
    bad = {}
    for ex in exercises:
        path = Path(impl_dir) / f"{ex}.py"
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except SyntaxError as e:
            bad[ex] = Outcome.parse(syntax_error_outcome(e))
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
        timeout=None, confine=None, again=True, later=()) -> list[Result]:
    """Run the checks of `exercises` on `impl`; return one Result per check and world size.
    `only`: the checks to run, by name, id or task ("E3.1": every check of that task).

    Budgets are CPU time (checker/budgets.py), x `timeout_scale`; `timeout` is every check's
    CPU budget and lifts the exercise and run budgets (a person debugging). `confine`: run
    the code under test confined (rtp_course/confinement); default: with the hidden checks,
    as grading does. `again`: run what a shared budget left "not run" once more (grading
    leaves them to its next round, each round under its guard). `later`: task ids whose
    checks run after the others (their functions hung, spun or waited in an earlier run)."""
    budgets = B.Budgets(timeout_scale, timeout)
    confine = hidden if confine is None else confine
    exercises = list(exercises or EXERCISES)
    for ex in exercises:
        if ex not in EXERCISES:
            raise ValueError(f"unknown exercise {ex!r}: choose from {', '.join(EXERCISES)}")
    impl_dir = str(resolve(impl))
    modules = check_modules(exercises, hidden)
    checks = sorted(load_checks(modules), key=_task_order)   # a task's checks before later tasks'
    checks.sort(key=lambda c: c.task_id in later)           # stable: what hung before goes last
    if only:   # check names or ids, or task ids ("E3.1": every check of that task)
        unknown = [n for n in only if not any(n in (c.name, c.id, c.task_id) for c in checks)]
        if unknown:
            raise ValueError(f"no check named {', '.join(map(repr, unknown))} in "
                             f"{', '.join(exercises)}; its checks are "
                             f"{', '.join(c.name for c in checks)}")
        checks = [c for c in checks if c.name in only or c.id in only or c.task_id in only]
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
        results += [judge(c, ws, {0: unreadable[c.exercise]}, expect=BY_EXCEPTION)
                    for ws in world_sizes if c.applies(ws)]
    checks_run = [c for c in checks if c.exercise not in unreadable]
    hung: dict[str, Result] = {}   # check id -> where it hung or was too slow: not run at larger sizes
    plan = _later_last([(ws, [c for c in checks_run if c.applies(ws)]) for ws in world_sizes],
                       set(later))
    total = len(results) + sum(len(todo) for _, todo in plan)
    expect = Expectations([(c, ws) for ws, todo in plan for c in todo])
    run_plan = lambda plan, budgets, progress: _run_sizes(      # noqa: E731
        plan, impl_dir, modules, dtype, budgets, backend, hung, results, total, progress,
        expect, confine)
    try:
        run_plan(plan, budgets, progress)
        task_of = {c.id: c.task_id for c in checks}
        left = _not_run(results, plan, _stopped_tasks(results, task_of)) if again else []
        if left:
            run_plan(left, B.Budgets(timeout_scale, timeout), None)
    finally:
        expect.close()
    order = {c.id: i for i, c in enumerate(checks)}
    tasks = {c.id: c.task_id for c in checks}
    for r in results:
        r.task = tasks.get(f"{r.exercise}.{r.check}", "")
    results.sort(key=lambda r: (EXERCISES.index(r.exercise), order[f"{r.exercise}.{r.check}"],
                                r.world_size))
    diagnosis.blame_earlier_tasks(results, {c.id: c for c in checks})
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


def _not_run(results: list, plan, last_tasks=frozenset()) -> list:
    """The plan of the checks a shared budget left "not run", taken out of `results`; those of
    `last_tasks` after the others."""
    left = {(r.exercise, r.check, r.world_size) for r in results if r.status == Verdict.NOTRUN}
    results[:] = [r for r in results if r.status != Verdict.NOTRUN]
    return _later_last([(ws, [c for c in todo if (c.exercise, c.name, ws) in left])
                        for ws, todo in plan], set(last_tasks))


def _later_last(plan, last_tasks: set) -> list:
    """`plan` with the checks of `last_tasks` after every other check, at every world size:
    what hung, spun or waited before cannot spend the budgets the others need, at any size."""
    if not last_tasks:
        return [(ws, todo) for ws, todo in plan if todo]
    first = [(ws, [c for c in todo if c.task_id not in last_tasks]) for ws, todo in plan]
    then = [(ws, [c for c in todo if c.task_id in last_tasks]) for ws, todo in plan]
    return [(ws, todo) for ws, todo in first + then if todo]


def _stopped_tasks(results: list, task_of: dict) -> set:
    """The tasks of the checks that hung, spun past their own budget or waited."""
    return {task_of.get(f"{r.exercise}.{r.check}") for r in results if r.spent_budgets}


def _run_sizes(plan, impl_dir, modules, dtype, budgets, backend,
               hung, results, total, progress, expect, confine) -> None:
    """One worker group per world size of `plan` ([(world size, checks)], smallest first);
    `results` grows as they finish."""
    for ws, todo in plan:
        for c in [c for c in todo if c.id in hung]:
            first = hung[c.id]
            results.append(Result(c.exercise, c.name, ws, first.status, phase=first.phase,
                                  message=f"not run: it did not finish at world size "
                                          f"{first.world_size} ({first.message.split(';')[0]})",
                                  hint=first.hint, details={"not_run_after": first.world_size}))
        todo = [c for c in todo if c.id not in hung]
        for c in [c for c in todo if budgets.spent(c)]:
            results.append(over_budget(c, ws, budgets))
        todo = [c for c in todo if not budgets.spent(c)]
        if not todo:
            continue
        finished = len(results)
        tick = (lambda i, ws=ws, base=finished: progress(base + i, total, f"world size {ws}")) \
            if progress else None
        res, outcomes = run_world(todo, ws, impl_dir, modules, dtype, budgets, backend, tick,
                                  expect, confine)
        _compare_with_reference(res, outcomes, todo, ws, impl_dir, modules, dtype, backend,
                                expect)
        hung.update({f"{r.exercise}.{r.check}": r for r in res if r.never_returned})
        results += res


def _compare_with_reference(results, outcomes, checks, ws, impl_dir, modules, dtype,
                            backend, expect=None) -> None:
    """Instructor edition: tell how the reference communicated where a check failed."""
    if edition() != "instructor":  # the student edition has no reference to compare with
        return
    ref_dir = reference.reference_dir()
    failed = [r for r in results if r.status == Verdict.FAILED and r.phase and r.rank is not None]
    if ref_dir is None or str(ref_dir) == impl_dir or not failed:
        return
    by_name = {c.name: c for c in checks}
    wanted = [by_name[r.check] for r in failed if r.check in by_name]
    missing = [c for c in wanted if reference.load(c, ws, dtype) is None]
    if missing:
        _, ref_outcomes = run_world(missing, ws, str(ref_dir), modules, dtype, B.Budgets(),
                                    backend, expect=expect)
        for c in missing:
            if c.id in ref_outcomes:
                reference.save(c, ws, dtype, ref_outcomes[c.id])
    for r in failed:
        c = by_name.get(r.check)
        if c is not None:
            reference.annotate(r, outcomes.get(c.id), reference.load(c, ws, dtype))
