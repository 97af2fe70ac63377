"""Done-when of the instructor's term: a class of 24 graded end to end by the documented commands
(docs/INSTRUCTORS.md) on a machine with three busy processes per core beside it.

The class hands in assignment 03 (grade("comm"), 10 points for code):

* the reference (twice); four correct alternatives (tests/correct/comm); the reference with a
  notebook cell that raises; the reference renamed and reformatted (a disguised copy):
  10 points each, the copy listed in review.csv as a near copy of the reference;
* the stubs as released, and a comm.py that loops for ever at import: 0 points;
* every realistic bug of tests/wrong/comm that shows at the world sizes graded (one of them
  a deadlock), and a backward that sleeps for ever: fewer than 10 points, never more.

Nothing is lost: every student is in the export with exactly those points, the review lists
the copy, the gradebook's submission times are the collection's, and no process is left.
World sizes 2 and 3 (`--world-size 2 3`) keep the run to minutes: every entry below shows its
bug there (its spec says so). The time of each step is printed (`pytest -s`) and quoted in
docs/INSTRUCTORS.md, "Time".
"""
import csv
import datetime
import os
import sys
import time
from pathlib import Path

import pytest

import wrongs
from grading_course import (alembic_on_path, busy, hand_in, leftovers, run_cli, stop,
                            working_disguise)

pytestmark = [pytest.mark.stress, pytest.mark.timeout(3600)]
ROOT = Path(__file__).resolve().parents[1]
A = "03_tp_communication"
WORLD_SIZES = ("2", "3")
FULL = 10.0


def _disguised_reference() -> str:
    return working_disguise((ROOT / "solutions" / "comm.py").read_text(),
                            (ROOT / "rtp_course" / "comm.py").read_text())


# A hang of the plainest kind: f's backward never returns.
SLEEPS = """

def _backward_for_ever(ctx, grad):
    import time
    time.sleep(10 ** 6)


Duplication.backward = staticmethod(_backward_for_ever)
"""


def _class() -> dict:
    """{student: (comm.py source or None for the stub, expected: "full" | "zero" | "less",
    notebook edit or None)}."""
    reference = (ROOT / "solutions" / "comm.py").read_text()
    students = {"ref": (reference, "full", None), "stubs": (None, "zero", None),
                "nb_error": (reference, "full", "raise RuntimeError('a cell of mine fails')"),
                "copycat": (_disguised_reference(), "full", None),
                "import_loop": (reference + "\nwhile True:\n    pass\n", "zero", None),
                "ref_again": (reference, "full", None),
                "bug_sleeps_in_backward": (reference + SLEEPS, "less", None)}
    for path in sorted((ROOT / "tests" / "correct" / "comm").glob("[!_]*.py")):
        students[f"ok_{path.stem}"] = (wrongs.build(path), "full", None)
    for path in wrongs.collect("comm"):
        spec = wrongs.spec(path)
        if not wrongs.missing_in_torch(path) and set(map(int, WORLD_SIZES)) & set(spec["world_sizes"]):
            students[f"bug_{path.stem}"] = (wrongs.build(path), "less", None)
    return dict(list(students.items())[:24])


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("term")
    course, subs = tmp / "grading", tmp / "submissions"
    students = _class()
    assert len(students) == 24, sorted(students)
    py = sys.executable
    seconds = {}
    run_cli([py, "scripts/make_nbgrader_source.py", A], course)
    with alembic_on_path():
        run_cli([py, "-m", "nbgrader", "generate_assignment", A], course)
    hand_in(subs, course, A, "comm", {s: (comm, cell) for s, (comm, _, cell) in students.items()})
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    collected = run_cli([py, "scripts/collect_submissions.py", str(subs)], course).stdout
    run_cli([py, "-m", "rtp_course.cli", "seal"], course)
    spinning = busy(3 * len(os.sched_getaffinity(0)))
    try:
        steps = {"autograde": ["autograde", A],
                 "grade": ["grade", A, "--world-size", *WORLD_SIZES]}
        out = {}
        for name, args in steps.items():
            start = time.perf_counter()
            out[name] = run_cli([py, "-m", "rtp_course.cli", *args], course, check=False)
            seconds[name] = time.perf_counter() - start
    finally:
        stop(spinning)
    exported = run_cli([py, "-m", "rtp_course.cli", "export"], course, check=False)
    print(f"\nclass of {len(students)}, {len(spinning)} busy processes beside it, world sizes "
          f"{' '.join(WORLD_SIZES)}: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    return {"course": course, "students": students, "out": out, "exported": exported,
            "before": before, "collected": collected, "seconds": seconds,
            "leftovers": leftovers(course)}


def test_every_command_succeeded_and_nothing_is_left(term):
    for name, r in [*term["out"].items(), ("export", term["exported"])]:
        assert r.returncode == 0, f"{name}:\n{r.stdout[-4000:]}\n{r.stderr[-3000:]}"
    assert term["leftovers"] == []


def test_every_student_gets_exactly_what_the_code_earns(term):
    with open(term["course"] / "grades.csv") as fh:
        rows = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == A}
    assert sorted(rows) == sorted(term["students"]), "a student is missing from the export"
    wrong = {}
    for student, (_, expect, _) in term["students"].items():
        got = rows[student]
        ok = {"full": got == FULL, "zero": got == 0.0, "less": 0.0 <= got < FULL}[expect]
        if not ok:
            wrong[student] = (expect, got, (term["course"] / "checks" / student / A / "comm.txt").read_text()[:1500])
    assert not wrong, wrong
    assert "not graded" not in term["out"]["grade"].stdout, term["out"]["grade"].stdout


def test_the_copy_is_in_the_review(term):
    with open(term["course"] / "review.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert any(r["student"] == "copycat" and r["kind"] == "near-copy" and r["where"] == "reference"
               for r in rows), rows[:10]
    assert not [r for r in rows if r["kind"] == "flag" and not r["student"].startswith("bug_")], rows
    assert any(ln.startswith("REVIEW  copycat/") for ln in term["out"]["grade"].stdout.splitlines())


def test_submission_times_are_the_collections(term):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{term['course'] / 'gradebook.db'}", course_id="rtp-course") as gb:
        stamps = {s: gb.find_submission(A, s).timestamp for s in term["students"]}
    before = term["before"].replace(tzinfo=None)
    assert all(t is not None and before <= t <= before + datetime.timedelta(hours=1)
               for t in stamps.values()), stamps


def test_autograde_logs_hold_no_known_noise(term):
    """Every autograde logged a checksum warning for the grading cell and an ipykernel
    PermissionError traceback (its shutdown read all of /proc in the confined kernel)."""
    logs = sorted((term["course"] / "logs" / "autograde" / A).glob("*.log"))
    assert len(logs) == len(term["students"])
    for log in logs:
        text = log.read_text()
        assert "PermissionError" not in text and "Traceback" not in text, (log.name, text[-2000:])
        assert "Attribute 'checksum' for cell e2_comm" not in text, log.name
