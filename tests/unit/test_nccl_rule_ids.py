"""Each row of DESIGN.md's table of where NCCL and gloo differ is a rule with an id (its
name): the code that applies it cites it (`# NCCL rule '<row>'`), and a pattern of
tests/helpers/nccl_patterns.py or a named test holds it (tests/test_nccl_semantics.py)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITE = re.compile(r"# NCCL rule '([^']+)'")


def design_rows() -> list[str]:
    text = (ROOT / "DESIGN.md").read_text()
    table = text[text.index("| row | NCCL | gloo |"):]
    table = table[:table.index("\n\n")]
    return [ln.split("|")[1].strip() for ln in table.splitlines()[2:]]


def citations() -> dict[str, list[str]]:
    cited: dict[str, list[str]] = {}
    for f in sorted((ROOT / "rtp_course").rglob("*.py")):
        for row in CITE.findall(f.read_text()):
            cited.setdefault(row, []).append(str(f.relative_to(ROOT)))
    return cited


def test_the_table_has_rows():
    assert len(design_rows()) >= 10 and "stream order" in design_rows()


def test_every_rule_is_cited_by_the_code_that_applies_it():
    missing = [row for row in design_rows() if row not in citations()]
    assert not missing, f"DESIGN.md's NCCL rows no code cites (# NCCL rule '<row>'): {missing}"


def test_every_citation_names_a_row():
    unknown = {row: files for row, files in citations().items() if row not in design_rows()}
    assert not unknown, f"code cites NCCL rules DESIGN.md's table does not have: {unknown}"
