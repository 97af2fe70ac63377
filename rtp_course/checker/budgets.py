"""What a submission's checks may spend, in CPU time, so that load never changes a verdict.

A check is charged the CPU time its ranks used (all their threads), which a busy machine
stretches in wall time but hardly changes. Each check has its own CPU budget
(`Check.cpu_budget`), an exercise's checks share one, and so do all the checks of a run: a
submission is graded in bounded CPU time whatever its code does. Time spent hung (every
rank blocked, see watchdog.py) is charged to an exercise's hang budget, so an exercise
whose checks deadlock one after another stops early.

A budget shared with other checks never fails a check: one that it left no time for, or cut
short, is "not run" (not graded), and the engine runs those again with fresh budgets. Only a
check's own budget, or its own hang, fails it; the report names the checks that spent the
shared ones. Time every rank spent waiting without computing (no rank starved, no step of
the checker's own) is charged to the hang budget too, hang or not: code that sleeps a little
under the stall between its calls spends it, where correct code spends next to nothing, and
a check that waited `WAITED` seconds marks its task as one that spent it (types.Result).

Wall time decides one thing only: a check still running after `BACKSTOP` seconds is
stopped. If its ranks were starved (waiting for a CPU) most of that time, it is not graded
("the machine was too busy; run it again"); otherwise the code was too slow.
"""
from __future__ import annotations

from rtp_course.checker.types import SHARED, StopReason
from rtp_course.course import EXERCISES

STALL = 6.0              # s with every rank blocked (on no CPU and waiting for none): a hang
HANG_BUDGET = 20.0       # s an exercise's checks may spend hung or waiting, in all
WAITED = 2.0             # s a check's ranks waited without computing: it spent the hang budget
EXERCISE_CPU = 120.0     # CPU-s the checks of one exercise may use, at every world size
RUN_CPU = 300.0          # CPU-s the checks of one run (a submission) may use
START_CPU = 40.0         # CPU-s for a launch's ranks to start, join and import the code
IMPORT_CPU = 10.0        # CPU-s to import one exercise module of the code under test
BACKSTOP = 120.0         # wall s a check may run at most, however busy the machine
LEAVING = 15.0           # wall s for ranks done with every check to leave (NCCL's destroy)

BUSY_START = ("not graded: the ranks lost their connections to each other before they "
              "imported your code, twice: the machine's network or load, not your code; run it again")
BUSY = ("not graded: the machine was too busy to finish this check (its processes waited "
        "for a CPU most of the time); run it again")
SLOW_HINT = ("each check computes on tensors of a few kilobytes, in well under a CPU-second: "
             "look for a Python loop over elements, a sleep, or communication repeated in a "
             "loop")


class Budgets:
    """The CPU-time budgets of one run, x `scale`. An explicit `timeout` (a person debugging)
    is every check's CPU budget and lifts the exercise and run budgets."""

    def __init__(self, scale: float = 1.0, timeout: float | None = None):
        self.scale, self.timeout = scale, timeout
        lifted = float("inf") if timeout else None
        self.hang_left = {ex: HANG_BUDGET * scale for ex in EXERCISES}
        self.left = {ex: lifted or EXERCISE_CPU * scale for ex in EXERCISES}
        self.run_left = lifted or RUN_CPU * scale
        self.stall = STALL * scale
        self.backstop = max(BACKSTOP * scale, 4 * (timeout or 0))
        self.used: dict = {}       # check id -> (CPU-s, hung s) it spent, world sizes added up

    def limit(self, check) -> tuple[float, StopReason]:
        """(CPU-s the check may still use, which budget that is)."""
        own = self.timeout or check.cpu_budget * self.scale
        return min((own, StopReason.OWN), (self.left.get(check.exercise, own), StopReason.EXERCISE),
                   (self.run_left, StopReason.RUN), key=lambda x: x[0])

    def stall_for(self, check) -> float:
        """Seconds of blocking that make a hang: never more than the exercise's hang budget."""
        return max(min(self.stall, self.hang_left.get(check.exercise, self.stall)),
                   1.0 * self.scale)

    def charge(self, check, cpu: float, hung: float = 0.0) -> None:
        was = self.used.get(check.id, (0.0, 0.0))
        self.used[check.id] = (was[0] + cpu, was[1] + hung)
        if check.exercise in self.left:
            self.left[check.exercise] -= cpu
            self.hang_left[check.exercise] -= hung
        self.run_left -= cpu

    def charge_run(self, cpu: float) -> None:
        self.run_left -= cpu

    def spent(self, check) -> StopReason | None:
        """Why no more of the check's exercise runs (its hang, exercise or run budget), or None."""
        if self.hang_left.get(check.exercise, 1) <= 0:
            return StopReason.HANG
        if self.left.get(check.exercise, 1) <= 0:
            return StopReason.EXERCISE
        return StopReason.RUN if self.run_left <= 0 else None

    def spenders(self, exercise: str = "", hung: bool = False) -> str:
        """'ring_reduce_scatter (40 CPU-s), rotate (21 CPU-s)': the checks (of `exercise`, or of
        the run) that spent most of a shared budget."""
        which = 1 if hung else 0
        top = sorted(((u[which], cid) for cid, u in self.used.items()
                      if u[which] >= 0.5 and exercise in ("", cid.split(".")[0])), reverse=True)[:3]
        unit = "s hung or waiting" if hung else "CPU-s"
        return ", ".join(f"{cid.split('.', 1)[1]} ({u:.0f} {unit})" for u, cid in top)

    def why(self, reason: str, exercise: str = "", used: float = 0.0, limit: float = 0.0) -> str:
        """The sentence a report gives for a budget that stopped a check."""
        if reason in (StopReason.HANG, *SHARED):
            return self._shared(reason, exercise)
        return (f"too slow: its ranks used {used:.1f} CPU-seconds, and this check allows "
                f"{limit:.0f}")

    def _shared(self, reason: str, exercise: str) -> str:
        if reason == StopReason.HANG:
            spent = (f"checks of {exercise} hung or waited without computing for "
                     f"{HANG_BUDGET * self.scale:.0f} s in all (an exercise's hang budget)")
        elif reason == StopReason.EXERCISE:
            spent = (f"checks of {exercise} used the {EXERCISE_CPU * self.scale:.0f} CPU-seconds "
                     f"an exercise's checks may use in all")
        else:
            spent = (f"checks of this run used the {RUN_CPU * self.scale:.0f} CPU-seconds a run's "
                     f"checks may use in all")
        who = self.spenders("" if reason == StopReason.RUN else exercise,
                            hung=reason == StopReason.HANG)
        return f"{spent}{f', most of it {who}' if who else ''}"
