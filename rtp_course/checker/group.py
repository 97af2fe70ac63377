"""One world size's checks: launch a group of ranks, judge what finished, relaunch the rest.

A launch runs every remaining check of its world size in order (worker.run_checks). When
the group ends early (an exception, a crash, a hang or a budget the watchdog stopped),
what finished is judged, the check it ended in is diagnosed (diagnosis.py), and a new
group runs the checks that remain.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rtp_course.checker import budgets as B
from rtp_course.checker import channel, diagnosis, judging
from rtp_course.checker.outcome_file import read_json_bounded
from rtp_course.checker.provider import Provider
from rtp_course.checker.types import RankStatus, Result, StopReason, Verdict
from rtp_course.checker.watchdog import Stuck, Watchdog
from rtp_course.checker.worker import run_checks
from rtp_course.course import material
from rtp_course.course.messages import say
from rtp_course.runtime import output, reaper
from rtp_course.runtime.launcher import LaunchError, RankFailed, RankHung, launch

# NCCL's wait() only makes the stream wait; blocking wait makes it block the host, as gloo's
# does, so a stuck transfer is seen in the wait() that the status names, and hang diagnosis
# and budgets are the same on GPU and CPU.
NCCL_ENV = {"TORCH_NCCL_BLOCKING_WAIT": "1"}
DISK_CAP_MB = 512      # what a rank's files in the run's directory may hold in all


def _job(rundir: Path, todo, impl_dir, modules, dtype, backend, confine: bool) -> dict:
    env = os.environ.get
    if confine:          # the ranks see the code under test at a path of the run, not where
        impl_dir = _neutral_copy(impl_dir, rundir)   # the grader keeps the class's work
    return dict(rundir=str(rundir), impl=impl_dir, modules=modules, backend=backend,
                check_ids=[c.id for c in todo], dtype=dtype, confine=confine,
                closed=material.closed_to_code_under_test() if confine else [],
                file_cap_mb=int(env("RTP_COURSE_RANK_FILE_MB", 0)) or None,
                memory_cap_mb=int(env("RTP_COURSE_RANK_MEMORY_MB", 0)) or None,
                disk_cap_mb=int(env("RTP_COURSE_RANK_DISK_MB", 0)) or None)


def _neutral_copy(impl_dir: str, rundir: Path) -> str:
    """The exercise modules of `impl_dir`, copied into the run's directory."""
    from rtp_course.course import EXERCISES
    copy = rundir / "impl"
    copy.mkdir()
    for name in EXERCISES:
        source = Path(impl_dir) / f"{name}.py"
        if source.is_file() and not source.is_symlink():
            shutil.copyfile(source, copy / source.name)
    return str(copy)


def run_world(todo, ws, impl_dir, modules, dtype, budgets: B.Budgets, backend, tick=None,
              expect=None, confine: bool = False):
    """Run `todo` on `ws` ranks; returns (results, {check id: per-rank outcomes}).

    `budgets` is charged for the CPU time every check took, hung or not; an exercise that
    has used its budget runs no further checks, and neither does any once the run has."""
    results, seen, retried = [], {}, set()
    while todo:
        first_of_launch = len(results)
        rundir = Path(tempfile.mkdtemp(prefix=reaper.temp_prefix(f"check-w{ws}")))
        failure, judged, watchdog, job = _launch(todo, ws, rundir, impl_dir, modules, dtype,
                                                 budgets, backend, tick, expect, confine,
                                                 len(results))
        if "" not in retried and _connections_broke(failure, job):
            retried.add("")                 # the machine's, not the code's: once more
            shutil.rmtree(rundir, ignore_errors=True)
            continue
        watchdog.charge(hung=isinstance(failure, Stuck) and failure.reason == StopReason.HANG)
        done = 0
        for check in todo:
            if check.id in judged:
                outcomes, result = judged[check.id]
            else:
                outcomes = judging.load_outcomes(rundir, check.id, ws)
                if outcomes is None:
                    break
                result = judging.judge(check, ws, outcomes, expect=expect)
            results.append(result)
            seen[check.id] = outcomes
            done += 1
        ended = _ended(todo, done, ws, rundir, failure, job, budgets)
        if ended and ended[0].check not in retried and _transport_broke(ended[0]):
            retried.add(ended[0].check)     # once more: a connection lost under load, or the
            ended = ended[1:]               # code's, which breaks it again
        results += ended
        _mark_waiting(results[first_of_launch:], watchdog.waited, budgets)
        _annotate(results[first_of_launch:], rundir, ws)
        shutil.rmtree(rundir, ignore_errors=True)
        todo = _remaining(todo, results, first_of_launch)
    _force_busy(results)
    return results, seen


