"""Turn Results into what a student reads (text) and what tools read (JSON)."""
from __future__ import annotations

import json
from collections import OrderedDict

from rtp_course.checker.verdict import Result

MARK = {"passed": "PASS", "failed": "FAIL", "notimpl": "TODO", "error": "ERROR",
        "deadlock": "HANG", "skipped": "SKIP"}


def by_check(results):
    grouped = OrderedDict()
    for r in results:
        grouped.setdefault((r.exercise, r.check), []).append(r)
    return grouped


def text(results: list[Result], verbose: bool = False) -> str:
    lines = []
    for (ex, name), rs in by_check(results).items():
        bad = [r for r in rs if not r.passed]
        sizes = ",".join(str(r.world_size) for r in rs)
        if not bad:
            lines.append(f"  PASS  {ex}.{name}  (world sizes {sizes})")
            continue
        first = bad[0]
        if first.status == "notimpl":
            lines.append(f"  TODO  {ex}.{name}: {first.message}")
            continue
        where = ", ".join(str(r.world_size) for r in bad)
        lines.append(f"  {MARK[first.status]:4}  {ex}.{name}  (fails at world size {where})")
        lines.append(f"        world size {first.world_size}, phase {first.phase or '-'}: {first.message}")
        if first.details.get("where"):
            lines.append("        in your code:\n" + _indent(first.details["where"], 10))
        if first.hint:
            lines.append(f"        hint: {first.hint}")
        if first.details.get("vs_reference"):
            lines.append(f"        reference: {first.details['vs_reference']}")
        if verbose and first.details.get("stacks"):
            for r, st in sorted(first.details["stacks"].items()):
                lines.append(f"        stack of rank {r}:\n" + _indent(st, 10))
    lines.append("")
    lines.append(summary_table(results))
    return "\n".join(lines)


def summary(results):
    """{exercise: (passed checks, total checks, status word)}."""
    out = OrderedDict()
    for (ex, _), rs in by_check(results).items():
        p, t, todo = out.get(ex, (0, 0, 0))
        ok = all(r.passed for r in rs)
        out[ex] = (p + ok, t + 1, todo + any(r.status == "notimpl" for r in rs))
    return out


def summary_table(results) -> str:
    rows = ["  exercise          checks passed   status", "  " + "-" * 44]
    for ex, (p, t, todo) in summary(results).items():
        word = "ok" if p == t else ("not implemented yet" if todo == t else "needs work")
        rows.append(f"  {ex:<17} {p:>3} / {t:<3}       {word}")
    return "\n".join(rows)


def to_json(results: list[Result]) -> dict:
    exercises = OrderedDict()
    for r in results:
        ex = exercises.setdefault(r.exercise, {"passed": True, "checks": []})
        ex["passed"] &= r.passed
        ex["checks"].append({"name": r.check, "world_size": r.world_size, "passed": r.passed,
                             "status": r.status, "phase": r.phase, "rank": r.rank, "key": r.key,
                             "message": r.message, "hint": r.hint,
                             "where": r.details.get("where", ""),
                             "vs_reference": r.details.get("vs_reference", "")})
    passed = all(r.passed for r in results) and bool(results)
    s = summary(results)
    return {"passed": passed, "exercises": exercises,
            "summary": "; ".join(f"{ex} {p}/{t}" for ex, (p, t, _) in s.items())}


def write_json(results, path) -> None:
    with open(path, "w") as fh:
        json.dump(to_json(results), fh, indent=2)


def _indent(s: str, n: int) -> str:
    return "\n".join(" " * n + line for line in s.rstrip().splitlines())
