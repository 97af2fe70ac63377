"""The review `rtp-course grade` writes: review.csv, the gradebook's comment of each grading cell,
one line per flagged student. A copy of the reference, renamed and reformatted, is listed as
a near copy; the reference, the correct alternatives (tests/correct) and the stubs are never
flagged for tampering."""
import csv
import sys
from pathlib import Path

import pytest
from nbgrader.api import Comment, Gradebook

from rtp_course.instructor import grade_code, review_class
from rtp_course.instructor.grade_outcome import CellGrade
from grading_course import ROOT, hidden_in_utf7, make_course

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
sys.path.insert(0, str(ROOT / "tests" / "grading"))  # the disguises live with the similarity's tests
import wrongs  # noqa: E402
from test_review_similarity import COMM, COMM_API, disguise  # noqa: E402

CELLS = (("data_parallel", "dp-code", 10), ("comm", "comm-code", 10))
HOSTILE = "\nimport sys as _s\n_caller = _s._getframe(1)\n"


def _class():
    students = {"ref": None, "copycat": {"comm": disguise((ROOT / "solutions" / "comm.py").read_text())},
                "stubs": {ex: (ROOT / "rtp_course" / f"{ex}.py").read_text()
                          for ex in ("data_parallel", "comm")},
                "hostile": {"comm": (ROOT / "solutions" / "comm.py").read_text() + HOSTILE}}
    for path in sorted((ROOT / "tests" / "correct").glob("*/*.py")):
        if path.parent.name in ("data_parallel", "comm") and not path.name.startswith("_"):
            students[f"ok_{path.parent.name}_{path.stem}"] = {path.parent.name: wrongs.build(path)}
    return students


def _grades(cells, students):
    return type("G", (), {"grades": {s: [CellGrade(c.grade_id, c.notebook, c.exercise, c.points, c.points)
                                        for c in cells] for s in students}})()


