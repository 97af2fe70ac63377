"""Judge the communication a rank recorded (commlog's events and program). Parent only.

Three kinds of rule, in the order the verdict applies them:
* before the values, what explains a wrong value better than the value does: a send buffer
  written before its work was waited (rule 'Send buffers'), a call on another process group
  than the one a CommRule names (rule 'Group');
* after the values, the counts, bytes and peers of each CommRule;
* last, NCCL's stream order (runtime/nccl/order.py): calls gloo completed that would hang on
  a GPU.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace

from rtp_course.checker.registry import Bound
from rtp_course.checker.types import Outcome, RankStatus, Verdict
from rtp_course.runtime import nccl
from rtp_course.runtime.commlog import P2P

LIBRARIES = ("DistributedDataParallel",)   # torch wrappers commlog logs by their construction

SEND_BUFFERS = ("rule 'Send buffers': a tensor handed to a send (isend, a P2POp of "
                "batch_isend_irecv, rotate_async) is still being read until its work is waited: "
                "write to it (an in-place add, a copy_, the next receive into it) only after "
                "wait(), or send a copy. gloo often copies it early and hides this; NCCL reads "
                "it while the transfer runs")

GROUP = ("rule 'Group': every collective of this function runs on `group` (pass group= to "
         "each call, also in the helpers it calls); a call without group= runs over the whole "
         "world, one with another group over that group's ranks")


def written_send(events) -> str | None:
    """What the verdict says of the first send whose buffer was written before its wait."""
    for e in events:
        if e.get("overwritten"):
            return (f"{e['phase']}: the buffer of the {e['kind']} to rank {e['peer']} at "
                    f"{e['where']} was written to before its work was waited")
    return None


def wrong_group(rules, events):
    """(rule, message) for the first call counted by a rule with `members` that ran on
    another group; None when every such call ran on its group."""
    for rule in rules:
        if rule.members is None:
            continue
        want = tuple(sorted(rule.members))
        for e in events:
            got = _ranks(e.get("members"))
            if _count_matches(rule, e) and got and got != want:
                return rule, (f"{e['phase']}: {e['kind']} at {e['where']} ran on ranks "
                              f"{list(got)}; this call belongs to the group of ranks "
                              f"{list(want)}")
    return None


def _ranks(members) -> tuple:
    """An event's group members, sorted: a flat event holds them as text, "(0, 2)"."""
    if isinstance(members, str):
        return tuple(sorted(int(m) for m in re.findall(r"\d+", members)))
    return tuple(sorted(members or ()))


def _count_matches(rule, ev) -> bool:
    """A rule's kind names functions or operations: "all_gather" also counts
    all_gather_into_tensor, all_gather_single, funcol.all_gather_tensor ... (any API)."""
    if rule.phase != "*" and ev["phase"] != rule.phase:
        return False
    family = ev.get("family") or ev["kind"]
    if rule.kind == "*":
        return True
    if rule.kind == "collective":
        return family not in P2P
    if rule.kind == "p2p":
        return family in P2P
    kinds = rule.kind.lstrip("!").split("|")
    named = ev["kind"] in kinds or family in kinds
    return not named if rule.kind.startswith("!") else named


