"""Where NCCL and gloo differ, the checker on CPU gives NCCL's outcome (runtime/nccl).

Each pattern of tests/helpers/nccl_patterns.py runs on gloo ranks under the checker's NCCL rules,
and the checker's verdict on it (an exception, a hang gloo shows, or a hang the replay of
NCCL's stream order finds) must be the pattern's NCCL label. The same patterns run on NCCL
in scripts/gpu_proof.sh."""
import re

import pytest

from nccl_patterns import EXPECTED_VALUES, PATTERNS
from rtp_course.runtime import nccl
from rtp_course.runtime.launcher import RankHung, launch

CASES = [(name, n) for name, p in PATTERNS.items() for n in p.sizes]


def outcome_on_cpu(name: str, n: int):
    """('ok' | 'error' | 'hang', per-rank results or None)."""
    import nccl_patterns
    try:
        results = launch(nccl_patterns.run, n, args=(name,), backend="gloo", timeout=8)
    except RankHung:
        return "hang", None
    if any(r["outcome"] == "error" for r in results):
        return "error", results
    programs = {r: ((tuple(s) for s in res["program"]["steps"]),
                    {op["id"]: op for op in res["program"]["ops"]})
                for r, res in enumerate(results)}
    programs = {r: (list(steps), ops) for r, (steps, ops) in programs.items()}
    return ("hang" if nccl.simulate(programs) is not None else "ok"), results


@pytest.mark.parametrize("name,n", CASES, ids=[f"{name}-{n}" for name, n in CASES])
def test_the_checker_gives_nccls_outcome(name, n):
    pattern = PATTERNS[name]
    got, results = outcome_on_cpu(name, n)
    assert got == pattern.label, f"{name} at {n} ranks: {got}, NCCL: {pattern.label}: {results}"
    if got == "error":
        said = " ".join(str(r["value"]) for r in results if r["outcome"] == "error")
        assert re.search(pattern.shows, said), said
    if got == "ok" and name in EXPECTED_VALUES:
        assert [r["value"] for r in results] == [EXPECTED_VALUES[name](r, n) for r in range(n)]


def _design_rows() -> dict:
    """{row: its line} of DESIGN.md's table of where NCCL and gloo differ."""
    from pathlib import Path
    design = (Path(__file__).resolve().parents[1] / "DESIGN.md").read_text()
    table = design.split("## One grade: NCCL's rules on CPU")[1].split("\n## ")[0]
    lines = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| row ")]
    return {ln.split("|")[1].strip(): ln for ln in lines if ln.split("|")[1].strip(" -")}


def test_every_pattern_names_a_row_of_the_design_table_and_every_row_is_held():
    """A pattern's `row` is a row's name; a row no pattern holds names the test that holds it,
    or says that no CPU test can."""
    rows = _design_rows()
    assert not sorted({p.row for p in PATTERNS.values()} - rows.keys()), "patterns of no row"
    unheld = [row for row, line in rows.items() if row not in {p.row for p in PATTERNS.values()}
              and "tests/" not in line and "no CPU test" not in line]
    assert not unheld, f"rows of DESIGN.md's NCCL table that nothing holds: {unheld}"
