"""checker/judging.py, the one entry point that judges a check's outcomes (`judge`), and
the watchdog callback that judges each check as soon as every rank is past it (`judging`):
made-up outcome files and statuses, no rank."""
import torch

from rtp_course.checker import outcome_file, verdict
from rtp_course.checker.judging import judge, judging, load_outcome, load_outcomes
from rtp_course.checker.registry import Check
from rtp_course.checker.types import Outcome, RankStatus

WANT = torch.arange(6.0, dtype=torch.float64)


class Doubles(Check):
    exercise, name = "comm", "Doubles"
    hints = {"forward": "the check's own hint"}


class Halves(Check):
    exercise, name = "comm", "Halves"


class Expect:
    """Stands in for judging.Expectations: every check expects WANT on every rank."""

    def __init__(self, fail=False):
        self.fail, self.asked = fail, []

    def get(self, check, ws):
        self.asked.append(check.id)
        if self.fail:
            raise KeyError("x")
        return {r: {"forward/y": WANT} for r in range(ws)}, []


def written(y=WANT) -> dict:
    """An outcome as a rank writes it."""
    return {"status": "ok", "records": {"forward/y": y}, "values": {}, "events": []}


def ok(y=WANT) -> Outcome:
    return Outcome.parse(written(y))


def test_outcomes_as_expected_pass_and_a_wrong_one_names_its_rank_and_key():
    assert judge(Doubles(), 2, {0: ok(), 1: ok()}, expect=Expect()).status == "passed"
    result = judge(Doubles(), 2, {0: ok(), 1: ok(WANT + 1)}, expect=Expect())
    assert (result.status, result.rank, result.key) == ("failed", 1, "forward/y"), result
    assert result.hint == "the check's own hint"


def test_a_checks_own_expected_values_failing_is_the_courses_error_not_the_students():
    result = judge(Doubles(), 2, {0: ok(), 1: ok()}, expect=Expect(fail=True))
    assert result.status == "error" and "internal error in the check itself" in result.message
    assert "report it to the course staff" in result.message


def test_a_comparison_that_raises_fails_the_check_without_crashing_the_grader(monkeypatch):
    monkeypatch.setattr(verdict, "compare", lambda *a: 1 / 0)
    result = judge(Doubles(), 2, {0: ok(), 1: ok()}, expect=Expect())
    assert result.status == "error" and "could not compare what the ranks recorded" in result.message


def test_records_of_the_wrong_kind_are_none_recorded():
    """The parse boundary: a rank's `records` that is no dict is an empty record."""
    bad = Outcome.parse({"status": "ok", "records": None, "values": [], "events": "x"})
    assert (bad.records, bad.values, bad.events) == ({}, {}, [])
    result = judge(Doubles(), 2, {0: ok(), 1: bad}, expect=Expect())
    assert (result.status, result.rank) == ("failed", 1)
    assert result.message == "forward/y: nothing was recorded", result.message


def write(rundir, cid, rank, outcome):
    (rundir / f"result.{cid}.{rank}.pt").write_bytes(outcome_file.dumps(outcome))


def test_a_missing_or_empty_result_is_none_and_a_wrong_one_is_malformed(tmp_path):
    assert load_outcome(tmp_path / "missing.pt", 0) is None
    (tmp_path / "empty.pt").write_bytes(b"")
    assert load_outcome(tmp_path / "empty.pt", 0) is None
    (tmp_path / "junk.pt").write_bytes(b"junk" * 100)
    (tmp_path / "odd.pt").write_bytes(outcome_file.dumps({"status": "passed"}))  # no such status
    for name in ("junk.pt", "odd.pt"):
        o = load_outcome(tmp_path / name, 3)
        assert o.status == "error" and o.type == "MalformedResult", o
        assert o.message.startswith("rank 3's result file is not a result the checker can judge")


def test_outcomes_are_read_only_once_every_rank_wrote_its_own(tmp_path):
    write(tmp_path, "comm.Doubles", 0, written())
    assert load_outcomes(tmp_path, "comm.Doubles", 2) is None
    write(tmp_path, "comm.Doubles", 1, written())
    assert set(load_outcomes(tmp_path, "comm.Doubles", 2)) == {0, 1}


def status(index, phase="forward"):
    return RankStatus.parse({"index": index, "check": ["comm.Doubles", "comm.Halves"][index % 2],
                             "phase": phase})


def test_a_check_is_judged_once_every_ranks_status_is_past_it_and_only_once(tmp_path):
    todo, judged, expect = [Doubles(), Halves()], {}, Expect()
    on_change = judging(todo, 2, tmp_path, expect, judged)
    for r in (0, 1):
        write(tmp_path, "comm.Doubles", r, written())
    on_change({0: status(1), 1: status(0)})        # rank 1 is still in Doubles
    assert judged == {}
    on_change({0: status(1), 1: status(0, "done")})
    assert list(judged) == ["comm.Doubles"] and judged["comm.Doubles"][1].passed
    on_change({0: status(1, "done"), 1: status(1)})
    assert list(judged) == ["comm.Doubles"] and expect.asked == ["comm.Doubles"]


def test_a_status_past_a_check_whose_result_is_not_written_yet_waits_for_it(tmp_path):
    judged = {}
    on_change = judging([Doubles(), Halves()], 2, tmp_path, Expect(), judged)
    write(tmp_path, "comm.Doubles", 0, written())
    on_change({0: status(1), 1: status(1)})
    assert judged == {}                            # rank 1's result is not there yet
    write(tmp_path, "comm.Doubles", 1, written(WANT * 2))
    on_change({0: status(1), 1: status(1)})
    assert judged["comm.Doubles"][1].status == "failed"


def test_a_status_that_is_not_a_record_holds_judging_back(tmp_path):
    """A half-written status reads as None; an index that is no int (True) is no index."""
    judged = {}
    on_change = judging([Doubles(), Halves()], 2, tmp_path, Expect(), judged)
    for r in (0, 1):
        write(tmp_path, "comm.Doubles", r, written())
    for other in (None, "text", {"index": True, "phase": "done"}, {"index": "1"}):
        on_change({0: status(1), 1: RankStatus.parse(other)})
        assert judged == {}, other
