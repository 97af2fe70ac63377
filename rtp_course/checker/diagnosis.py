"""Why a check failed, said as a cause and a hint: for an exception, a crash, a hang, a budget.

A check's own hints are written for its usual mistakes; an exception, the way a process
ended, or what the ranks were blocked in often says more precisely what happened:

* an exception's text: SURE causes (an in-place change autograd noticed, a message of
  another size than its buffer, mixed dtypes) win over the check's own hints; LIKELY ones
  (mismatched shapes, an index past the end) only fill in where the check has none;
* a hang: each rank's status (worker.Status) names the call it is blocked in and the sends
  and receives it posted to each peer, so a transfer whose peer never posted its half, a
  ring of blocking sends, or ranks that left a collective the others wait in, are named;
* a crash: what the rank printed last, else how it died.

`diagnose()` turns the watchdog's or the launcher's stop into the Result of the check
during which the group ended, and `after_exception()` says what a rank's exception left
behind when a rank raised before the group ended (both are called by judging.judge, the one
entry point); `blame_earlier_tasks()` points a later check at an earlier failing one it
depends on. Statuses and outcomes come parsed (checker/types.py).
"""
from __future__ import annotations

import re
import signal

from rtp_course import course
from rtp_course.course import messages
from rtp_course.course.messages import say
from rtp_course.checker import budgets as B
from rtp_course.checker.communication import TRANSPORT_WORDS, collectives_differ, transport_said
from rtp_course.checker.types import (NOT_GRADED, SHARED, TOO_SLOW, Outcome, RankStatus, Result,
                                      StopReason, Verdict, read_statuses)
from rtp_course.checker.watchdog import Stuck
from rtp_course.runtime.launcher import RankFailed, RankHung, died_how, stderr_tail

# --- exceptions ------------------------------------------------------------------------------

_TIERS = {tier: [(re.compile(m.shows), m.text) for m in messages.causes(tier)]
          for tier in ("sure", "likely")}


def exception_hint(text: str, tier: str = "sure") -> str:
    """The hint of the first cause of `tier` whose pattern `text` (an exception's type and
    message, or a crashed process's last words) shows; empty if none."""
    for pattern, hint in _TIERS[tier]:
        if pattern.search(text or ""):
            return hint
    return ""

# --- hangs -----------------------------------------------------------------------------------

RECEIVES, SENDS = ("recv", "irecv"), ("send", "isend")


def _left_out(done: list, blocked: dict[int, RankStatus]) -> str:
    calls = sorted({(st.family or st.call or "").split(" ")[0]
                    for st in blocked.values()})
    return say("hang.left-out", done=", ".join(map(str, done)), calls=", ".join(calls))


def _unmatched(r: int, st: RankStatus, mine: dict[int, RankStatus]) -> str:
    """Why rank r's blocked transfer has no partner, if its peer's status shows it."""
    peer_rank = st.peer
    receiving = st.family in RECEIVES
    if not (receiving or st.family in SENDS) or peer_rank is None:
        return ""
    peer = mine.get(peer_rank)
    if peer is None:
        return ""
    half, theirs = ("send", "sent_to") if receiving else ("receive", "recv_from")
    if not receiving and peer.family in SENDS and peer.peer == r and peer.call and not peer.done:
        # the peer's receive may well come, after its own send: neither gets there
        return say("hang.both-send-first", r=r, peer=peer_rank, call=st.call,
                   peer_call=peer.call)
    if not peer.count(theirs, r):
        others = sorted(k for k in getattr(peer, theirs) if k != str(r))
        went = (f"its {half}s {'went to' if receiving else 'came from'} rank(s) "
                f"{', '.join(others)}" if others else f"it posted no {half} at all")
        verb = "receive from" if receiving else "have its send received by"
        return say("hang.half-missing", r=r, verb=verb, peer=peer_rank, half=half,
                   to="to" if receiving else "from", went=went)
    if receiving and peer.count("dropped_to", r) and peer.family not in SENDS:
        return say("hang.send-dropped", r=r, peer=peer_rank)
    if st.phase and peer.phase and peer.phase != st.phase:
        where = "finished this check" if peer.done else f"went on to phase '{peer.phase}'"
        verb, mine = (("receive from", "receives from") if receiving
                      else ("have its send received by", "sends to"))
        return say("hang.fewer-in-phase", r=r, phase=st.phase, verb=verb, peer=peer_rank,
                   where=where, half=half, to="to" if receiving else "from", mine=mine)
    return ""


