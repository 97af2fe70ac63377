"""Notebook 11's capstone (rtp_course/notebook/demos/threed.py): DP x TP x PP on a 2 x 2 x 2
DeviceMesh of 8 ranks with the exercise code under test, judged against serial training.
With the reference it matches; a TP layer without its backward all-reduce, or an average on
the wrong group, is caught and named; a stub is named, not a traceback."""
import re
import shutil
from pathlib import Path

import pytest

from rtp_course.notebook.demos import threed
from wrongs import impl_with

ROOT = Path(__file__).resolve().parents[1]
WRONG = ROOT / "tests" / "wrong"


def test_the_reference_trains_3d_parallel_as_serial_training(monkeypatch, capsys):
    monkeypatch.setenv("RTP_COURSE_IMPL", "solutions")
    verdict = threed.capstone()
    out = capsys.readouterr().out
    assert verdict is not None and verdict.ok, out
    assert "[demo" not in out and len(verdict.lines) == threed.WORLD, out
    # every dimension carried its own traffic, and nothing ran outside the mesh's groups
    assert set(verdict.traffic) == {"tp", "pp", "dp"}, verdict.traffic
    assert set(verdict.traffic["pp"]) <= {"send", "recv", "isend", "irecv"}, verdict.traffic
    assert set(verdict.traffic["dp"]) == {"all_reduce"}, verdict.traffic


@pytest.mark.extended     # the judging is unit-tested (tests/unit/test_capstone_compare.py)
@pytest.mark.parametrize("entry, expect", [
    ("tensor_parallel/column_no_duplicate",
     r"step 1, backward, before the DP average: rank \d \(dp \d, pp 1, tp \d\)'s gradient of "
     r"2\.\d\.\w+ \(block 2\).*ColumnParallelLinear's input gradient.*comm\.duplicate: E3"),
    ("data_parallel/average_ignores_group",
     r"step 1, after average_gradients: every replica's gradients were right before it.*"
     r"here ranks \[\d, \d\].*all_reduce on ranks \[0, 1, 2, 3, 4, 5, 6, 7\] at data_parallel\.py"),
], ids=["tp-backward-without-all-reduce", "dp-average-on-the-world"])
def test_a_wrong_tp_or_dp_part_is_caught_and_named(entry, expect, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RTP_COURSE_IMPL", str(impl_with(WRONG / f"{entry}.py", tmp_path / "impl")))
    verdict = threed.capstone()
    out = capsys.readouterr().out
    assert verdict is not None and not verdict.ok, out
    assert out.startswith("[demo failed] DP x TP x PP does not match serial training"), out
    assert re.search(expect, verdict.problem, re.S), verdict.problem
    assert "Traceback" not in out, out


@pytest.mark.extended     # a stub's skip, as the notebooks' runs with the stubs show it
def test_a_missing_exercise_is_named_with_where_it_is_taught(tmp_path, monkeypatch, capsys):
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "rtp_course" / "pipeline.py", impl / "pipeline.py")     # E9 still a stub
    monkeypatch.setenv("RTP_COURSE_IMPL", str(impl))
    assert threed.capstone() is None
    out = capsys.readouterr().out
    assert out.startswith("[demo skipped]") and "Traceback" not in out, out
    assert re.search(r"implement pipeline\.PipelineStage in rtp_course/pipeline\.py first "
                     r"\(task E9\.1, notebook 11 section 1\)", out), out
