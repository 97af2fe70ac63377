"""Judge what the ranks observed against what the serial model says (`compare`, which
judging.judge calls for a check every rank finished). Runs in the parent only."""
from __future__ import annotations

import re

import torch

from rtp_course.checker.communication import (GROUP, LIBRARIES, SEND_BUFFERS, check_comm,
                                              collectives_differ, nccl_order, sizes_differ,
                                              transport_said, written_send,
                                              wrong_group)
from rtp_course.checker.diagnosis import exception_hint
from rtp_course.checker.registry import Bound, Check, Like
# NOT_GRADED and Result live in checker/types.py; callers that take them from here still can
from rtp_course.checker.types import NOT_GRADED, Outcome, OutcomeStatus, Result, Verdict  # noqa: F401
from rtp_course.course.messages import say, says

TOLERANCE = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-4, 1e-5),
             torch.bfloat16: (2e-2, 1e-2), torch.float16: (1e-2, 1e-3)}
PHASE_ORDER = ("structure", "setup", "init", "forward", "backward")


def _phase_of(key: str) -> str:
    return key.split("/", 1)[0]


def compare_tensor(expected: torch.Tensor, actual, world_size: int | None = None,
                   tolerance: dict | None = None, factors=()) -> tuple[bool, str, dict]:
    """(equal?, what differs, details). details["cause"] / ["cause_hint"]: what the
    difference looks like it comes from (causes()), when something recognisable.
    `tolerance`: {dtype: (rtol, atol)}, a check's own, over TOLERANCE; `factors`: the
    check's own [(factor, cause, hint)] (Check.factors)."""
    if actual is None:
        return False, "is None (no value was produced)", {}
    if not isinstance(actual, torch.Tensor):
        return False, f"is a {type(actual).__name__}, expected a tensor", {}
    if tuple(actual.shape) != tuple(expected.shape):
        return False, (f"has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"), {
            "expected_shape": list(expected.shape), "actual_shape": list(actual.shape)}
    own_dtype = actual.dtype
    if own_dtype != expected.dtype:
        return _wrong_dtype(expected, actual)
    if not expected.is_floating_point():
        bad = (actual != expected).sum().item()
        return bad == 0, f"differs in {bad} of {expected.numel()} entries", {}
    rtol, atol = (tolerance or {}).get(expected.dtype) or TOLERANCE.get(expected.dtype,
                                                                         (1e-5, 1e-6))
    if torch.allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True):
        return True, "", {}
    diff = (actual - expected).abs()
    max_abs = diff.nan_to_num(float("inf")).max().item()
    scale = expected.abs().max().item()
    rel = max_abs / scale if scale > 0 else float("inf")
    where = diff.nan_to_num(float("inf"))
    idx = tuple(int(i) for i in torch.unravel_index(where.argmax(), where.shape)) if where.dim() else ()
    frac = (~torch.isclose(actual, expected, rtol=rtol, atol=atol)).float().mean().item()
    msg = (f"max abs error {max_abs:.3g} (rel {rel:.3g}) at index {list(idx)}: expected "
           f"{expected[idx].item():.6g}, got {actual[idx].item():.6g}; {frac:.0%} of entries wrong")
    details = {"max_abs": max_abs, "max_rel": rel, "shape": list(expected.shape)}
    found = causes(expected, actual, own_dtype, world_size, factors)
    if found:
        cause, hint, overrides = found
        msg += f"; {cause}"
        details.update(cause=cause, cause_hint=hint, cause_overrides=overrides)
    return False, msg, details


def _wrong_dtype(expected, actual) -> tuple[bool, str, dict]:
    """Another dtype than the one that came in fails, whatever the values (rule 'Dtypes')."""
    name = lambda t: str(t.dtype).replace("torch.", "")  # noqa: E731
    msg = f"has dtype {name(actual)}, expected {name(expected)}"
    if expected.is_floating_point() and actual.is_floating_point():
        rtol, atol = TOLERANCE.get(actual.dtype, (1e-2, 1e-3))
        agree = torch.allclose(actual.to(expected.dtype), expected, rtol=rtol, atol=atol)
        msg += " (the values agree)" if agree else " (and the values differ)"
    return False, msg, {"cause": f"it has dtype {name(actual)}, expected {name(expected)}",
                        "cause_hint": say("value.dtypes"), "cause_overrides": True}