def hang_hint(check_id: str, statuses: dict[int, RankStatus]) -> str:
    """A hint when the ranks' statuses show the cause of the hang; empty if they do not."""
    mine = {r: st for r, st in statuses.items() if st.check == check_id}
    blocked = {r: st for r, st in mine.items() if st.call and not st.done}
    running = [st for st in mine.values() if not st.done]
    if running and not blocked and len(mine) == len(statuses):
        return say("hang.computing")
    done = sorted(r for r, st in mine.items() if st.done)
    # dist.new_group is collective over the whole job, whatever its ranks: ranks waiting in it
    # while others finished made the calls in another order or number (the check's own hint)
    if done and blocked and all(st.family not in RECEIVES + SENDS
                                and not st.call.startswith("dist.new_group")
                                for st in blocked.values()):
        return _left_out(done, blocked)
    if blocked and len(blocked) == len(mine) and all(
            st.family == "send" and not st.recv_from for st in blocked.values()):
        return say("hang.blocking-sends")
    for r, st in sorted(blocked.items()):
        why = _unmatched(r, st, mine)
        if why:
            return why
    return ""

# --- the check during which a group ended -----------------------------------------------------

def _counted(names: list) -> list:
    """Each name once, in order, with how many times it came where more than once."""
    counts = {n: names.count(n) for n in names}
    return [f"{n}, {c} times" if c > 1 else n for n, c in counts.items()]


def crash_hint(exit_code: int, in_call: bool, said: str = "") -> str:
    """Why a rank's process ended, by what it printed last, else by how it ended."""
    cause = exception_hint(said, "sure")
    if cause:
        return cause
    if exit_code == 0:
        return say("crash.exited")
    if exit_code == -signal.SIGABRT and in_call:
        return say("crash.mismatch")
    if exit_code == -signal.SIGSEGV:
        return say("crash.segfault")
    return say("crash.killed")


def where_ranks_were(check, statuses: dict[int, RankStatus],
                     world_size: int) -> tuple[str, int | None]:
    """('rank 0 waited in ...; rank 1 ...', the first rank still in the check)."""
    lines, first, harness_first = [], None, False
    for r in range(world_size):
        st = statuses.get(r, RankStatus())
        if st.check != check.id:
            lines.append(f"rank {r} never started this check")
            continue
        if st.done:
            lines.append(f"rank {r} finished the check and waited for the others")
            continue
        if first is None or (st.family != "harness" and harness_first):
            first, harness_first = r, st.family == "harness"
        where = f"waited in {st.call}" if st.call else "was outside any communication call"
        lines.append(f"rank {r} {where} during phase '{st.phase}'")
    return "; ".join(lines), first


def _harness_hint(check, statuses: dict[int, RankStatus]) -> str:
    """The check's own hint when a rank waited in the check's own meeting (ctx.wait_flags)."""
    for st in statuses.values():
        if st.family == "harness" and st.hint_key:
            return check.hint(st.hint_key)
    return ""


def import_hang_message(module: str, failure: Stuck, impl_dir: str) -> str:
    where = ""
    for stack in failure.stacks.values():
        lines = [ln for ln in stack.splitlines() if impl_dir in ln]
        if lines:
            where = " at " + lines[0].strip().replace(impl_dir + "/", "")
            break
    return say("hang.import", module=module, why=failure.why, where=where)


def after_exception(check, ws: int, rundir, res: Result, partial: dict[int, Outcome]) -> Result:
    """A rank raised before the group ended (its verdict `res`, judged from the outcomes
    `partial` the ranks wrote): why the transport failed it, where the ranks' collectives
    differ, and the ranks it left waiting."""
    differ = collectives_differ(partial, _in_check(read_statuses(rundir, ws), check)) \
        if transport_said(res) else None
    if differ is not None:          # why the transport failed a rank, or its peer
        return Result(exercise=check.exercise, check=check.name, world_size=ws,
                      **{**differ, "status": Verdict.ERROR},
                      details={"transport": res.message})
    stuck = [q for q in range(ws) if q not in partial]
    if stuck:
        res.message += f" (rank(s) {stuck} were left waiting for it)"
    return res


