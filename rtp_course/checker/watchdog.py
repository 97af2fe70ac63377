"""The parent's watch over one launch: which check the ranks are in, and when to stop them.

Called by launcher.launch about every 0.1 s. A rank's status file (worker.Status) says
the check, phase and call it is in: the rank's word, so it only moves the watch forward
and can only stop the ranks sooner. What the ranks use is measured from outside
(runtime/procstat): the CPU time of each rank's processes, and whether they were blocked
(almost no CPU, and a main thread that does not wait to run) or starved (a main thread
waiting to run). The group is stopped when the current check

* has its ranks blocked for `Budgets.stall_for` seconds with no status changing, or for
  `HUNG_IN_ALL` times that in all while statuses changed (calls posted that never complete:
  a status is the rank's word, it cannot hold a hang off for ever), or each under `LOW` of a
  CPU for `LOW_IN_ALL` times it in all (a loop that sleeps and spins a little, which would
  otherwise run to the backstop): a hang;
* used more CPU time than its budget allows: too slow, however busy the machine;
* has run `BACKSTOP` wall seconds: not graded if its ranks were starved most of that time
  (the machine was too busy), too slow otherwise;
* has every rank blocked in the checker's own steps around a check (its status says
  `harness`: making the check's group, waiting for the others after it): a hang after 3 x
  the stall (slow connections under load get time; the rank's word only delays a verdict);
* never while this process, which serves the ranks' store, waited for a CPU most of the
  time (its own measurement, `_Own`): ranks waiting on it are not hung;
* or a rank wrote more than its disk cap in the run's directory.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from rtp_course.checker import budgets as B
from rtp_course.checker.types import Place, RankStatus, StopReason, read_statuses
from rtp_course.runtime import procstat, reaper

SAMPLE = 0.25            # s between two looks at the ranks' CPU
IDLE = 0.02              # a rank using less CPU than this per wall second is blocked (gloo's
                         # loop thread, polling, uses ~0.2%; a starved rank gets its share)
STARVED = 0.5            # a rank whose main thread waited this long per second to run is starved
LOW = 0.10               # every rank using less than this, not starved: the ranks wait (a loop
                         # that sleeps and polls a little is no computation)
LOW_IN_ALL = 3           # x the stall: a check's ranks this long low in all is a hang
DISK_FILES = 10000       # a rank's files in the run's directory
NEVER_SEEN = procstat.Usage(0.0, {}, 0.0)
HUNG_IN_ALL = 8          # x the stall: a check's ranks blocked this long in all is a hang
STACKS_WAIT = 0.3        # s for signalled ranks to write their stacks before they are read


class Stuck(Exception):
    """The watchdog stopped the group, for `reason` (types.StopReason); `statuses`: {rank:
    types.RankStatus} when it stopped, `stacks`: {rank: its Python stacks}."""

    def __init__(self, check_id: str, stacks: dict, statuses: dict[int, RankStatus], why="",
                 reason=StopReason.HANG, elapsed=0.0, cpu=0.0, rank=None):
        super().__init__(why)
        self.check_id, self.stacks, self.statuses, self.why = check_id, stacks, statuses, why
        self.reason, self.elapsed, self.cpu, self.rank = StopReason(reason), elapsed, cpu, rank


class _Usage:
    """Per rank: CPU time of its process tree, and how long its threads waited to run,
    as differences between two samples, process by process (a process that ended takes its
    time away with it, which must not look like a pause)."""

    def __init__(self, world_size: int):
        self.trees, self.listed = {}, 0.0
        self.seen: dict = {}                  # pid -> procstat.Usage at the last sample
        self.gone: dict = {}                  # rank -> CPU s already charged of its ended processes
        self.looked = None
        self.low = False                      # at the last sample: every rank under LOW

    def sample(self, processes, now: float) -> tuple[float, float, bool, bool]:
        """(dt, CPU seconds of all ranks since the last sample, whether every rank was blocked,
        whether some rank was starved). The first sample only sets the baseline."""
        if now - self.listed > 1.0:           # forks of the code under test count too
            self.listed = now
            self.trees = {r: [p.pid, *sorted(reaper.descendants(p.pid))]
                          for r, p in enumerate(processes) if p.pid}
        first, dt = self.looked is None, now - (self.looked or now)
        self.looked = now
        used, blocked, starved, low, seen = 0.0, True, False, True, {}
        for rank, pids in self.trees.items():
            d_cpu = d_most = 0.0
            looked = {pid: procstat.usage(pid) for pid in pids}
            for pid, now_pid in looked.items():  # first: a parent listed before its child reaps it
                if now_pid is None and pid in self.seen:   # its time returns in its parent's reaped CPU
                    self.gone[rank] = self.gone.get(rank, 0.0) + self.seen[pid].cpu
            for pid, now_pid in looked.items():
                if now_pid is None:
                    continue
                before = self.seen.get(pid, NEVER_SEEN)
                d_cpu += max(0.0, now_pid.cpu - before.cpu)
                # the thread that waited most for a CPU (a thread born since the last look waited
                # all its life in it); the most, not the sum: a rank's many transport threads
                # each wait a little at every wake-up on a busy machine
                d_most = max(d_most, *(w - before.waited.get(tid, 0.0)
                                       for tid, w in now_pid.waited.items()), 0.0)
                d_cpu += self._reaped(rank, max(0.0, now_pid.reaped - before.reaped))
                # the live threads' sum drops when one ends: never count from below what was seen
                seen[pid] = now_pid._replace(cpu=max(now_pid.cpu, before.cpu))
            used += d_cpu
            # blocked: no CPU, and no thread of the rank waiting for one (a main thread asleep
            # on the GIL while the rank's other threads wait for a CPU is not a hang)
            blocked &= d_cpu < IDLE * dt and d_most < STARVED * dt
            low &= d_cpu < LOW * dt and d_most < STARVED * dt
            # starved: a thread waiting for a CPU most of the time while the rank gets under
            # half of one (a thread kept waiting by its own rank's other threads is not starved)
            starved |= d_most >= STARVED * dt and d_cpu < (1 - STARVED + IDLE) * dt
        self.seen = seen
        if first or dt > 4 * SAMPLE:          # no baseline, or this process was not scheduled
            self.low = False                  # to look: nothing is known of the ranks' pause
            return 0.0, used, False, False
        self.low = low
        return dt, used, blocked, starved


    def _reaped(self, rank, cpu: float) -> float:
        """What a rank's processes reaped: the CPU of children that ended (a child that lived
        between two listings of the tree was never seen), less what was charged already of
        the rank's processes seen before they ended."""
        credit = min(cpu, self.gone.get(rank, 0.0))
        self.gone[rank] = self.gone.get(rank, 0.0) - credit
        return cpu - credit


