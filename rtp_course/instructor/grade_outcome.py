"""What one submission's code earned: its checks' results over the grading rounds, as points.

A check the machine was too busy to finish ("busy"), or that the budgets shared with other
checks left no time for ("notrun"), is not graded. `rtp-course grade` runs those checks
again, alone, after the other submissions, up to `ROUNDS - 1` times, and each check keeps
the verdict of the last round that graded it. What is still not graded after the
last round is left out of the points, never counted as failed: the points are computed over
the checks that were graded and marked provisional.

`code.json`, beside each exercise's report (checks/<student>/<assignment>/), records what
the grade rests on: `rtp-course export` refuses a class whose code points are missing or
were overwritten since, and `rtp-course points` says whom a new check re-weights.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rtp_course.checker import CheckReport
from rtp_course.checker.report import by_check

ROUNDS = 3              # the first grading and up to two regrades of what was not graded
STATUS = "code.json"
TIMES = {1: "once", 2: "twice"}


@dataclass
class CellGrade:
    """One grading cell of one submission."""
    grade_id: str
    notebook: str
    exercise: str
    max_points: float
    points: float | None        # None: nothing of it could be graded
    checks: int = 0             # checks run (each over its world sizes)
    not_graded: int = 0         # of which not graded (the machine too busy, or not run)
    regrades: int = 0           # rounds after the first that graded it again
    why: str = ""               # why it has no points, or how it got them without checks
    names: list = field(default_factory=list)    # the exercise's checks when it was graded

    @property
    def status(self) -> str:
        if self.points is None:
            return "not graded"
        return "provisional" if self.not_graded else "graded"

    def phrase(self, regrading: bool = False) -> str:
        """'comm 8.75/10 (1 check not graded, regraded twice)'."""
        again = "; regrading" if regrading else (f", regraded {TIMES.get(self.regrades, f'{self.regrades} times')}"
                                                  if self.regrades else "")
        if self.points is None:
            return f"{self.exercise} not graded ({self.why or 'machine busy'}{again})"
        text = f"{self.exercise} {self.points:g}/{self.max_points:g}"
        if self.not_graded:
            n = self.not_graded
            text += f" ({n} check{'s' * (n > 1)} not graded{again})"
        elif regrading:
            text += " (regrading)"
        return text


def merge(old: list, new: list) -> list:
    """Each check's results from `new`, unless `new` left it busy and `old` graded it."""
    before = by_check(old)
    merged = []
    for key, results in by_check(new).items():
        if CheckReport._busy(results) and key in before and not CheckReport._busy(before[key]):
            results = before[key]
        merged += results
    merged += [r for key, rs in before.items() if key not in by_check(new) for r in rs]
    return merged


def has_busy(results: list) -> bool:
    return CheckReport(results).not_graded() > 0


def stopped_ids(results: list) -> list[str]:
    """The tasks ("E4.4") of the checks that hung, were stopped for their own budget, or
    waited without computing (types.Result.spent_budgets)."""
    return sorted({r.task for r in results if r.task and r.spent_budgets})


def fail_not_run(results: list) -> None:
    """The checks still not run after the last round whose own task hung, spun or waited (its
    functions used the budgets): failed, saying why. A check of a task that did none of that
    stays not graded, whatever the others did: never failed by association."""
    stopped = set(stopped_ids(results))
    for r in results:
        if r.status == "notrun" and r.task in stopped:
            r.status = "failed"
            r.message = (f"{r.message}; after {ROUNDS} gradings it was still not run, and "
                         f"checks of its own task ({r.task}) hung, spun or waited without computing: "
                         f"it counts as failed")


def not_graded_ids(results: list) -> list[str]:
    """The ids ("rotation.rotate") of the checks left out of the points: to run again."""
    return [f"{ex}.{name}" for (ex, name), rs in by_check(results).items() if CheckReport._busy(rs)]


def grade_cell(cell, results: list | None, regrades: int = 0, why: str = "") -> CellGrade:
    """The cell's points from its exercise's results (None: not graded, `why` says why)."""
    grade = CellGrade(cell.grade_id, cell.notebook, cell.exercise, cell.points, None,
                      regrades=regrades, why=why)
    if results is None:
        return grade
    rep = CheckReport([r for r in results if r.exercise == cell.exercise])
    checks = by_check(rep.results)
    grade.checks, grade.not_graded = len(checks), rep.not_graded()
    grade.names = check_names(cell.exercise)
    if not grade.checks:            # nothing ran (no check applies at the world sizes asked)
        grade.why = grade.why or "no check of it ran"
        return grade
    if grade.not_graded == grade.checks:
        grade.why = grade.why or "no check could be graded: machine busy, or not run"
        return grade
    grade.points = round(cell.points * rep.score(cell.exercise), 2)
    return grade


def check_names(exercise: str) -> list[str]:
    """The exercise's checks, public and hidden, whatever world sizes a grading ran: what a
    grade rests on (a check added later re-weights it, `rtp-course points` says whom)."""
    from rtp_course.checker.registry import check_modules, hidden_dir, load_checks
    return sorted(c.name for c in load_checks(check_modules([exercise], hidden_dir() is not None)))


def line(student: str, assignment: str, grades: list, regrading: bool = False) -> str:
    """The summary line of one submission."""
    return f"{student}/{assignment}: " + ", ".join(g.phrase(regrading) for g in grades)


def write_status(path: Path, student: str, assignment: str, grades: list) -> None:
    """What the grade rests on (code.json), written next to the reports."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "student": student, "assignment": assignment,
        "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cells": {g.grade_id: {**asdict(g), "status": g.status} for g in grades}}, indent=1) + "\n")


def read_status(path: Path) -> dict | None:
    """{grade_id: CellGrade} from a code.json, or None if there is none (or it does not read)."""
    try:
        cells = json.loads(path.read_text())["cells"]
        return {gid: CellGrade(**{k: v for k, v in c.items() if k != "status"})
                for gid, c in cells.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
