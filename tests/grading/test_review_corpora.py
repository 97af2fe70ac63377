"""The review's scan over the course's corpora (rtp_course.instructor.review.scan): the
references, the stubs, every correct alternative and realistic wrong one have no flag, as
built and as written, and a file padded to a megabyte is scanned to its end. Pure, but a
few seconds a corpus: the grading layer (tests/unit holds the scan's own cases)."""
import sys
from pathlib import Path

import pytest

from rtp_course.course import EXERCISES
from rtp_course.instructor.review.scan import scan_source

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import wrongs  # noqa: E402  (tests/helpers/wrongs.py: builds tests/correct and tests/wrong entries)


def built(kind):
    return {str(p.relative_to(ROOT)): wrongs.build(p)
            for p in sorted((ROOT / "tests" / kind).glob("*/*.py")) if not p.name.startswith("_")}


@pytest.mark.parametrize("kind", ["honest", "correct", "wrong"])
def test_honest_code_is_not_flagged(kind):
    """The references, the stubs, the correct alternatives, and the realistic wrong ones (a bug
    is no forge) have no flag."""
    sources = wrongs.reference_and_stub_sources() if kind == "honest" else built(kind)
    assert len(sources) > 5
    flags = {name: [str(f) for f in scan_source(src, Path(name).name)] for name, src in sources.items()}
    assert {n: f for n, f in flags.items() if f} == {}


def test_a_one_megabyte_file_is_scanned():
    """Honest code padded to 1 MB: scanned to the end (the forge on its last line is found)."""
    honest = (ROOT / "solutions" / "flyweight.py").read_text()
    padded = honest * (1_000_000 // len(honest) + 1)
    padded += "import ctypes\n"
    flags = scan_source(padded, "flyweight.py")
    assert [(f.line, f.code) for f in flags] == [(padded.count("\n"), "native-code")]


def test_every_reference_stub_and_correct_alternative_is_unflagged_as_written():
    """solutions/*.py, the stubs and tests/correct/**/*.py as they are on disk (the correct
    entries are also scanned as built, in test_honest_code_is_not_flagged)."""
    files = sorted((ROOT / "solutions").glob("*.py")) + sorted((ROOT / "tests" / "correct").rglob("*.py"))
    files += [ROOT / "rtp_course" / f"{e}.py" for e in EXERCISES]
    assert len(files) > 40
    flags = {str(p.relative_to(ROOT)): [str(f) for f in scan_source(p.read_text(), p.name)] for p in files}
    assert {n: f for n, f in flags.items() if f} == {}
    correct = sorted((ROOT / "tests" / "correct").rglob("*.py"))
    built_flags = {str(p): [str(f) for f in scan_source(wrongs.build(p), p.name)] for p in correct
                   if not p.name.startswith("_")}
    assert {n: f for n, f in built_flags.items() if f} == {}