def causes(expected, actual, own_dtype, world_size, factors=()) -> tuple[str, str, bool] | None:
    """(what the wrong tensor looks like, the hint that cause calls for, whether that hint
    replaces the check's own), or None. A dtype, NaN or uninitialised memory is the cause
    whatever the function; a wrong order or zeros the check's hint explains better."""
    # atol 1e-6: an optimizer step amplifies float32 rounding of small gradients (Adam: 2.7e-7
    # on a weight of 0.016, seen once in a rounded flat buffer under load)
    if expected.dtype == torch.float64 and torch.allclose(actual, expected, rtol=1e-5, atol=1e-6):
        return say("value.float32"), say("value.dtypes"), True
    bad = ~torch.isfinite(actual)
    if bad.any():
        return say("value.not-finite", n=int(bad.sum())), say("value.not-finite-hint"), True
    scale = expected.abs().max().item()
    if scale > 0 and actual.abs().max().item() > 1e6 * scale:
        return say("value.huge"), say("value.huge-hint"), True
    if scale > 0 and not actual.any():
        return say("value.zeros"), say("value.zeros-hint"), False
    norm = (expected * expected).sum()
    if norm > 0:
        ratio = ((actual * expected).sum() / norm).item()
        rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-6))
        if abs(ratio) > 1e-6 and torch.allclose(actual, ratio * expected, rtol=rtol, atol=atol):
            why, hint = _ratio_cause(ratio, world_size, factors)
            return (say("value.scaled", ratio=f"{ratio:.4g}") + (f" ({why})" if why else ""),
                    hint, bool(hint))
        flat_e, flat_a = expected.flatten().sort().values, actual.flatten().sort().values
        if expected.numel() > 1 and torch.allclose(flat_a, flat_e, rtol=rtol, atol=atol):
            return say("value.misplaced"), say("value.misplaced-hint"), False
    return None


def _hint(check, key, details) -> str:
    """The cause's hint where it decides; else the check's own, its `<key>#scaled` form for a
    tensor that is a multiple of the expected one (the check's hint for the tensor may explain
    layouts that do not matter then)."""
    if details.get("cause_overrides"):
        return details["cause_hint"]
    if says("value.scaled", details.get("cause", "")):
        scaled = check.hint(key, form="scaled")
        if scaled:
            return scaled
    return check.hint(key) or details.get("cause_hint", "")


def _ratio_cause(ratio: float, world_size: int | None, factors=()) -> tuple[str, str]:
    """(what a wrong tensor `ratio` x the expected one comes from, the hint that cause calls
    for, "" where the check's own hint says it better): the check's own factors first (a
    scale of its shapes), then the world size's; every cause the ratio fits is named."""
    if abs(ratio + 1) < 1e-6:
        return say("value.sign"), ""
    found = [(cause, hint) for factor, cause, hint in factors
             if abs(ratio - factor) < 1e-6 * max(1.0, abs(factor))]
    if world_size and world_size > 1:
        if abs(ratio - world_size) < 1e-6:
            found.append((say("value.world-sum", n=world_size), ""))
        if abs(ratio - 1 / world_size) < 1e-6:
            found.append((say("value.world-divided", n=world_size), ""))
    if not found:
        return "", ""
    return "; or ".join(cause for cause, _ in found), found[0][1]


def compare_value(expected, actual) -> tuple[bool, str]:
    if isinstance(expected, Bound):
        ok = actual is not None and actual in expected
        return ok, f"is {actual}, expected {expected}" + (f" ({expected.what})" if expected.what else "")
    ok = actual == expected
    return ok, f"is {actual!r}, expected {expected!r}"


def _close_in_bulk(expected: dict, outcomes: dict, tolerance: dict | None = None) -> set:
    """{(rank, key)} of recorded floating-point tensors that match, found with one allclose per
    dtype over them all: the same test as compare_tensor's (same dtype, shape and tolerance), at a
    fraction of the ~50 us that one call per tensor costs (~10000 tensors a run, in the parent,
    on the cores the ranks need). A group with any difference is left to compare_tensor, which
    names the earliest."""
    groups = {}
    for rank, wanted in expected.items():
        records = outcomes[rank].records
        for key, exp in wanted.items():
            got = records.get(key)
            if (isinstance(exp, torch.Tensor) and exp.is_floating_point() and isinstance(got, torch.Tensor)
                    and got.dtype == exp.dtype and got.shape == exp.shape):
                groups.setdefault(exp.dtype, []).append((rank, key, exp, got))
    close = set()
    for dtype, items in groups.items():
        rtol, atol = (tolerance or {}).get(dtype) or TOLERANCE.get(dtype, (1e-5, 1e-6))
        if torch.allclose(torch.cat([got.reshape(-1) for *_, got in items]),
                          torch.cat([exp.reshape(-1) for *_, exp, _ in items]),
                          rtol=rtol, atol=atol, equal_nan=True):
            close.update((rank, key) for rank, key, *_ in items)
    return close