def diagnose(check, ws: int, rundir, failure, partial: dict[int, Outcome]) -> Result:
    """The check during which the group ended early, no rank having written an exception
    (judging.judge says those first: after_exception); `partial`: the outcomes its ranks
    wrote."""
    base = dict(exercise=check.exercise, check=check.name, world_size=ws)
    if isinstance(failure, Stuck):
        return _stopped(check, base, ws, failure, partial)
    if isinstance(failure, RankFailed):
        return _crashed(base, ws, rundir, failure, check, partial)
    if isinstance(failure, RankHung):
        return Result(**base, status=Verdict.DEADLOCK, message=str(failure).splitlines()[0],
                      details={"stacks": failure.stacks})
    return Result(**base, status=Verdict.ERROR,
                  message="the worker group ended without a result")


def _stopped(check, base: dict, ws: int, failure: Stuck, partial: dict | None = None) -> Result:
    """What the watchdog stopped: a hang, a budget, a busy machine, a disk flood."""
    details = {"stacks": failure.stacks}
    where, rank = where_ranks_were(check, failure.statuses, ws)
    phases = [st.phase for st in failure.statuses.values()
              if st.check == check.id and not st.done]
    base["phase"] = str(phases[0])[:200] if phases else ""
    if failure.reason == StopReason.DISK:
        return Result(**base, status=Verdict.ERROR, message=failure.why, rank=failure.rank,
                      hint=say("crash.disk"))
    if failure.reason == StopReason.BUSY:
        return Result(**base, status=Verdict.BUSY, message=f"{failure.why} (at "
                      f"{failure.elapsed:.0f} s it had used {failure.cpu:.1f} CPU-seconds)",
                      details=details)
    if failure.reason in SHARED:      # a budget others spent: not this check's verdict
        return Result(**base, status=Verdict.NOTRUN, details=details,
                      message=f"not run to the end: {failure.why}")
    if failure.reason in TOO_SLOW:
        details["stopped"] = failure.reason
        return Result(**base, status=Verdict.FAILED, hint=B.SLOW_HINT, details=details,
                      message=f"{failure.why}: this check was stopped after {failure.elapsed:.0f} "
                              f"s; at that moment {where}")
    st = failure.statuses.get(rank) if rank is not None else None
    base["phase"] = (st.phase or "") if st is not None else ""
    differ = collectives_differ(partial or {}, _in_check(failure.statuses, check))
    if differ is not None:
        return Result(**{**base, "phase": differ["phase"] or base["phase"]},
                      status=Verdict.DEADLOCK, rank=differ["rank"], details=details,
                      hint=differ["hint"],
                      message=f"deadlock: {failure.why}; {differ['message']}")
    return Result(**base, status=Verdict.DEADLOCK, rank=rank, details=details,
                  message=f"deadlock: {failure.why}; {where}",
                  hint=_harness_hint(check, failure.statuses)
                  or hang_hint(check.id, failure.statuses)
                  or check.hints.get("deadlock") or say("hang.stuck"))


def _in_check(statuses: dict[int, RankStatus], check) -> dict[int, RankStatus]:
    """The statuses of the ranks still in `check` (a rank's word: it only names calls)."""
    return {r: st for r, st in statuses.items() if st.check == check.id}


def _crashed(base: dict, ws: int, rundir, failure: RankFailed, check,
             partial: dict | None = None) -> Result:
    statuses = read_statuses(rundir, ws)
    st = statuses.get(failure.rank, RankStatus())
    phase = st.phase or ""
    if failure.exit_code is not None and failure.exit_code <= 0:
        call = f", in {st.call}" if st.call else ""
        said = stderr_tail(rundir, failure.rank, lines=2)
        said = f"; its last words: {' / '.join(said.splitlines())}" if said else ""
        differ = collectives_differ(partial or {}, _in_check(statuses, check))
        if differ is not None:         # the cause; how the transport took it is the instructor's
            return Result(**{**base, **differ, "status": Verdict.ERROR},
                          details={"transport": f"rank {failure.rank}: "
                                                f"{died_how(failure.exit_code)}{said}"})
        dropped = list(st.dropped)
        if dropped and failure.exit_code in (-signal.SIGSEGV, -signal.SIGBUS, -signal.SIGABRT):
            return Result(**base, status=Verdict.ERROR, rank=failure.rank, phase=phase,
                          message=f"rank {failure.rank} crashed during phase "
                                  f"'{st.phase or '?'}'{call}: {died_how(failure.exit_code)}"
                                  f"{said}; before, it let go of a work it never waited: "
                                  f"{'; '.join(_counted(dropped))}",
                          hint=say("crash.dropped"))
        return Result(**base, status=Verdict.ERROR, rank=failure.rank, phase=phase,
                      message=f"rank {failure.rank} crashed during phase '{st.phase or '?'}'"
                              f"{call}: {died_how(failure.exit_code)}{said}",
                      hint=crash_hint(failure.exit_code, bool(st.call), said))
    where, _ = where_ranks_were(check, statuses, ws)
    last = (failure.traceback.strip().splitlines() or [""])[-1]
    if any(w in last for w in TRANSPORT_WORDS):    # the transport's words: the instructor's log
        said = "its connection to the other ranks broke"
    else:
        said = last
    return Result(**base, status=Verdict.ERROR, rank=failure.rank, phase=phase,
                  message=f"rank {failure.rank} crashed: {said}; at that moment: {where}",
                  hint=say("crash.mismatch"), details={"traceback": failure.traceback,
                                               "transport": last})