def test_a_disguised_copy_is_a_near_copy_and_no_correct_entry_is_flagged(tmp_path):
    """Today nothing was scanned or compared at grading: a byte-identical or disguised copy of
    solutions/ got full marks with no word, and review.csv did not exist."""
    students = _class()
    course, a = make_course(tmp_path, students, "02_class", cells=CELLS)
    cells = grade_code.graded_cells(course, a)
    lines = []
    rows = review_class.review(course, a, cells, _grades(cells, students), lines.append)
    flagged = {r[0] for r in rows if r[3] == "flag"}
    assert flagged == {"hostile"}, [r for r in rows if r[3] == "flag"]
    copies = {(r[0], r[2], r[4]) for r in rows if r[3] == "near-copy"}
    assert ("copycat", "comm", "reference") in copies
    with open(course / review_class.NAME, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == list(review_class.HEADER)
    assert any(r["student"] == "copycat" and r["kind"] == "near-copy" and r["where"] == "reference"
               and float(r["score"]) >= 0.95 for r in table)
    hostile = [r for r in table if r["kind"] == "flag"]
    assert hostile and hostile[0]["where"].startswith("comm.py:") and hostile[0]["reason"]
    assert any(ln.startswith("REVIEW  copycat/02_class: ") and "reference solution" in ln for ln in lines)
    assert any(ln.startswith("REVIEW  hostile/02_class: comm.py:") for ln in lines)
    assert not any(ln.startswith("REVIEW  stubs/") for ln in lines)


def test_flags_go_into_the_grading_cells_comment(tmp_path):
    students = {"ref": None, "hostile": {"comm": (ROOT / "solutions" / "comm.py").read_text() + HOSTILE}}
    course, a = make_course(tmp_path, students, "03_tp_communication", answer_cell=True)
    cells = grade_code.graded_cells(course, a)
    review_class.review(course, a, cells, _grades(cells, students), lambda *_: None)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        got = {(c.notebook.student.id, c.cell.name): c.auto_comment for c in gb.db.query(Comment)}
        flagged = gb.find_submission_notebook(a, a, "hostile").flagged
    assert "review: comm.py:" in got[("hostile", "comm-code")] and flagged
    assert "near copy of the reference solution" in got[("ref", "comm-code")]


def test_grading_one_student_again_keeps_the_others_rows(tmp_path):
    students = {"ref": None, "hostile": {"comm": (ROOT / "solutions" / "comm.py").read_text() + HOSTILE}}
    course, a = make_course(tmp_path, students)
    cells = grade_code.graded_cells(course, a)
    review_class.review(course, a, cells, _grades(cells, students), None)
    before = (course / review_class.NAME).read_text()
    review_class.review(course, a, cells, _grades(cells, ["ref"]), None)
    assert (course / review_class.NAME).read_text() == before
    (course / "submitted" / "hostile" / a / "rtp_course" / "comm.py").write_text(
        (ROOT / "rtp_course" / "comm.py").read_text())
    review_class.review(course, a, cells, _grades(cells, ["hostile"]), None)
    assert ",flag," not in Path(course / review_class.NAME).read_text()


def test_a_compression_bomb_and_a_wrapped_copy_do_not_stop_the_class_review(tmp_path):
    """One student's comm.py holds a bz2 bomb (the scan once decompressed gigabytes for each
    nested codecs.decode and review.csv was never written), another's wraps every name of the
    reference in an identity function (it once scored 0.03): the review is written, the bomb
    flagged for decoding hidden data, the wrapped copy a near copy, the others as before."""
    from test_review_scan_bounds import bomb_source
    from test_review_similarity import identity_wrap
    students = {"ref": None, "bomber": {"comm": bomb_source()},
                "wrapper": {"comm": disguise(identity_wrap((ROOT / "solutions" / "comm.py").read_text()))},
                "hostile": {"comm": (ROOT / "solutions" / "comm.py").read_text() + HOSTILE}}
    course, a = make_course(tmp_path, students)
    cells = grade_code.graded_cells(course, a)
    rows = review_class.review(course, a, cells, _grades(cells, students), None)
    flags = {(r[0], r[4], r[6].rsplit("[", 1)[-1]) for r in rows if r[3] == "flag"}
    assert {s for s, _, _ in flags} == {"bomber", "hostile"}
    assert {(w, c) for s, w, c in flags if s == "bomber"} == {
        ("comm.py:6", "obfuscation]"), ("comm.py:7", "obfuscation]"), ("comm.py:8", "obfuscation]")}
    assert ("wrapper", "comm", "reference") in {(r[0], r[2], r[4]) for r in rows if r[3] == "near-copy"}
    assert (course / review_class.NAME).is_file()


def test_a_fifo_or_a_link_in_a_submission_is_not_read(tmp_path):
    """A submitted comm.py that is a named pipe once blocked the class's review for ever; one
    that is a link would read a file the student does not own. Neither is read."""
    import os
    students = {"ref": None, "piper": {"comm": "x = 1\n"}, "linker": {"comm": "x = 1\n"}}
    course, a = make_course(tmp_path, students)
    piped = grade_code.impl_dir(course, a, "piper") / "comm.py"
    piped.unlink()
    os.mkfifo(piped)
    linked = grade_code.impl_dir(course, a, "linker") / "comm.py"
    linked.unlink()
    linked.symlink_to(ROOT / "solutions" / "comm.py")
    files = review_class.class_files(course, a, ("comm",))
    assert "comm" not in files["piper"] and "comm" not in files["linker"], files
    assert review_class._read(piped) is None and review_class._read(linked) is None



def test_regrading_one_student_keeps_anothers_tampering_row(tmp_path):
    """A red team's: after the class's run, `grade --student bob` (an appeal) wrote the
    assignment's rows again and mallory's `tampered` row was gone."""
    a = "03_tp_communication"
    mallory = ("mallory", a, "comm", "tampered", "comm.txt", "", "HARNESS CHANGED: dist.all_gather")
    flag = ("mallory", a, "comm", "flag", "comm.py:3", "", "monkey-patch [x]")
    review_class.write_csv(tmp_path, a, [mallory, flag], ["mallory", "bob"])
    review_class.write_csv(tmp_path, a, [], ["bob"])
    with open(tmp_path / review_class.NAME, newline="") as fh:
        kinds = {(r["student"], r["kind"]) for r in csv.DictReader(fh)}
    assert kinds == {("mallory", "tampered"), ("mallory", "flag")}
    review_class.write_csv(tmp_path, a, [], ["mallory"])      # graded again: her rows are new
    with open(tmp_path / review_class.NAME, newline="") as fh:
        assert not list(csv.DictReader(fh))


def test_a_tampering_the_page_wraps_across_two_lines_is_a_row(tmp_path):
    """A red team's: raising in a phase whose name pushed the mark to the page's margin split
    it into "HARNESS" and "CHANGED" on two lines; review.csv had no `tampered` row."""
    from rtp_course.confinement.integrity import MARK
    from rtp_course.instructor.grade_record import checks_dir
    a = "05_ring_rotation"
    page = checks_dir(tmp_path, "mallory", a)
    page.mkdir(parents=True)
    head, tail = MARK.split(" ", 1)
    (page / "rotation.txt").write_text(f"FAIL rotation.subgroup phase subgroup clockwise: {head}\n"
                                       f"{tail}: the code under test changed dist.all_gather\n")
    rows = review_class._tampered(tmp_path, a, "mallory")
    assert [(r[2], r[3]) for r in rows] == [("rotation", "tampered")]
    assert rows[0][6].startswith(MARK)


def test_a_tampering_row_is_said_as_such_in_the_comment_and_the_log():
    """A red team's class: the forger's comment read "comm.py is a near copy of comm.txt
    (similarity )", and its REVIEW line did not mention the tampering at all."""
    row = ("forger", "03_tp", "comm", "tampered", "comm.txt", "",
           "HARNESS CHANGED: the code under test wrote the checker's own files")
    assert review_class._said(row, "forger") == (
        "review: comm: HARNESS CHANGED: the code under test wrote the checker's own files")
    lines = []
    review_class._log_flagged("03_tp", [row], {"forger"}, lines.append)
    assert lines == ["REVIEW  forger/03_tp: comm: its checks' report says the code changed the "
                     "harness (comm.txt) (review.csv)"], lines


@pytest.mark.extended     # the scan's decoding is unit-tested (tests/unit/test_review_scan.py)
def test_a_module_that_declares_utf7_is_reviewed_as_python_runs_it(tmp_path):
    """The red team's comm.py declared `coding: utf-7` and hid the whole reference and an
    `import ctypes` in one comment line of its UTF-8 reading: the scan and the similarity read
    UTF-8 (the stub and a comment), Python ran the reference: 10/10, no flag, no row. The review
    reads it as Python does, flags the declaration and what it hid, and finds the copy."""
    hidden = "import ctypes as _native\n" + (ROOT / "solutions" / "comm.py").read_text()
    students = {"ref": None, "stubs": {"comm": (ROOT / "rtp_course" / "comm.py").read_text()},
                "seven": {"comm": hidden_in_utf7((ROOT / "rtp_course" / "comm.py").read_text(), hidden)}}
    course, a = make_course(tmp_path, students)
    cells = grade_code.graded_cells(course, a)
    lines = []
    rows = review_class.review(course, a, cells, _grades(cells, students), lines.append)
    flags = {(r[0], r[4], r[6].rsplit("[", 1)[-1]) for r in rows if r[3] == "flag"}
    assert ("seven", "comm.py:2", "source-encoding]") in flags, flags
    assert any(s == "seven" and code == "native-code]" for s, _, code in flags), flags
    assert {s for s, _, _ in flags} == {"seven"}
    copies = {(r[0], r[2], r[4]) for r in rows if r[3] == "near-copy"}
    assert ("seven", "comm", "reference") in copies, copies
    assert any(ln.startswith("REVIEW  seven/") and "utf-7" in ln for ln in lines), lines


def test_a_copy_parked_in_a_sibling_module_is_a_near_copy_and_honest_classmates_are_not(tmp_path):
    """The red team's comm.py only imported its functions from sharding.py, which held the
    reference comm.py below the sharding stub: comm 10/10, no REVIEW line and no row, the review
    comparing comm.py with comm.py only. The copy is found in sharding.py and said so; an honest
    classmate (whose other modules are the reference's) and one who handed in stubs are not."""
    stub = (ROOT / "rtp_course" / "sharding.py").read_text()
    students = {"ref": None, "ann": {"comm": COMM}, "stubs": {"comm": (ROOT / "rtp_course" / "comm.py").read_text()},
                "xmod": {"comm": f"from .sharding import {', '.join(COMM_API)}  # noqa: F401\n",
                         "sharding": stub + "\n\n" + disguise((ROOT / "solutions" / "comm.py").read_text())}}
    course, a = make_course(tmp_path, students)
    cells = grade_code.graded_cells(course, a)
    lines = []
    rows = review_class.review(course, a, cells, _grades(cells, students), lines.append)
    copies = {(r[0], r[4]): r for r in rows if r[3] == "near-copy"}
    assert ("xmod", "reference") in copies, copies
    assert "found in xmod's comm.py with sharding.py" in copies[("xmod", "reference")][6]
    assert float(copies[("xmod", "reference")][5]) >= 0.9
    assert not [k for k in copies if {"ann", "stubs"} & set(k)], copies
    assert any(ln.startswith("REVIEW  xmod/") and "comm.py is a near copy of the reference" in ln for ln in lines)
    assert not any(ln.startswith(("REVIEW  ann/", "REVIEW  stubs/")) for ln in lines), lines


def test_a_flag_quoting_terminal_escapes_shows_them_and_hides_nothing(tmp_path):
    """A name the scan quotes (a dead `setattr(torch, "<escapes>", 0)`) would wipe the REVIEW
    line in the instructor's terminal and hide what follows: review.csv, the comment and the
    line show each control character as an escape."""
    escapes = "_\r\x1b[2K\x1b[1A\x1b]0;graded\x07\x1b[8m"
    mallory = (ROOT / "solutions" / "comm.py").read_text() + (
        f"\n\ndef _never():\n    import torch\n    setattr(torch, {escapes!r}, 0)\n")
    students = {"ref": None, "mallory": {"comm": mallory}}
    course, a = make_course(tmp_path, students, "03_tp_communication")
    cells = grade_code.graded_cells(course, a)
    lines = []
    rows = review_class.review(course, a, cells, _grades(cells, students), lines.append)
    assert any(r[0] == "mallory" and r[3] == "flag" for r in rows), rows
    said = (course / review_class.NAME).read_text() + "".join(lines)
    assert "\\x1b[2K" in said or "\\x1b" in said, said
    assert not any(c in said for c in "\x1b\x07\r"), repr(said)