# Test-only: check ids ("rotation.ring_all_gather") whose verdict is "busy", as on a machine
# too busy to run them: how a test takes a check "not graded" through grading, regrading and
# export. Read from the grader's own environment, which the ranks (the code under test)
# cannot reach.
FORCE_BUSY = "RTP_COURSE_TEST_BUSY"


def _force_busy(results: list) -> None:
    forced = set(os.environ.get(FORCE_BUSY, "").split(",")) - {""}
    for r in results:
        if f"{r.exercise}.{r.check}" in forced:
            r.status, r.message, r.hint = Verdict.BUSY, B.BUSY, ""


def _launch(todo, ws, rundir, impl_dir, modules, dtype, budgets, backend, tick, expect,
            confine, base):
    job = _job(rundir, todo, impl_dir, modules, dtype, backend, confine)
    provider = Provider(ws, todo, expect.urgent if expect else judging.now)
    server = channel.Server(ws, provider).start()
    judged: dict = {}
    watchdog = Watchdog(rundir, ws, todo, budgets, tick and (lambda i: tick(base + i)),
                        judging.judging(todo, ws, rundir, expect, judged),
                        disk_mb=job["disk_cap_mb"] or DISK_CAP_MB, parent_busy=server.busy,
                        began=lambda: bool(server.entered))
    isolation = None
    if confine:
        from rtp_course.confinement import Isolation
        isolation = Isolation()
    backstop = (budgets.backstop + B.LEAVING) * (len(todo) + 1)   # the watchdog stops sooner
    failure = None
    try:
        launch(run_checks, ws, args=(job,), backend=backend, timeout=backstop, rundir=rundir,
               results="none",
               env=NCCL_ENV if backend == "nccl" else None, on_poll=watchdog,
               capture_output=True, channels=server, isolation=isolation)
    except (Stuck, RankFailed, RankHung) as e:
        failure = e
    except LaunchError:
        shutil.rmtree(rundir, ignore_errors=True)    # nothing ran: nothing to keep
        raise
    finally:
        server.stop()
        job["began"] = bool(server.entered)
    return failure, judged, watchdog, job


def _ended(todo, done, ws, rundir, failure, job, budgets) -> list:
    """Results for the checks a launch did not finish: the one it ended in, diagnosed, and
    those no budget is left for; none if the group merely ended between two checks."""
    if done >= len(todo):
        return []
    if isinstance(failure, Stuck) and failure.check_id.startswith("import:"):
        module = failure.check_id.split(":", 1)[1]
        message = diagnosis.import_hang_message(module, failure, job["impl"])
        return [Result(c.exercise, c.name, ws, Verdict.DEADLOCK, message, phase="import",
                       hint=say("crash.import")) for c in todo[done:] if c.exercise == module]
    broken = todo[done]
    if _connections_broke(failure, job):
        why = str(failure).strip().splitlines()[-1][:200] if str(failure).strip() else ""
        return [Result(broken.exercise, broken.name, ws, Verdict.BUSY, f"{B.BUSY_START} ({why})",
                       task=broken.task)]
    if done > 0 and not _started(rundir, ws, broken, failure):
        return []      # the group ended between two checks (a GPU run after a failed check,
        #                a rank whose peers left): a new group runs the rest
    partial = {r: o for r in range(ws)
               if (o := judging.load_outcome(rundir / f"result.{broken.id}.{r}.pt", r))
               is not None}
    out = [judging.judge(broken, ws, partial, failure, rundir=rundir)]
    out += [over_budget(c, ws, budgets) for c in todo[done + 1:] if budgets.spent(c)]
    return out