# --- hints along the tasks a task uses -------------------------------------------------------

def variant(name: str, plain: str, task_id: str) -> bool:
    """Check `name` tests the functions of check `plain` in another configuration
    (ColumnParallelLinear_gather_output of ColumnParallelLinear); a check named after a
    function of its task (rotate_async) is no variant of another (rotate)."""
    own = {n.lower() for n in course.task(task_id).names}
    return name.startswith(plain + "_") and name.lower() not in own


def blame_earlier_tasks(results: list, checks: dict | None = None) -> None:
    """Where a check that tests functions this check's code uses failed in the same run, name
    it as the likely cause, instead of a hint about this check's own code that may not hold.

    Said only along the course table's `requires` (closed: ParallelMLP's check may follow from
    comm's Duplication through ColumnParallelLinear), and inside one task from a variant to its
    plain check (ColumnParallelLinear_gather_output from ColumnParallelLinear) or from a
    subgroup check to the others; never the other way, and never from a check whose failure
    says nothing beyond itself (`checks`: {check id: Check}, Check.isolated: a ValueError
    asked for, a subgroup). The cause named is the earliest in the course: the root."""
    isolated = {cid for cid, c in (checks or {}).items() if getattr(c, "isolated", False)}
    follows = {cid: set(getattr(c, "follows", ())) for cid, c in (checks or {}).items()}
    failed = [r for r in results if not r.passed and r.status not in (Verdict.NOTIMPL, *NOT_GRADED)
              and r.task]
    position = {t.id: (i, j) for i, ex in enumerate(course.COURSE) for j, t in enumerate(ex.tasks)}
    for r in failed:
        if f"{r.exercise}.{r.check}" in isolated:      # a refusal asked for is its own cause
            continue
        needs = course.requirements(r.task)

        def explains(e, r=r, needs=needs) -> bool:
            if (e.exercise, e.check) == (r.exercise, r.check) or \
                    f"{e.exercise}.{e.check}" in isolated:
                return False
            if e.check in follows.get(f"{r.exercise}.{r.check}", ()) and e.exercise == r.exercise:
                return True
            if e.task == r.task:
                return variant(r.check, e.check, r.task) or (
                    "subgroup" in r.check.lower() and "subgroup" not in e.check.lower())
            # a check of an earlier task that failed in another task's function (this one's,
            # or a third's: a subgroup check's phase names what it calls) explains nothing
            return e.task in needs and not any(re.search(rf"\b{re.escape(n)}\b", e.phase)
                                               for n in _names_besides(e.task))
        causes = [e for e in failed if explains(e)]
        if causes:
            cause = min(causes, key=lambda e: position.get(e.task, (99, 99)))
            then = f"; if this check still fails after that: {r.hint}" if r.hint else ""
            r.hint = say("blame.earlier", task=cause.task, exercise=cause.exercise,
                         check=cause.check, then=then)


def _names_besides(task_id: str) -> set:
    """The functions of every task of `task_id`'s exercise but its own."""
    exercise = next(ex for ex in course.COURSE if any(t.id == task_id for t in ex.tasks))
    own = set(course.task(task_id).names)
    return {n for t in exercise.tasks if t.id != task_id for n in t.names} - own
