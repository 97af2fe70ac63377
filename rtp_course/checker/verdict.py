"""Judge what the ranks observed against what the serial model says. Runs in the parent only."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rtp_course.checker.registry import Bound, Check

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


def compare_tensor(expected: torch.Tensor, actual) -> tuple[bool, str, dict]:
    if actual is None:
        return False, "is None (no value was produced)", {}
    if not isinstance(actual, torch.Tensor):
        return False, f"is a {type(actual).__name__}, expected a tensor", {}
    if tuple(actual.shape) != tuple(expected.shape):
        return False, (f"has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"), {
            "expected_shape": list(expected.shape), "actual_shape": list(actual.shape)}
    if actual.dtype != expected.dtype and expected.is_floating_point():
        actual = actual.to(expected.dtype)
    if not expected.is_floating_point():
        bad = (actual != expected).sum().item()
        return bad == 0, f"differs in {bad} of {expected.numel()} entries", {}
    rtol, atol = TOLERANCE.get(expected.dtype, (1e-5, 1e-6))
    if torch.allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True):
        return True, "", {}
    diff = (actual - expected).abs()
    max_abs = diff.max().item()
    scale = expected.abs().max().item()
    rel = max_abs / scale if scale > 0 else float("inf")
    idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
    frac = (~torch.isclose(actual, expected, rtol=rtol, atol=atol)).float().mean().item()
    msg = (f"max abs error {max_abs:.3g} (rel {rel:.3g}) at index {list(idx)}: expected "
           f"{expected[idx].item():.6g}, got {actual[idx].item():.6g}; {frac:.0%} of entries wrong")
    norm = (expected * expected).sum()
    if norm > 0:
        ratio = ((actual * expected).sum() / norm).item()
        if abs(ratio) > 1e-6 and torch.allclose(actual, ratio * expected, rtol=rtol, atol=atol):
            msg += f"; every entry is {ratio:.4g} x the expected value"
    return False, msg, {"max_abs": max_abs, "max_rel": rel, "shape": list(expected.shape)}


def compare_value(expected, actual) -> tuple[bool, str]:
    if isinstance(expected, Bound):
        ok = actual is not None and actual in expected
        return ok, f"is {actual}, expected {expected}" + (f" ({expected.what})" if expected.what else "")
    ok = actual == expected
    return ok, f"is {actual!r}, expected {expected!r}"


def judge(check: Check, world_size: int, outcomes: dict, expected: dict,
          rules: list) -> Result:
    """outcomes: {rank: saved worker outcome}; expected: {rank: {key: value}}."""
    base = dict(exercise=check.exercise, check=check.name, world_size=world_size)
    for status in ("notimpl", "error"):
        for rank in sorted(outcomes, key=lambda q: (_fallout(outcomes[q]), q)):
            o = outcomes[rank]
            if o["status"] == status:
                if status == "notimpl":
                    return Result(**base, status="notimpl", rank=rank, phase=o.get("phase", ""),
                                  message=f"not implemented yet: {o['message']}")
                said = (f"{o['type']}: {o['message']}" if o.get("type") == "SyntaxError"
                        else f"rank {rank} raised {o['type']}: {o['message']}")
                return Result(**base, status="error", rank=rank, phase=o.get("phase", ""),
                              message=said,
                              details={"where": o.get("where", "")},
                              hint=o.get("hint") or _check_error_hint(check, o) or _error_hint(o)
                              or check.hint(o.get("phase") or "setup"))
    keys = list(dict.fromkeys(k for r in sorted(expected) for k in expected[r]))
    for key in keys:  # the earliest phase first, whichever rank shows it
        phase = _phase_of(key)
        for rank in sorted(expected):
            if key not in expected[rank]:
                continue
            exp, o = expected[rank][key], outcomes[rank]
            if isinstance(exp, torch.Tensor):
                if key not in o["records"]:
                    return Result(**base, status="failed", rank=rank, phase=phase, key=key,
                                  message=f"{key}: nothing was recorded", hint=check.hint(key))
                ok, msg, details = compare_tensor(exp, o["records"][key])
            else:
                ok, msg = compare_value(exp, o["values"].get(key))
                details = {}
            if not ok:
                return Result(**base, status="failed", rank=rank, phase=phase, key=key,
                              message=f"rank {rank}, {key} {msg}", hint=check.hint(key),
                              details=details)
    for rank in sorted(outcomes):
        mine = rules.get(rank, []) if isinstance(rules, dict) else rules  # {rank: rules} too
        bad = check_comm(mine, outcomes[rank]["events"])
        if bad:
            rule, msg = bad
            return Result(**base, status="failed", rank=rank, phase=rule.phase,
                          key=f"{rule.phase}/communication", message=f"rank {rank}, {msg}",
                          hint=rule.hint)
    return Result(**base, status="passed")


P2P = ("send", "recv", "isend", "irecv")


def _count_matches(rule, ev) -> bool:
    """A rule's kind names functions or operations: "all_gather" also counts
    all_gather_into_tensor, all_gather_single, funcol.all_gather_tensor ... (any API)."""
    if ev["phase"] != rule.phase:
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


def _fallout(o) -> bool:
    """An error caused by a peer that left (its own error explains it better)."""
    msg = o.get("message", "")
    return "Connection closed by peer" in msg or "Connection reset" in msg


def _error_hint(o) -> str:
    msg = o.get("message", "")
    if "Connection closed by peer" in msg or "Connection reset" in msg:
        return ("another rank left a collective this rank was in: ranks must make the same "
                "collective calls in the same order")
    if "shape" in msg or "size" in msg:
        return "compare the shapes in the docstring with what your code produces"
    return ""