LAUNCH_ERRORS = ("DistNetworkError", "DistStoreError", "Broken pipe", "Connection reset",
                 "Connection refused", "Connection closed by peer", "connectFullMesh failed")


def _transport_broke(result: Result) -> bool:
    """A rank crashed on the transport's connections (gloo's pairs, the store): on a loaded
    machine that happens to correct code; run again, code that breaks them breaks them again."""
    said = f"{result.message} {result.details.get('transport', '')}"
    return result.status == Verdict.ERROR and "crashed" in result.message and any(
        e in said for e in LAUNCH_ERRORS)


def _connections_broke(failure, job: dict) -> bool:
    """The group broke on the launch's own connections (the store, the transport's pairs)
    before any rank began to run the code under test (the parent's own record of it,
    channel.Server.entered): the machine's doing, not the code's. Once the code under test
    ran, what a rank printed or wrote proves nothing: its failure is judged as its own."""
    return (isinstance(failure, RankFailed) and not job.get("began")
            and any(e in str(failure) for e in LAUNCH_ERRORS))


def _remaining(todo, results, first) -> list:
    """The checks of `todo` that this launch left without a result."""
    have = {(r.exercise, r.check) for r in results[first:]}
    return [c for c in todo if (c.exercise, c.name) not in have]


def _started(rundir: Path, ws: int, check, failure=None) -> bool:
    """Whether `check` began where the group ended: the rank that ended it says it was in
    `check` (its status names it), or, when no one rank ended it, some rank does. A rank that
    leaves after the check before (its exception left its peers inside a call) ends the
    group while the others already set `check` up: not this check's doing."""
    ranks = [failure.rank] if isinstance(failure, RankFailed) and failure.rank in range(ws) \
        else range(ws)
    return any(RankStatus.read(rundir / f"status.{r}.json").check == check.id for r in ranks)


def _mark_waiting(results, waited: dict, budgets: B.Budgets) -> None:
    """The checks whose ranks waited without computing long enough to have spent their
    exercise's hang budget (budgets.WAITED): their tasks run last in a regrade."""
    for r in results:
        seconds = waited.get(f"{r.exercise}.{r.check}", 0.0)
        if seconds >= B.WAITED * budgets.scale:
            r.details["waited"] = round(seconds, 1)


def _annotate(results, rundir: Path, ws: int) -> None:
    """How the ranks were confined, and what they printed (failing results only)."""
    confinement = read_json_bounded(rundir / "confinement.0.json") or {}
    printed = _printed(rundir, ws)
    for r in results:
        r.details.setdefault("confinement", str(confinement.get("describe", ""))[:300])
        if printed and not r.passed:
            r.details["printed"] = printed


def _printed(rundir: Path, ws: int, lines: int = 6) -> dict:
    """{rank: the last lines it printed}, for the report of a check that failed."""
    found = {}
    for r in range(ws):
        try:
            said = output.text(rundir, "stdout", r).read_bytes()[-65536:].decode(errors="replace")
        except OSError:
            continue
        kept = [ln.rstrip() for ln in said.splitlines() if ln.strip()]
        if kept:
            found[r] = "\n".join(ln[:300] for ln in kept[-lines:])
    return found


def over_budget(check, ws, budgets: B.Budgets) -> Result:
    """A check that a shared budget, spent by other checks, left no time for: not run (not
    graded), never failed for what others did."""
    reason = budgets.spent(check) or StopReason.RUN
    return Result(check.exercise, check.name, ws, Verdict.NOTRUN,
                  message=f"not run: {budgets.why(reason, check.exercise)}")
