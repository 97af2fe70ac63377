"""`rtp-course grade ASSIGNMENT`: the points for code, computed outside the students' notebooks.

`nbgrader autograde` runs each student's notebook in a kernel with the instructor's
permissions: a cell placed before the hidden grading cell could patch `grade()` and award
itself full marks. So while nbgrader autogrades (`nbgrader_config.py` sets
RTP_COURSE_GRADE_OUTSIDE=1), `grade()` in the notebook awards nothing and says so; this
command then runs the public and hidden checks on each student's collected modules,
confined, and writes the points into nbgrader's gradebook as the grading cells' autograded
scores, through nbgrader's own API (docs/INSTRUCTORS.md has the whole term):

    rtp-course autograde 03_tp_communication       # nbgrader autograde, spread over the cores
    rtp-course grade 03_tp_communication           # --jobs N: N submissions at once
    rtp-course export                              # refuses while code points are missing

Each submission is graded in a process of its own, on cores of its own, under a wall-clock
guard (`GUARD_S`); a failure while grading one never stops the next. A check the machine was
too busy to finish is graded again after the others (grade_outcome.ROUNDS). The checks'
report for each student and exercise is written next to the gradebook, in
checks/<student>/<assignment>/<exercise>.txt, and what the instructor should look at
(code that reaches into the grader, near copies) in review.csv. The command itself
(term.cli_grade) chooses between this machine and Slurm (grade_slurm.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.instructor import grade_outcome, grade_pool, grade_record
from rtp_course.instructor.grade_outcome import ROUNDS, CellGrade
# The names other modules and tests import from here.
from rtp_course.instructor.assignment import GradedCell, graded_cells, impl_dir  # noqa: F401
from rtp_course.instructor.grade_pool import cores_for, default_jobs, grading_pool  # noqa: F401
from rtp_course.instructor.grade_record import FEEDBACK_WIDTH, record, student_view  # noqa: F401

# Wall seconds one submission's grading may take in one round (x --timeout-scale). The
# checker's CPU budgets bound a submission's checks (checker/budgets.py: 300 CPU-s for a
# run, at most 150 s on 2 cores); this catches what they cannot (a grader stuck outside the
# checks, a machine so loaded that nothing moves) and reports "not graded" instead of hanging.
GUARD_S = 180.0


def run_checks(impl: str, exercises: list, world_sizes=None, timeout_scale: float = 1.0,
               only=None, later=()) -> dict:
    """{exercise: [Result]}: the public and hidden checks of `exercises` on `impl` (`only`:
    those check ids), confined, in one run (its CPU budget bounds the whole submission).
    Runs in a grading process."""
    import warnings
    from rtp_course.checker import engine
    from rtp_course.checker.registry import hidden_dir
    from rtp_course.instructor.grading import grading_backend
    from rtp_course.runtime.quiet import torch_warnings
    with warnings.catch_warnings():
        torch_warnings()
        results = engine.run(exercises, impl=impl, world_sizes=world_sizes,
                             hidden=hidden_dir() is not None, timeout_scale=timeout_scale,
                             backend=grading_backend(), confine=True, only=only, again=False,
                             later=later)
    return {ex: [r for r in results if r.exercise == ex] for ex in exercises}


@dataclass
class Submission:
    """One student's grading, over the rounds."""
    student: str
    impl: Path
    todo: list                                       # exercises to grade in the next round
    results: dict = field(default_factory=dict)      # exercise -> [Result], merged over rounds
    regrades: dict = field(default_factory=dict)     # exercise -> rounds after the first
    why: dict = field(default_factory=dict)          # exercise -> why it has no results
    error: str = ""                                  # the last failure's full text
    only: list | None = None                         # check ids to run in the next round (None: all)
    later: list = field(default_factory=list)        # tasks that hung, spun or waited: run last

    def take(self, outcome: grade_pool.Outcome, again: bool, last: bool = False) -> None:
        """A round's outcome: merge its results; keep to do what is still not graded. After
        the last round a check still not run (the submission's own checks spent the budgets
        in every round) counts as failed: budgets are CPU time, never the machine's."""
        for ex in self.todo:
            self.regrades[ex] = self.regrades.get(ex, 0) + again
        if outcome.ok:
            for ex in self.todo:
                self.results[ex] = grade_outcome.merge(self.results.get(ex, []), outcome.value.get(ex, []))
                self.why.pop(ex, None)
                if last:
                    grade_outcome.fail_not_run(self.results[ex])
            self.todo = [ex for ex in self.todo if grade_outcome.has_busy(self.results[ex])]
            # a regrade runs only what was not graded: a check that passed or failed keeps its
            # verdict, and the checks whose functions hung, spun or waited run after the others
            self.only = [cid for ex in self.todo for cid in grade_outcome.not_graded_ids(self.results[ex])]
            self.later = [cid for ex in self.todo for cid in grade_outcome.stopped_ids(self.results[ex])]
        else:
            self.error = outcome.error
            self.why.update({ex: outcome.error.splitlines()[0] for ex in self.todo})

    def grades(self, cells) -> list[CellGrade]:
        out = []
        for c in cells:
            if not (self.impl / f"{c.exercise}.py").is_file():
                out.append(CellGrade(c.grade_id, c.notebook, c.exercise, c.points, 0.0,
                                     why=f"rtp_course/{c.exercise}.py was not handed in"))
                continue
            out.append(grade_outcome.grade_cell(c, self.results.get(c.exercise),
                                                self.regrades.get(c.exercise, 0),
                                                self.why.get(c.exercise, "")))
        return out