def check_comm(rules, events):
    """(rule, message) of the first CommRule the events break (count, bytes, peers)."""
    for rule in rules:
        hits = [e for e in events if _count_matches(rule, e)]
        n = len(hits)
        ok = n in rule.count if isinstance(rule.count, Bound) else n == rule.count
        if not ok:
            if rule.phase == "*" and hits:     # name the phase it happened in
                rule = replace(rule, phase=hits[0]["phase"])
            seen = ", ".join(f"{e['kind']} at {e['where']}" for e in hits[:4]) or "none"
            want = rule.count if isinstance(rule.count, Bound) else f"exactly {rule.count}"
            what = ("communicating call(s)" if rule.kind == "*" else
                    f"call(s) other than {rule.kind[1:]}" if rule.kind.startswith("!")
                    else f"{rule.kind} call(s)")
            return rule, (f"{rule.phase}: {n} {what}, expected {want}; seen: {seen}")
        if rule.nbytes is not None:
            total = sum(e["nbytes"] for e in hits)
            ok = total in rule.nbytes if isinstance(rule.nbytes, Bound) else total == rule.nbytes
            if not ok:
                return rule, (f"{rule.phase}: {rule.kind} call(s) moved {total} bytes on this "
                              f"rank, expected {rule.nbytes}")
        if rule.peers is not None:
            odd = [e for e in hits if e["peer"] not in rule.peers]
            if odd:
                seen = ", ".join(f"{e['kind']} with rank {e['peer']} at {e['where']}" for e in odd[:2])
                return rule, (f"{rule.phase}: {rule.kind} with the wrong rank(s): {seen}; "
                              f"expected only rank(s) {', '.join(map(str, rule.peers))}")
    return None


NCCL_ORDER = (f"{nccl.RULE}: on NCCL, a rank's operations on a process group run in the "
              "order they were posted, one after the other, and a send waits until its receive "
              "runs; only the operations of one dist.batch_isend_irecv progress together (gloo "
              "lets each transfer go on by itself, so the CPU run finished). Post a send and "
              "the receive that must happen with it in ONE batch_isend_irecv, and wait on "
              "every handle it returns")


def _programs(outcomes: dict[int, Outcome]) -> dict | None:
    """{rank: (steps, {op id: op})} of commlog's programs, or None if a rank recorded none."""
    programs = {}
    for r, o in outcomes.items():
        prog = o.program
        if prog is None:
            return None              # an older record, or a rank that recorded none
        ops = {op["id"]: op for op in prog.get("ops", []) if isinstance(op, dict)}
        programs[r] = ([tuple(step) for step in prog.get("steps", [])], ops)
    return programs


SIZES = ("a receive must hold exactly what its send sends (NCCL needs the same count on both "
         "sides; gloo fills part of a larger buffer, or stops the process): allocate it with "
         "the shape of what arrives (with uneven shards, the shape of the shard that comes, "
         "not of your own)")