class _Own:
    """Whether this process waited for a CPU: it serves the ranks' store (launcher), so
    ranks blocked while it could not run wait on it, not on each other. (Grading's private
    network serves the store from a process in rank 0's tree: its waits are rank 0's.)"""

    def __init__(self):
        self.before = procstat.usage(os.getpid())

    def starved(self, dt: float) -> bool:
        now, before = procstat.usage(os.getpid()), self.before
        self.before = now
        if dt <= 0 or now is None or before is None:
            return False
        return max((w - before.waited.get(tid, 0.0) for tid, w in now.waited.items()),
                   default=0.0) >= STARVED * dt


class Watchdog:
    """Watches one launch of `todo` (its checks, in order) on `world_size` ranks.

    `budgets` (budgets.Budgets) is charged each check's CPU time; `tick(i)` is told when
    every rank has left check i-1; `on_change(statuses)` whenever a status changed;
    `parent_busy()` says the parent is computing something a rank waits for (its inputs):
    blocked ranks are not hung then; `began()` says some rank began to run the code under
    test (from then on a group that does not start is that code's doing, not the machine's).
    `clock`: time.monotonic (a test's fake clock drives the watch without waiting)."""

    def __init__(self, rundir: Path, world_size: int, todo: list, budgets: B.Budgets,
                 tick=None, on_change=None, disk_mb: int = 512, parent_busy=None,
                 began=None, clock=None):
        self.rundir, self.world_size, self.budgets = rundir, world_size, budgets
        self.order, self.by_id = [c.id for c in todo], {c.id: c for c in todo}
        self.imports = len({c.exercise for c in todo})
        self.tick, self.on_change, self.parent_busy = tick, on_change, parent_busy
        self.began = began or (lambda: False)     # the parent's record: code under test ran
        self.clock = clock or time.monotonic
        self.disk_mb, self.disk_looked = disk_mb, 0.0
        self.reached = {r: -1 for r in range(world_size)}    # per rank: checks it has left
        self.usage = _Usage(world_size)
        self.own = _Own()
        self.text = None
        self.waited: dict = {}                # check id -> s its ranks waited, charged
        self.harness = False                  # every rank in the checker's own steps
        self.sampled = 0.0
        # The group's place: a Place before the first check, then the check some rank is in
        self.step: int = Place.STARTING
        self._enter_step(self.clock())

    def _enter_step(self, now: float) -> None:
        self.since, self.cpu, self.blocked, self.hung, self.starved = now, 0.0, 0.0, 0.0, 0.0
        self.low = self.waiting = 0.0

    def __call__(self, processes) -> None:
        now = self.clock()
        statuses = read_statuses(self.rundir, self.world_size)
        text = repr(sorted(statuses.items(), key=lambda kv: kv[0]))
        if text != self.text:
            self.text, self.blocked = text, 0.0
            self.harness = all(st.harness for st in statuses.values())
            self._advance(statuses, now)
            if self.on_change:
                self.on_change(statuses)
        if now - self.sampled >= SAMPLE:
            self.sampled = now
            self._measure(processes, now)
            self._stop_if_over(statuses, processes, now)
        if now - self.disk_looked > 0.5:
            self.disk_looked = now
            self._stop_if_flooding(statuses)

    # --- where the group is -------------------------------------------------------------

    def _advance(self, statuses: dict[int, RankStatus], now: float) -> None:
        if self.step == Place.STARTING and all((self.rundir / f"status.{r}.json").exists()
                                               for r in range(self.world_size)):
            self.budgets.charge_run(self.cpu)
            self.step = Place.IMPORTING
            self._enter_step(now)
        for r, st in statuses.items():
            if st.index is not None and 0 <= st.index < len(self.order) \
                    and st.check == self.order[st.index]:
                self.reached[r] = max(self.reached[r], st.index + st.done)
        step = min(self.reached.values())
        if step > self.step and step >= 0:
            self.charge()
            self.step = step
            self._enter_step(now)
            if self.tick:
                self.tick(step)

    def current(self):
        """The check the group is in (None: starting, importing or leaving)."""
        return self.by_id[self.order[self.step]] if 0 <= self.step < len(self.order) else None

    def charge(self, hung: bool = False) -> None:
        """Charge the budgets with what the current step used so far (once): its CPU time,
        and the time it hung (a hang) or its ranks waited without computing (budgets.py)."""
        check = self.current()
        if check is not None:
            self.budgets.charge(check, self.cpu, self.hung if hung else self.waiting)
            if not hung and self.waiting:
                self.waited[check.id] = self.waited.get(check.id, 0.0) + self.waiting
        else:
            self.budgets.charge_run(self.cpu)
        self.cpu = self.hung = self.waiting = 0.0

    def elapsed(self) -> float:
        return self.clock() - self.since

    # --- what the ranks use ---------------------------------------------------------------

    def _measure(self, processes, now: float) -> None:
        dt, used, blocked, starved = self.usage.sample(processes, now)
        self.cpu += used
        waiting_on_parent = self.parent_busy is not None and self.parent_busy()
        waiting_on_parent |= self.own.starved(dt)
        if blocked and not waiting_on_parent:
            self.blocked += dt
            self.hung += dt
        else:
            self.blocked = 0.0
        # above IDLE (blocked has its own rules) and under LOW: ranks that wait, not compute
        if self.usage.low and not (blocked or starved or waiting_on_parent or self.harness):
            self.low += dt
        if (blocked or self.usage.low) and not (starved or waiting_on_parent or self.harness):
            self.waiting += dt
        if starved:
            self.starved += dt

    def _stop_if_over(self, statuses, processes, now: float) -> None:
        check = self.current()
        if check is not None:
            limit, reason = self.budgets.limit(check)
            stall = self.budgets.stall_for(check)
        elif self.step == Place.IMPORTING:
            limit, reason, stall = B.IMPORT_CPU * self.imports * self.budgets.scale, \
                StopReason.IMPORT, self.budgets.stall
        else:
            limit, reason, stall = B.START_CPU * self.budgets.scale, StopReason.OWN, \
                self.budgets.stall
        who = check.id if check is not None else self._named(statuses)
        if self.step == Place.STARTING and not self.began():
            if self.blocked >= 3 * stall:
                # no code under test has run yet: what holds the ranks up is not the student's
                self._stuck(who, statuses, processes, "the ranks did not start (they were "
                            f"blocked for {self.blocked:.0f} s before any check): not graded, "
                            f"run it again", StopReason.BUSY)
        elif self.blocked >= stall * (3 if self.harness else 1):
            self.hung = self.blocked    # a plain hang costs its stall, not the reset ones before it
            where = " in the checker's steps around the check" if self.harness else ""
            self._stuck(who, statuses, processes,
                        f"no rank moved for {self.blocked:.0f} s, each of them blocked{where}",
                        StopReason.HANG)
        elif self.step >= 0 and self.hung >= HUNG_IN_ALL * stall:
            why = (f"the ranks were blocked for {self.hung:.0f} s in all during this check, "
                   f"each of them, though their calls kept changing (calls posted that never "
                   f"completed)")
            self.hung = stall       # the exercise's hang budget pays what a plain hang costs
            self._stuck(who, statuses, processes, why, StopReason.HANG)
        elif self.step >= 0 and self.low >= LOW_IN_ALL * stall:
            why = (f"for {self.low:.0f} s in all during this check every rank used under "
                   f"{LOW:.0%} of a CPU, though none waited for one: they waited, not computed "
                   f"(a loop that sleeps or polls)")
            self.hung = stall
            self._stuck(who, statuses, processes, why, StopReason.HANG)
        if self.cpu > limit:
            if self.step == Place.STARTING and not self.began():
                self._stuck(who, statuses, processes, "not graded: the checker's ranks used "
                            f"over {limit:.0f} CPU-seconds to start, before any code of yours "
                            "ran: the machine's doing, not your code; run it again",
                            StopReason.BUSY)
            if self.step == Place.IMPORTING:
                why = f"importing the code under test used over {limit:.0f} CPU-seconds"
            else:
                why = self.budgets.why(reason, who.split(".")[0], self.cpu, limit)
            self._stuck(who, statuses, processes, why, reason)
        wall = now - self.since
        backstop = B.LEAVING if self.step >= len(self.order) else self.budgets.backstop
        if wall > backstop:
            if self.starved > wall / 2 and self.step < len(self.order):
                self._stuck(who, statuses, processes, B.BUSY, StopReason.BUSY)
            self._stuck(who, statuses, processes,
                        f"the check did not finish within {backstop:.0f} s, though its ranks "
                        f"were mostly not waiting for a CPU (they used {self.cpu:.1f} "
                        f"CPU-seconds)", StopReason.SLOW)

    def _named(self, statuses) -> str:
        """The import or check a rank says it is in, for a report before any check started."""
        for st in statuses.values():
            if st.check is not None and st.check.startswith("import:"):
                return st.check
        return self.order[min(max(self.step, 0), len(self.order) - 1)]

    def _stuck(self, check_id, statuses, processes, why, reason):
        for p in processes:
            if p.is_alive():
                try:
                    os.kill(p.pid, signal.SIGUSR1)
                except OSError:
                    pass
        time.sleep(STACKS_WAIT)
        stacks = {}
        for q in range(self.world_size):
            path = self.rundir / f"stack.{q}.txt"
            try:
                stacks[q] = path.read_bytes()[:65536].decode(errors="replace")
            except OSError:
                pass
        raise Stuck(check_id, stacks, statuses, why, reason, self.elapsed(), self.cpu)

    # --- the disk ----------------------------------------------------------------------------

    def _stop_if_flooding(self, statuses) -> None:
        used, files = disk_use(self.rundir, self.world_size)
        for r in range(self.world_size):
            if used[r] > self.disk_mb << 20 or files[r] > DISK_FILES:
                check = self.current()
                what = f"{used[r] >> 20} MB of files" if files[r] <= DISK_FILES \
                    else f"{files[r]} files"
                raise Stuck(check.id if check else self._named(statuses), {}, statuses,
                            f"rank {r} wrote {what} (a rank's cap is {self.disk_mb} MB and "
                            f"{DISK_FILES} files in all, RTP_COURSE_RANK_DISK_MB)",
                            reason=StopReason.DISK, rank=r)


def disk_use(rundir: Path, world_size: int) -> tuple[dict, dict]:
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