@dataclass
class ClassGrades:
    """What `grade_class` did: each student's grades, and who is not fully graded."""
    grades: dict = field(default_factory=dict)       # student -> [CellGrade]
    failed: dict = field(default_factory=dict)       # student -> why (not graded or not recorded)

    def final(self, student: str) -> bool:
        return student not in self.failed and all(g.status == "graded" for g in self.grades[student])


def grade_class(course: Path, assignment: str, cells, students, jobs: int = 1, world_sizes=None,
                timeout_scale: float = 1.0, log=print, write=True) -> ClassGrades:
    """Grade `students` in rounds: everyone, then (after the others) the exercises that had a
    check the machine was too busy for, the last round alone. Each student's reports are
    written (and, with `write`, the gradebook) as soon as their grade is final."""
    exercises = [ex for ex in EXERCISES if ex in {c.exercise for c in cells}]
    subs = {}
    for s in students:
        impl = impl_dir(course, assignment, s)
        subs[s] = Submission(s, impl, [ex for ex in exercises if (impl / f"{ex}.py").is_file()])
    out = ClassGrades()
    for rnd in range(ROUNDS):
        todo = [sub for sub in subs.values() if sub.todo and sub.student not in out.grades]
        if not todo:
            break
        last = rnd == ROUNDS - 1

        def done(outcome, rnd=rnd, last=last):
            sub = subs[outcome.key]
            sub.take(outcome, again=rnd > 0, last=last)
            if sub.todo and not last:
                log(grade_outcome.line(sub.student, assignment, sub.grades(cells), regrading=True))
                return
            _finish(course, assignment, cells, sub, out, log, write)
        tasks = [(sub.student, run_checks, (str(sub.impl), sub.todo, world_sizes, timeout_scale,
                                            sub.only or None, sub.later))
                 for sub in todo]
        grade_pool.run(tasks, 1 if last and rnd else jobs, GUARD_S * timeout_scale, done)
    for sub in subs.values():                # nothing to check (no module handed in)
        if sub.student not in out.grades:
            _finish(course, assignment, cells, sub, out, log, write)
    return out


def _finish(course, assignment, cells, sub: Submission, out: ClassGrades, log, write: bool) -> None:
    """Reports, gradebook and summary line of one student; a failure here is theirs alone."""
    grades = sub.grades(cells)
    out.grades[sub.student] = grades
    try:
        grade_record.write_reports(course, assignment, sub.student, grades, sub.results, sub.impl)
        points = {g.grade_id: g.points for g in grades}
        if write and not grade_record.record(course, assignment, sub.student, cells, points, log, grades):
            out.failed[sub.student] = "not in the gradebook"
        elif not write:
            log(grade_outcome.line(sub.student, assignment, grades))
    except Exception as e:                   # a disk, a gradebook that would not write
        out.failed[sub.student] = f"{type(e).__name__}: {e}"
        log(f"{sub.student}/{assignment}: NOT RECORDED: {type(e).__name__}: {e}")
    if any(g.points is None for g in grades):
        out.failed.setdefault(sub.student, "not graded")
        detail = sub.error.split("\n", 1)[1:]         # the traceback's tail, below its line
        if detail:
            log("    " + detail[0].replace("\n", "\n    "))


def grade_student(course: Path, assignment: str, student: str, cells, world_sizes=None,
                  timeout_scale: float = 1.0) -> dict:
    """{grade_id: points} of one student, graded alone (a Slurm array task), rounds included;
    the reports and code.json are written, the gradebook is not. Raises when some cell could
    not be graded, so that the task fails and the merge names the student."""
    grades = grade_class(course, assignment, cells, [student], jobs=1, world_sizes=world_sizes,
                         timeout_scale=timeout_scale, write=False).grades[student]
    missing = [g.phrase() for g in grades if g.points is None]
    if missing:
        raise RuntimeError(f"{student}/{assignment}: " + ", ".join(missing))
    return {g.grade_id: g.points for g in grades}


def grade_assignment(course: Path, assignment: str, students=None, jobs: int = 1, world_sizes=None,
                     timeout_scale: float = 1.0, log=print) -> ClassGrades:
    """Grade every (or the named) student of the assignment, then review the class."""
    from rtp_course.instructor import review_class
    cells = graded_cells(course, assignment)
    if not cells:
        raise ValueError(f"no grading cell of {course / 'source' / assignment} calls "
                         f"grade(<exercise>): nothing to grade by `rtp-course grade` (a quiz is "
                         f"graded by `rtp-course autograde` alone)")
    found = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}"))
    unknown = sorted(set(students or ()) - set(found))
    if unknown:
        raise ValueError(f"no submission of {assignment} by {', '.join(unknown)} in "
                         f"{course / 'submitted'}")
    chosen = [s for s in found if not students or s in students]
    graded = grade_class(course, assignment, cells, chosen, jobs, world_sizes, timeout_scale, log)
    review_class.review(course, assignment, cells, graded, log)
    return graded