def compare(check: Check, world_size: int, outcomes: dict[int, Outcome], expected: dict,
            rules: list) -> Result:
    """outcomes: {rank: its Outcome}; expected: {rank: {key: value}}. In order: an
    exception; what explains a wrong value (a send buffer written before its wait, a call on
    another group, torch's own DDP); the values, earliest phase first; the counts of
    communication; NCCL's stream order. A wrong value or count where a rank let go of a work
    unwaited (not while raising: an exception drops what was in flight) names that work first:
    it is the likeliest cause; one where a rank gave a send or receive a tag says that NCCL
    ignores tags (the checker drops them: runtime/nccl/calls.py)."""
    result = _judge(check, world_size, outcomes, expected, rules)
    tagged = _tagged(outcomes, result.phase) if result.status == Verdict.FAILED else None
    if tagged:
        rank, what = tagged
        result.message += (f"; rank {rank} told its transfers apart by tag ({what}): NCCL "
                           f"ignores tags, and so does the checker")
        result.hint = say("comm.tags") + (f". What failed says: {result.hint}" if result.hint else "")
    # (not where the failure is the check's own list of works never waited: it names them)
    dropped = _dropped(outcomes, result.phase) if result.status == Verdict.FAILED \
        and "never waited" not in result.key else None
    if dropped:
        rank, what = dropped
        result.message = (f"rank {rank} let go of a work it never waited ({what}); "
                          f"then: {result.message}")
        result.hint = say("comm.dropped") + (f". What failed says: {result.hint}" if result.hint else "")
    return result


def _tagged(outcomes: dict, phase: str):
    """(rank, 'isend with tag=1 at ...') of the first send or receive given a tag, in `phase`
    (any phase if the failure names none), or None."""
    for rank in sorted(outcomes):
        for e in outcomes[rank].events:
            if e.get("tag") and (not phase or e.get("phase") == phase):
                return rank, f"{e.get('family') or e.get('kind')} with tag={e.get('tag')} at " \
                             f"{e.get('where')}"
    return None


def _dropped(outcomes: dict, phase: str):
    """(rank, 'irecv at ...') of the first work a rank let go of unwaited in `phase` (any phase
    if the failure names none) and never saw completed, or None."""
    def let_go(e) -> bool:
        return bool(e.get("dropped")) and not e.get("completed") \
            and (not phase or e.get("phase") == phase)
    for rank in sorted(outcomes):
        if not outcomes[rank].ok:
            continue
        events = outcomes[rank].events
        for e in events:
            if let_go(e):
                n = sum(let_go(d) for d in events)
                more = f", and {n - 1} more" if n > 1 else ""
                return rank, f"{e.get('family') or e.get('kind')} at {e.get('where')}{more}"
    return None


def _judge(check: Check, world_size: int, outcomes: dict, expected: dict, rules: list) -> Result:
    base = dict(exercise=check.exercise, check=check.name, world_size=world_size)
    rules_of = lambda rank: rules.get(rank, []) if isinstance(rules, dict) else rules  # noqa: E731
    mismatched = sizes_differ(outcomes)    # the cause of whatever the ranks then raised
    if mismatched is not None:
        return Result(**base, **mismatched)
    raised = _exception(check, base, outcomes)
    if raised is not None and raised.status == Verdict.ERROR:
        differ = collectives_differ(outcomes) if transport_said(raised) else None
        if differ is not None:                     # why the transport failed a rank
            return Result(**base, **{**differ, "status": Verdict.ERROR},
                          details={"transport": f"rank {raised.rank}: {raised.message}"})   # an earlier wrong value came first
        found = _values(check, base, world_size, outcomes, _before(expected, raised.phase,
                                                                   outcomes))
        return found or raised
    found = (raised or _explaining(check, base, outcomes, rules_of)
             or _values(check, base, world_size, outcomes, expected))
    if found is not None:
        return found
    for rank in sorted(outcomes):
        bad = check_comm(rules_of(rank), outcomes[rank].events)
        if bad:
            rule, msg = bad
            return Result(**base, status=Verdict.FAILED, rank=rank, phase=rule.phase,
                          key=f"{rule.phase}/communication", message=f"rank {rank}, {msg}",
                          hint=check.quoting_rule(rule.hint))
    hang = nccl_order(outcomes)
    if hang is not None:
        return Result(**base, **hang)
    return Result(**base, status=Verdict.PASSED)


