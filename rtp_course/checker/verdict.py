"""Judge what the ranks observed against what the serial model says. Runs in the parent only."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import torch

from rtp_course.checker import audit, exception_causes
from rtp_course.checker.registry import Bound, Check
from rtp_course.runtime.commlog import P2P

TOLERANCE = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-4, 1e-5),
             torch.bfloat16: (2e-2, 1e-2), torch.float16: (1e-2, 1e-3)}
PHASE_ORDER = ("structure", "setup", "init", "forward", "backward")


@dataclass
class Result:
    """One check on one world size."""
    exercise: str
    check: str
    world_size: int
    status: str                 # passed | failed | notimpl | error | deadlock | skipped
    message: str = ""
    phase: str = ""
    rank: int | None = None
    key: str = ""
    hint: str = ""
    details: dict = field(default_factory=dict)
    task: str = ""              # the course task the check belongs to, "E2.1"

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _phase_of(key: str) -> str:
    return key.split("/", 1)[0]


def compare_tensor(expected: torch.Tensor, actual, world_size: int | None = None,
                   tolerance: dict | None = None) -> tuple[bool, str, dict]:
    """(equal?, what differs, details). details["cause"] / ["cause_hint"]: what the
    difference looks like it comes from (causes()), when something recognisable.
    `tolerance`: {dtype: (rtol, atol)}, a check's own, over TOLERANCE."""
    if actual is None:
        return False, "is None (no value was produced)", {}
    if not isinstance(actual, torch.Tensor):
        return False, f"is a {type(actual).__name__}, expected a tensor", {}
    if tuple(actual.shape) != tuple(expected.shape):
        return False, (f"has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"), {
            "expected_shape": list(expected.shape), "actual_shape": list(actual.shape)}
    own_dtype = actual.dtype
    if actual.dtype != expected.dtype and expected.is_floating_point():
        actual = actual.to(expected.dtype)
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
    found = causes(expected, actual, own_dtype, world_size)
    if found:
        cause, hint, overrides = found
        msg += f"; {cause}"
        details.update(cause=cause, cause_hint=hint, cause_overrides=overrides)
    return False, msg, details


def causes(expected, actual, own_dtype, world_size) -> tuple[str, str, bool] | None:
    """(what the wrong tensor looks like, the hint that cause calls for, whether that hint
    replaces the check's own), or None. A dtype, NaN or uninitialised memory is the cause
    whatever the function; a wrong order or zeros the check's hint explains better."""
    if own_dtype != expected.dtype and own_dtype.is_floating_point:
        rtol, atol = TOLERANCE.get(own_dtype, (1e-2, 1e-3))
        if torch.allclose(actual, expected, rtol=rtol, atol=atol):
            return (f"it has dtype {str(own_dtype)[6:]}, expected {str(expected.dtype)[6:]}: the "
                    f"values agree only to {str(own_dtype)[6:]} precision",
                    "keep the dtype of the tensors you are given: a buffer made with torch.zeros(n) "
                    "or torch.empty(n) is float32; use x.new_zeros(n) / torch.empty_like(x), or "
                    "pass dtype=x.dtype", True)
    if expected.dtype == torch.float64 and torch.allclose(actual, expected, rtol=1e-5, atol=1e-7):
        return ("its values agree with the expected ones only to float32 precision (about 7 "
                "digits): somewhere on the way they were float32",
                "keep the dtype of the tensors you are given: a buffer made with torch.zeros(n) "
                "or torch.empty(n) is float32 even when the gradients are float64; use "
                "x.new_zeros(n) / torch.empty_like(x), or pass dtype=x.dtype", True)
    bad = ~torch.isfinite(actual)
    if bad.any():
        return (f"{int(bad.sum())} entries are NaN or infinite",
                "NaN or inf where the serial model has numbers: memory read before it was "
                "written (torch.empty, a receive buffer used before wait()), or a division by zero",
                True)
    scale = expected.abs().max().item()
    if scale > 0 and actual.abs().max().item() > 1e6 * scale:
        return ("some entries are huge next to the expected values",
                "values like these are uninitialised memory: a torch.empty buffer (or a receive "
                "buffer) read before anything was written into it; wait() for a receive before "
                "using its tensor", True)
    if scale > 0 and not actual.any():
        return ("it is all zeros",
                "all zeros where the serial model has values: was it ever written? (a receive "
                "never waited for, an in-place update of a copy, a gradient never accumulated)",
                False)
    norm = (expected * expected).sum()
    if norm > 0:
        ratio = ((actual * expected).sum() / norm).item()
        rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-6))
        if abs(ratio) > 1e-6 and torch.allclose(actual, ratio * expected, rtol=rtol, atol=atol):
            why = _ratio_cause(ratio, world_size)
            return (f"every entry is {ratio:.4g} x the expected value" + (f" ({why})" if why else ""),
                    "", False)
        flat_e, flat_a = expected.flatten().sort().values, actual.flatten().sort().values
        if expected.numel() > 1 and torch.allclose(flat_a, flat_e, rtol=rtol, atol=atol):
            return ("it holds the right values in the wrong places",
                    "the right numbers in the wrong places: a slice taken with the wrong rank or "
                    "offset, blocks concatenated in the wrong order, or the wrong dim", False)
    return None


