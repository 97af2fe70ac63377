"""Compare a failing implementation with the reference solution, where this edition has it
(the instructor's: course/material.py says where; the student edition has none).

Values are always judged against the serial model. When a check fails and
`solutions/` is installed, the same check is run once on the reference (the
outcome is cached on disk, keyed by the code of the solutions and the checks)
and the diagnosis gains what the reference communicated in that phase, so a
grader or a TA sees at once "yours: 2 all_reduce, reference: 1".
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import rtp_course
from rtp_course.checker.registry import hidden_dir
from rtp_course.course.material import solutions_dir


def reference_dir() -> Path | None:
    return solutions_dir()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rtp-course" / "reference"


def cache_key(check, ws: int, dtype) -> str:
    h = hashlib.sha256(f"{check.id}|{ws}|{dtype}|{rtp_course.__version__}".encode())
    ref = reference_dir()
    checker = Path(rtp_course.__file__).resolve().parent / "checker"
    for path in sorted(list(ref.glob("*.py")) + list(checker.rglob("*.py"))):
        h.update(path.read_bytes())
    hidden = check.__class__.__module__
    if hidden.startswith("rtp_hidden_checks."):
        h.update((hidden_dir() / f"{hidden.split('.')[-1]}.py").read_bytes())
    return h.hexdigest()[:24]


def load(check, ws, dtype):
    """The cached outcomes of the reference, as JSON data (never unpickled), or None."""
    p = _cache_dir() / f"{cache_key(check, ws, dtype)}.json"
    try:
        return {int(r): o for r, o in json.loads(p.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return None


def save(check, ws, dtype, outcomes) -> None:
    d = _cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    slim = {r: {"status": str(o.status), "events": o.events} for r, o in outcomes.items()}
    (d / f"{cache_key(check, ws, dtype)}.json").write_text(json.dumps(slim, default=str))


def comm_by_phase(events, phase: str) -> str:
    counts = Counter(e["kind"] for e in events if e["phase"] == phase)
    nbytes = sum(e["nbytes"] for e in events if e["phase"] == phase)
    if not counts:
        return "no communication"
    calls = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))
    return f"{calls} ({nbytes} bytes moved on this rank)"


def traffic(events, phase: str) -> tuple:
    """What a rank moved in `phase`, blind to how it was posted: (calls by kind, bytes), a
    blocking send and an isend alike (the Rules leave that choice to the student)."""
    kinds = Counter(e["kind"].removeprefix("i") if e["kind"] in ("isend", "irecv") else e["kind"]
                    for e in events if e["phase"] == phase)
    return kinds, sum(e["nbytes"] for e in events if e["phase"] == phase)


def annotate(result, impl_outcomes, ref_outcomes) -> None:
    """Add the reference's and the implementation's communication in the failing phase, where
    they differ in count or bytes: the line is to show traffic gone wrong, not how the
    reference posts it (a correct blocking chain where it batches is no lead)."""
    if not ref_outcomes or result.rank is None or result.rank not in ref_outcomes:
        return
    if not result.phase or result.rank not in (impl_outcomes or {}):
        return
    ref_events, my_events = ref_outcomes[result.rank]["events"], impl_outcomes[result.rank].events
    ref = comm_by_phase(ref_events, result.phase)
    mine = comm_by_phase(my_events, result.phase)
    if traffic(ref_events, result.phase) != traffic(my_events, result.phase):
        result.details["vs_reference"] = (f"in phase {result.phase}, rank {result.rank} did "
                                          f"{mine}; the reference solution did {ref}")
