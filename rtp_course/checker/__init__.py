"""The course checker: `check("comm")` from a notebook, `rtp-course check comm` from a shell."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from rtp_course.checker import report
from rtp_course.checker.engine import DEFAULT_WORLD_SIZES, run
from rtp_course.checker.types import NOT_GRADED, Result
from rtp_course.runtime.quiet import torch_warnings


@dataclass
class CheckReport:
    results: list

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def score(self, exercise: str | None = None) -> float:
        """Weighted fraction of the GRADED checks (over every world size) that pass: partial
        credit for grading. A check the machine was too busy to finish (and that failed at no
        other world size) is left out, never counted as failed; a check weighs what the course
        table says (`Exercise.weights`), 1 by default. 0.0 when no check was graded."""
        graded = [(self.weight(*key), all(r.passed for r in rs))
                  for key, rs in self._checks(exercise) if not self._busy(rs)]
        total = sum(w for w, _ in graded)
        return sum(w for w, ok in graded if ok) / total if total else 0.0

    def not_graded(self, exercise: str | None = None) -> int:
        """Checks left out of `score`: the machine was too busy to finish them, or what other
        checks spent left no budget to run them."""
        return sum(self._busy(rs) for _, rs in self._checks(exercise))

    def _checks(self, exercise):
        return report.by_check([r for r in self.results if exercise in (None, r.exercise)]).items()

    @staticmethod
    def _busy(results) -> bool:
        """Not graded: some world size was not graded (too busy, or no budget left to run it),
        and none failed."""
        return any(r.status in NOT_GRADED for r in results) and \
            all(r.passed or r.status in NOT_GRADED for r in results)

    @staticmethod
    def weight(exercise: str, name: str) -> float:
        """Check `name`'s weight in its exercise's points: the course table's, 1 by default."""
        from rtp_course import course
        row = course.BY_MODULE.get(exercise)
        return float(dict(row.weights).get(name, 1.0)) if row else 1.0

    def __str__(self):
        return report.text(self.results)

    def _repr_pretty_(self, p, cycle):  # IPython shows the diagnosis, not a dataclass dump
        p.text(str(self))


def check(*exercises, impl=None, world_sizes=None, hidden=False, dtype=None,
          quiet=False, only=None, timeout_scale=1.0, grading=False,
          backend=None) -> CheckReport:
    """Run the checks of `exercises` (all if none) on `impl` and print the diagnosis.

    During nbgrader's autograding the notebook's own check cells are skipped: the graded
    cells run the (hidden) checks, and running them twice doubles the grading time."""
    import os
    if os.environ.get("NBGRADER_EXECUTION") == "autograde" and not grading:
        if not quiet:
            print("check skipped while autograding: the graded cells run the checks")
        return CheckReport([])
    from rtp_course.course.impl import ImplError, default_impl
    from rtp_course.runtime.launcher import LaunchError
    with warnings.catch_warnings():
        torch_warnings()
        try:
            results = run(exercises or None, impl=impl or default_impl(), world_sizes=world_sizes,
                          hidden=hidden, dtype=dtype, only=only, timeout_scale=timeout_scale,
                          backend=backend)
        except (ImplError, LaunchError, ValueError, FileNotFoundError) as e:
            print(f"check: {e}")
            return CheckReport([])
        except KeyboardInterrupt:
            print("check interrupted: every process it started was stopped; run the cell again "
                  "for a verdict")
            return CheckReport([])
    rep = CheckReport(results)
    if not quiet:
        print(rep)
    return rep


__all__ = ["check", "CheckReport", "Result", "DEFAULT_WORLD_SIZES"]