def _hint(check, key, details) -> str:
    if details.get("cause_overrides"):
        return details["cause_hint"]
    return check.hint(key) or details.get("cause_hint", "")


def _ratio_cause(ratio: float, world_size: int | None) -> str:
    if abs(ratio + 1) < 1e-6:
        return "the sign is flipped"
    if world_size and world_size > 1:
        if abs(ratio - world_size) < 1e-6:
            return f"{world_size} = the world size: a sum over the ranks where their mean is wanted"
        if abs(ratio - 1 / world_size) < 1e-6:
            return f"1/{world_size}: divided by the world size once too often"
    return ""


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
        records = outcomes[rank].get("records", {})
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


def judge(check: Check, world_size: int, outcomes: dict, expected: dict,
          rules: list) -> Result:
    """outcomes: {rank: saved worker outcome}; expected: {rank: {key: value}}."""
    base = dict(exercise=check.exercise, check=check.name, world_size=world_size)
    for status in ("notimpl", "error"):
        # a rank's own exception first: a peer's "connection closed", or a result file cut
        # short when the launcher ended a rank in the middle of writing it, only follows it
        for rank in sorted(outcomes, key=lambda q: (fallout(outcomes[q]),
                                                    outcomes[q].get("type") == "MalformedResult",
                                                    q)):
            o = outcomes[rank]
            if o["status"] == status and o.get("relay_notes"):
                o = dict(o, message=_noted(o.get("message", ""), o["relay_notes"]))
            if o["status"] == status:
                if status == "notimpl":
                    return Result(**base, status="notimpl", rank=rank, phase=o.get("phase", ""),
                                  message=f"not implemented yet: {o['message']}")
                said = (f"{o['type']}: {o['message']}" if o.get("type") == "SyntaxError"
                        else f"rank {rank} raised {o['type']}: {o['message']}")
                return Result(**base, status="error", rank=rank, phase=o.get("phase", ""),
                              message=said,
                              details={"where": o.get("where", "")},
                              hint=o.get("hint") or _error_hint(o)
                              or exception_causes.hint_for(said, "sure")
                              or _check_error_hint(check, o)
                              or check.hint(o.get("phase") or "setup")
                              or exception_causes.hint_for(said, "likely"))
    keys = list(dict.fromkeys(k for r in sorted(expected) for k in expected[r]))
    close = _close_in_bulk(expected, outcomes, check.tolerance)
    for key in keys:  # the earliest phase first, whichever rank shows it
        phase = _phase_of(key)
        for rank in sorted(expected):
            if key not in expected[rank] or (rank, key) in close:
                continue
            exp, o = expected[rank][key], outcomes[rank]
            if isinstance(exp, torch.Tensor):
                if key not in o["records"]:
                    return Result(**base, status="failed", rank=rank, phase=phase, key=key,
                                  message=f"{key}: nothing was recorded", hint=check.hint(key))
                ok, msg, details = compare_tensor(exp, o["records"][key], world_size,
                                                  check.tolerance)
            else:
                ok, msg = compare_value(exp, o["values"].get(key))
                details = {}
            if not ok:
                return Result(**base, status="failed", rank=rank, phase=phase, key=key,
                              message=f"rank {rank}, {key} {msg}",
                              hint=_hint(check, key, details), details=details)
    for rank in sorted(outcomes):   # a rule that refuses a library by name, before the audit
        mine = rules.get(rank, []) if isinstance(rules, dict) else rules
        bad = check_comm([r for r in mine if r.kind in LIBRARIES], outcomes[rank]["events"])
        if bad:
            rule, msg = bad
            return Result(**base, status="failed", rank=rank, phase=rule.phase,
                          key=f"{rule.phase}/communication", message=f"rank {rank}, {msg}",
                          hint=check.quoting_rule(rule.hint))
    for rank in sorted(outcomes):
        events, differs, phase = _verified(outcomes[rank])
        if differs:
            return Result(**base, status="failed", rank=rank, phase=phase,
                          key=f"{phase}/communication",
                          message=f"rank {rank}, its communication: {differs}",
                          hint=check.quoting_rule(audit.RULE))
        mine = rules.get(rank, []) if isinstance(rules, dict) else rules  # {rank: rules} too
        bad = check_comm(mine, events)
        if bad:
            rule, msg = bad
            return Result(**base, status="failed", rank=rank, phase=rule.phase,
                          key=f"{rule.phase}/communication", message=f"rank {rank}, {msg}",
                          hint=check.quoting_rule(rule.hint))
    return Result(**base, status="passed")