def _exception(check, base, outcomes) -> Result | None:
    """A rank's own exception first: a peer's "connection closed", or a result file cut short
    when the launcher ended a rank in the middle of writing it, only follows it."""
    order = sorted(outcomes, key=lambda q: (fallout(outcomes[q]),
                                            outcomes[q].type == "MalformedResult", q))
    for status in (OutcomeStatus.NOTIMPL, OutcomeStatus.ERROR):
        for rank in order:
            o = outcomes[rank]
            if o.status != status:
                continue
            if status == OutcomeStatus.NOTIMPL:
                return Result(**base, status=Verdict.NOTIMPL, rank=rank, phase=o.phase,
                              message=f"not implemented yet: {o.message}")
            said = (f"{o.type}: {o.message}" if o.type == "SyntaxError"
                    else f"rank {rank} raised {o.type}: {o.message}")
            return Result(**base, status=Verdict.ERROR, rank=rank, phase=o.phase,
                          message=said, details={"where": o.where},
                          hint=error_hint(check, o, said)[1])
    return None


def _exception_hints():
    """Where an exception's hint comes from, in the order they are asked: the first that has
    one wins. A cause the exception makes sure of beats the check's own hints, which beat a
    cause it only makes likely."""
    return (("the rank's own", lambda check, o, said: o.hint),
            ("the error's kind", lambda check, o, said: _error_hint(o)),
            ("a sure cause", lambda check, o, said: exception_hint(said, "sure")),
            ("the check's, for this exception", lambda check, o, said: _check_error_hint(check, o)),
            ("the check's, for the phase", lambda check, o, said: check.hint(o.phase or "setup")),
            ("a likely cause", lambda check, o, said: exception_hint(said, "likely")))


def error_hint(check, o: Outcome, said: str) -> tuple[str, str]:
    """(where it came from, the hint) for a rank's exception `o` that the report says as `said`."""
    for source, pick in _exception_hints():
        hint = pick(check, o, said)
        if hint:
            return source, hint
    return "", ""


def _before(expected: dict, phase: str, outcomes: dict) -> dict:
    """The expected values of the phases that ran before `phase`, where an exception was
    raised, and that every rank recorded: a wrong value there came before the exception (and
    may have caused it), so it is reported first."""
    keys = list(dict.fromkeys(k for r in sorted(expected) for k in expected[r]))
    phases = [_phase_of(k) for k in keys]
    if not phase or phase not in phases:
        return {}
    earlier = keys[:phases.index(phase)]
    seen = lambda r, k: k in outcomes[r].records or k in outcomes[r].values  # noqa: E731
    return {r: {k: v for k, v in e.items() if k in earlier and r in outcomes and seen(r, k)}
            for r, e in expected.items()}


def _explaining(check, base, outcomes, rules_of) -> Result | None:
    """What explains a wrong value better than the value does, judged before the values: a
    send buffer written before its wait, a call on another group, torch's own DDP."""
    for rank in sorted(outcomes):
        events = outcomes[rank].events
        said = written_send(events)
        if said:
            phase = said.split(":", 1)[0]
            return Result(**base, status=Verdict.FAILED, rank=rank, phase=phase,
                          key=f"{phase}/send buffers", message=f"rank {rank}, {said}",
                          hint=SEND_BUFFERS)
        bad = wrong_group(rules_of(rank), events) or check_comm(
            [r for r in rules_of(rank) if r.kind in LIBRARIES], events)
        if bad:
            rule, msg = bad
            hint = rule.hint if "rule 'Group'" in rule.hint or rule.members is None else \
                check.hints.get("wrong group", GROUP)       # a check's own words for its calls
            return Result(**base, status=Verdict.FAILED, rank=rank, phase=rule.phase,
                          key=f"{rule.phase}/communication", message=f"rank {rank}, {msg}",
                          hint=check.quoting_rule(hint))
    return None