def sizes_differ(outcomes: dict[int, Outcome]) -> dict | None:
    """A failed result's fields when a send and the receive it meets hold different sizes: the
    cause of whatever the ranks then computed or raised."""
    programs = _programs(outcomes)
    try:
        found = nccl.size_mismatch(programs) if programs else None
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    if found is None:
        return None
    send, recv, rank = found["send"], found["recv"], found["receiver"]
    events = outcomes[rank].events
    phase = events[recv["id"]]["phase"] if recv["id"] < len(events) else ""
    sent, room = send["nbytes"], recv["nbytes"]
    what = " (None or an empty tensor)" if not sent else ""
    return dict(status=Verdict.FAILED, rank=rank, phase=phase, key=f"{phase}/communication",
                message=f"rank {found['sender']}'s {send['family']} at {send['where']} sends "
                        f"{sent} bytes{what} to rank {rank}, whose {recv['family']} at "
                        f"{recv['where']} receives into a buffer of {room} bytes",
                hint=(NOTHING_SENT if not sent else SIZES_DTYPE if sent in (2 * room, room // 2)
                      else SIZES))


_SIZES = SIZES[0].upper() + SIZES[1:]
NOTHING_SENT = ("the send was given None or an empty tensor: a .grad is None when its tensor "
                "never required grad (a received activation needs x.requires_grad_() before "
                "the forward that uses it) or when no backward reached it. " + _SIZES)
SIZES_DTYPE = ("the sizes differ by a factor of 2: the same shape in another dtype (float32 "
               "4 bytes, float64 8), or twice the rows: allocate the receive buffer in the "
               "dtype and shape of what arrives (torch.empty_like of such a tensor). " + _SIZES)


TOO_MANY_CALLS = ("a check needs a few communication calls per step of its algorithm: look for "
                  "communication repeated in a loop over elements or rows")


def nccl_order(outcomes: dict[int, Outcome]) -> dict | None:
    """A failed result's fields when the ranks' calls, which gloo completed, would hang on
    NCCL's streams (runtime/nccl/order.py); None when they would complete."""
    programs = _programs(outcomes)
    if programs is None:
        return None
    try:
        found = nccl.simulate(programs)
    except (KeyError, TypeError, ValueError, IndexError):
        return None                  # a record the simulation cannot read: not judged by it
    except nccl.ReplayTooLong as e:
        calls = sum(len(ops) for _, ops in programs.values())
        return dict(status=Verdict.FAILED, rank=0, phase="", key="communication",
                    message=f"the ranks made {calls} communication calls in this check, in an "
                            f"order whose replay on NCCL's streams could not be decided ({e}; "
                            f"a check's calls take milliseconds)", hint=TOO_MANY_CALLS)
    if found is None:
        return None
    rank = next(r for r, w in sorted(found["waiting"].items()) if w)
    events = outcomes[rank].events
    op_id = found["waiting"][rank][0]["id"]
    phase = events[op_id]["phase"] if op_id < len(events) else ""
    return dict(status=Verdict.FAILED, rank=rank, phase=phase, key=f"{phase}/communication",
                message=f"on NCCL (a GPU run) these calls would never finish: "
                        f"{nccl.describe(found)}", hint=NCCL_ORDER)


# --- the ranks' collectives, side by side -----------------------------------------------------

# Operations whose every rank contributes a tensor of the same shape (an all_gather given a
# list may gather uneven shards; an all_to_all's splits, a gather's root differ by design).
SAME_SHAPE = {"all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "_all_gather_base",
              "all_gather_single", "reduce_scatter_tensor", "_reduce_scatter_base",
              "reduce_scatter_single", "all_gather_tensor", "reduce_scatter_tensor_autograd",
              "all_gather_tensor_autograd"}
MATCH = ("every rank makes the same collective calls, in the same order, on each group, with "
         "tensors of the same shape and dtype: iterate over what every rank has in the same "
         "order (model.parameters(), never a set), and never skip a call on one rank because "
         "of its data (a zero gradient, an empty shard). On NCCL calls that do not match hang "
         "or corrupt memory; gloo stops the process")


TRANSPORT_WORDS = ("socket", "Socket", "[c10d]", "gloo", "Connection", "Broken pipe",
                   "DistNetworkError", "DistStoreError", "timed out", "Received data size")


def transport_said(result) -> bool:
    """Whether a failure is the transport's word for what the ranks did (a peer gone, a size
    it did not expect), not a cause the check named itself (a rule it quotes)."""
    return result.status == Verdict.ERROR and any(w in result.message for w in TRANSPORT_WORDS) \
        and "rule '" not in (result.hint or "")


def _collectives(outcome: Outcome | None, status: RankStatus | None) -> dict:
    """{(group, n): call} of one rank: its n-th collective on each group, from its record,
    and the last one it called (its status: a rank that died in it wrote no record)."""
    calls = {}
    for e in outcome.events if outcome is not None else ():
        if e.get("nth") and e.get("group") != "?":  # "?": group unknown
            calls[(e.get("group"), e["nth"])] = e
    now = status.last_collective if status is not None else None
    if now is not None and now.get("nth") and now.get("group") != "?":
        calls.setdefault((now.get("group"), now["nth"]), now)
    return calls


def _differ(a: dict, b: dict) -> bool:
    if a.get("family") != b.get("family"):
        return True
    ga, gb = str(a.get("given") or ""), str(b.get("given") or "")
    if not ga or not gb:
        return False
    (shape_a, dtype_a), (shape_b, dtype_b) = ga.rsplit(" ", 1), gb.rsplit(" ", 1)
    if dtype_a != dtype_b:
        return True
    kind = str(a.get("kind", "")).removeprefix("funcol.")
    return kind in SAME_SHAPE and _numel(shape_a) != _numel(shape_b)   # NCCL counts elements


SPLITS = ("in an all-to-all, rank q's output_splits[p] must be rank p's input_splits[q] (the "
          "rows p sends to q): a rank cannot know what its peers send unless they tell it, so "
          "exchange the split sizes first (one all-to-all of the counts), then receive what "
          "they say")
_SPLITS = re.compile(r"^in \[([\d, ]*)\] out \[([\d, ]*)\]$")


def _ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", str(text or ""))]


def splits_disagree(nth: int, calls: dict[int, dict]) -> dict | None:
    """A failed result's fields when the ranks' n-th all_to_all_single on one group (calls:
    {global rank: its call}) was given split sizes that do not pair up: rank q's out[p] is not
    rank p's in[q] (p, q their places in the group). Said with both numbers, the same whichever
    rank the transport failed first (a rank that died in the call has only its status: the
    pairs of ranks known are judged); None when they agree."""
    parsed = {}
    for r, c in calls.items():
        m = _SPLITS.match(str(c.get("splits") or ""))
        members = _ints(c.get("members"))
        if m is None or r not in members:
            return None
        parsed[r] = (_ints(m.group(1)), _ints(m.group(2)), members)
    members = next(iter(parsed.values()), (None, None, []))[2]
    if any(v[2] != members for v in parsed.values()):
        return None
    n = len(members)
    for q in sorted(parsed):             # the pairs of ranks whose calls are known
        for p in sorted(parsed):
            sent, got = parsed[p][0], parsed[q][1]
            gp, gq = members.index(p), members.index(q)
            if len(sent) != n or len(got) != n or sent[gq] == got[gp]:
                continue
            c = calls[q]
            phase = str(c.get("phase") or "")
            return dict(status=Verdict.FAILED, rank=q, phase=phase, key=f"{phase}/communication",
                        message=f"the ranks' {_ordinal(nth)} collective on the group, "
                                f"{c.get('kind')} at {c.get('where')}, was given split sizes "
                                f"that do not pair up: rank {p} sends {sent[gq]} rows to rank "
                                f"{q} (rank {p}'s input_splits[{gq}]: {sent}), but rank {q} "
                                f"expects {got[gp]} from rank {p} (rank {q}'s "
                                f"output_splits[{gp}]: {got})", hint=SPLITS)
    return None


def _numel(shape: str) -> int | None:
    try:
        return math.prod(int(d) for d in shape.strip("[]").split(",") if d.strip())
    except ValueError:
        return None


def _call(rank: int, nth: str, c: dict) -> str:
    given = f", given {c['given']}" if c.get("given") else ""
    return f"rank {rank}'s {nth} is {c.get('kind') or c.get('family')} at {c.get('where')}{given}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# NCCL rule 'collectives that do not match' (DESIGN.md)
def collectives_differ(outcomes: dict[int, Outcome],
                       statuses: dict[int, RankStatus] | None = None) -> dict | None:
    """A failed result's fields when two ranks' n-th collectives on one group are not the same
    call (another operation, dtype, or shape where every rank gives the same): named with both
    calls. Only said of a run that failed anyway (a crash, an error, a hang): it explains it."""
    statuses = statuses or {}
    per_rank = {r: _collectives(outcomes.get(r), statuses.get(r))
                for r in sorted(set(outcomes) | set(statuses))}
    keys = sorted({k for calls in per_rank.values() for k in calls},
                  key=lambda k: (k[1], str(k[0])))
    for key in keys:
        having = [(r, calls[key]) for r, calls in per_rank.items() if key in calls]
        disagree = splits_disagree(key[1], dict(having))
        if disagree is not None:
            return disagree
        for (ra, a), (rb, b) in zip(having, having[1:]):
            if _differ(a, b):
                phase = str(b.get("phase") or a.get("phase") or "")
                return dict(status=Verdict.FAILED, rank=rb, phase=phase, key=f"{phase}/communication",
                            message=f"the ranks' collective calls do not match: "
                                    f"{_call(ra, f'{_ordinal(key[1])} collective on the group', a)}"
                                    f"; {_call(rb, _ordinal(key[1]), b)}",
                            hint=MATCH)
    return None