_NOTE = re.compile(r" \(relay note (\d+)\)")


def _noted(message: str, notes: dict) -> str:
    """A rank's error with the relay's whole text in place of its note: what the other ranks
    posted, which the rank itself was never told (runtime/relay/collectives.OpError)."""
    return _NOTE.sub(lambda m: f": {notes[int(m.group(1))]}" if int(m.group(1)) in notes
                     else "", message)


LIBRARIES = ("DistributedDataParallel",)   # torch wrappers commlog logs by their construction


def _verified(outcome: dict) -> tuple[list, str | None, str]:
    """The rank's logged calls, held against the relay's account where there is one (a CPU
    run: checker/audit.py); the rank's word alone on NCCL."""
    if "carried" not in outcome:
        return outcome["events"], None, ""
    return audit.verify(outcome["events"], outcome["carried"])


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
    kinds = rule.kind.split("|")
    return ev["kind"] in kinds or family in kinds


def check_comm(rules, events):
    for rule in rules:
        hits = [e for e in events if _count_matches(rule, e)]
        n = len(hits)
        ok = n in rule.count if isinstance(rule.count, Bound) else n == rule.count
        if not ok:
            if rule.phase == "*" and hits:     # name the phase it happened in
                rule = replace(rule, phase=hits[0]["phase"])
            seen = ", ".join(f"{e['kind']} at {e['where']}" for e in hits[:4]) or "none"
            want = rule.count if isinstance(rule.count, Bound) else f"exactly {rule.count}"
            return rule, (f"{rule.phase}: {n} {rule.kind} call(s), expected {want}; seen: {seen}")
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


def _check_error_hint(check, o) -> str:
    """A check's own hint for an exception: hints["error/<phase>"], else hints["error"]."""
    return check.hints.get(f"error/{o.get('phase')}") or check.hints.get("error", "")


def fallout(o) -> bool:
    """An error caused by a peer that left (its own error explains it better): gloo's words
    for it, or the relay's (runtime/relay/server.Relay._gone)."""
    msg = o.get("message", "")
    return any(m in msg for m in ("Connection closed by peer", "Connection reset",
                                  "ended before this operation completed"))


def _error_hint(o) -> str:
    """Fallout: the rank failed because a peer left, whatever it was doing."""
    if fallout(o):
        return ("another rank left a collective this rank was in: ranks must make the same "
                "collective calls in the same order")
    return ""