def _values(check, base, world_size, outcomes, expected) -> Result | None:
    """The first recorded value that differs from the expected one, earliest phase first."""
    likes = {(r, k): v.lookalikes for r, e in expected.items() for k, v in e.items()
             if isinstance(v, Like)}
    expected = {r: {k: v.value if isinstance(v, Like) else v for k, v in e.items()}
                for r, e in expected.items()}
    keys = list(dict.fromkeys(k for r in sorted(expected) for k in expected[r]))
    close = _close_in_bulk(expected, outcomes, check.tolerance)
    for key in keys:  # the earliest phase first, whichever rank shows it
        phase = _phase_of(key)
        for rank in sorted(expected):
            if key not in expected[rank] or (rank, key) in close:
                continue
            exp, o = expected[rank][key], outcomes[rank]
            if isinstance(exp, torch.Tensor):
                if key not in o.records:
                    said = o.values.get(key)      # the check's word for why not
                    return Result(**base, status=Verdict.FAILED, rank=rank, phase=phase, key=key,
                                  message=f"rank {rank}, {key} {said}" if isinstance(said, str)
                                  else f"{key}: nothing was recorded", hint=check.hint(key))
                ok, msg, details = compare_tensor(exp, o.records[key], world_size,
                                                  check.tolerance, check.factors(world_size))
                if not ok:
                    msg, details = _lookalike(likes.get((rank, key), ()), o.records[key],
                                              world_size, check.tolerance, msg, details)
            else:
                ok, msg = compare_value(exp, o.values.get(key))
                details = {}
            if not ok:
                return Result(**base, status=Verdict.FAILED, rank=rank, phase=phase, key=key,
                              message=f"rank {rank}, {key} {msg}",
                              hint=_hint(check, key, details), details=details)
    return None


def _lookalike(lookalikes, actual, world_size, tolerance, msg, details):
    """The wrong tensor matches what a known mistake gives (registry.Like): name it."""
    if not isinstance(actual, torch.Tensor):
        return msg, details
    for tensor, cause, hint in lookalikes:
        if tensor.shape == actual.shape and compare_tensor(tensor, actual, world_size,
                                                           tolerance)[0]:
            return (f"{msg}; it equals what {cause} gives",
                    dict(details, cause=cause, cause_hint=hint, cause_overrides=True))
    return msg, details


# What an exception's text names as its kind of cause, first match: a check's hints key
# 'error/<phase>#<form>' or 'error#<form>' answers that kind alone (a None where a tensor was
# expected, a hook torch refused, sizes that disagree), before its catch-all 'error/<phase>'.
EXCEPTION_FORMS = (
    ("none", re.compile(r"'NoneType'|NoneType object|got None|is None")),
    ("hook", re.compile(r"register a hook|hook on a tensor")),
    ("size", re.compile(r"(?i)size|shape|number of elements|numel")),
)


def exception_form(text: str) -> str:
    """The EXCEPTION_FORMS kind the exception `text` names, "" if none."""
    return next((form for form, pattern in EXCEPTION_FORMS if pattern.search(text)), "")


def _check_error_hint(check, o) -> str:
    """A check's own hint for an exception: for the kind of cause its text names
    (exception_form), hints["error/<phase>#<form>"], else hints["error#<form>"]; else
    hints["error/<phase>"], else hints["error"]."""
    phase, form = o.phase, exception_form(f"{o.type}: {o.message}")
    return ((form and (check.hints.get(f"error/{phase}#{form}")
                       or check.hints.get(f"error#{form}")))
            or check.hints.get(f"error/{phase}") or check.hints.get("error", ""))


def fallout(o: Outcome) -> bool:
    """An error caused by a peer that left (its own error explains it better): gloo's words
    for it."""
    msg = o.message
    return any(m in msg for m in ("Connection closed by peer", "Connection reset",
                                  "Broken pipe"))


def _error_hint(o) -> str:
    """Fallout: the rank failed because a peer left, whatever it was doing."""
    if fallout(o):
        return say("exception.fallout")
    return ""
