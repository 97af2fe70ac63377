"""`rtp-course grade` grades again, by itself, what the machine was too busy to finish: after the
others, up to two more times, the last one alone; what stays busy costs no point and is said;
a submission that fails to grade never stops the next. The checker is replaced by scripted
outcomes (a real busy machine cannot be ordered up); the gradebook and reports are real."""
import pytest

from rtp_course.checker.verdict import Result
from rtp_course.instructor import grade_code, grade_outcome, grade_pool
from grading_course import make_course, scores


def outcome(key, **checks):
    return grade_pool.Outcome(key, {"comm": [Result("comm", n, 2, s) for n, s in checks.items()]})


@pytest.fixture
def scripted(monkeypatch):
    """Replace the grading processes by a script: {round: {student: Outcome}}."""
    calls = []

    def install(script):
        def run(tasks, jobs, guard_s, on_done=None):
            rnd = len(calls)
            calls.append((jobs, sorted((key, tuple(args[1])) for key, _, args in tasks)))
            out = {}
            for key, _, _ in tasks:
                out[key] = script[rnd][key]
                on_done(out[key])
            return out
        monkeypatch.setattr(grade_code.grade_pool, "run", run)
        return calls
    return install


def test_busy_checks_are_regraded_after_the_others_then_alone(tmp_path, scripted):
    """Today a busy check was a failed one: alice lost 1 of 3 points with a correct module,
    and nothing graded her again."""
    course, a = make_course(tmp_path, {"alice": None, "bob": None})
    cells = grade_code.graded_cells(course, a)
    calls = scripted({
        0: {"alice": outcome("alice", x="passed", y="busy", z="passed"),
            "bob": outcome("bob", x="passed", y="passed", z="failed")},
        1: {"alice": outcome("alice", x="passed", y="busy", z="busy")},
        2: {"alice": outcome("alice", x="busy", y="busy", z="passed")}})
    lines = []
    graded = grade_code.grade_class(course, a, cells, ["alice", "bob"], jobs=2, log=lines.append)
    assert [jobs for jobs, _ in calls] == [2, 2, 1]
    assert [who for _, who in calls][1:] == [[("alice", ("comm",))]] * 2
    assert scores(course, a, ["alice", "bob"]) == {"alice": 3.0, "bob": 2.0}
    assert "alice/03_tp_communication: comm 3/3 (1 check not graded, regraded twice)" in lines
    assert "alice/03_tp_communication: comm 3/3 (1 check not graded; regrading)" in lines
    assert not graded.final("alice") and graded.final("bob")
    status = grade_outcome.read_status(course / "checks" / "alice" / a / grade_outcome.STATUS)
    assert status["comm-code"].status == "provisional"
    report = (course / "checks" / "alice" / a / "comm.txt").read_text()
    assert report.startswith("comm: 3 of 3 points for your code\n(1 of 3 checks could not be graded")


def test_a_failed_submission_is_graded_again_and_never_stops_the_next(tmp_path, scripted):
    """Today an exception while grading one student ended the command for the whole class."""
    course, a = make_course(tmp_path, {"alice": None, "bob": None, "carol": None})
    cells = grade_code.graded_cells(course, a)
    stopped = grade_pool.Outcome("bob", error="its grading took longer than 180 s (stopped)")
    scripted({0: {"alice": outcome("alice", x="passed"), "bob": stopped,
                  "carol": grade_pool.Outcome("carol", error="RuntimeError: boom\n  traceback")},
              1: {"bob": outcome("bob", x="passed"), "carol": grade_pool.Outcome("carol", error="RuntimeError: boom")},
              2: {"carol": grade_pool.Outcome("carol", error="RuntimeError: boom")}})
    lines = []
    graded = grade_code.grade_class(course, a, cells, ["alice", "bob", "carol"], jobs=2,
                                    log=lines.append)
    assert graded.final("alice") and graded.final("bob") and not graded.final("carol")
    got = scores(course, a, ["alice", "bob", "carol"])
    assert got["alice"] == got["bob"] == 3.0 and got["carol"] is None   # left as autograde set it
    assert "carol/03_tp_communication: comm not graded (RuntimeError: boom, regraded twice)" in lines


def test_a_module_not_handed_in_scores_nothing_without_running(tmp_path, scripted):
    course, a = make_course(tmp_path, {"dave": {"comm": None}})
    calls = scripted({})
    lines = []
    grade_code.grade_class(course, a, grade_code.graded_cells(course, a), ["dave"], log=lines.append)
    assert calls == [] and scores(course, a, ["dave"]) == {"dave": 0.0}
    assert "not handed in" in (course / "checks" / "dave" / a / "comm.txt").read_text()


def test_grade_accepts_timeout_scale_and_scales_the_guard(tmp_path, monkeypatch):
    """`rtp-course grade --timeout-scale 2` was refused ("unrecognized arguments")."""
    from rtp_course.cli import build_parser
    args = build_parser(["grade"]).parse_args(["grade", "a1", "--timeout-scale", "2.5"])
    assert args.timeout_scale == 2.5
    seen = {}
    monkeypatch.setattr(grade_code.grade_pool, "run",
                        lambda tasks, jobs, guard_s, on_done=None: seen.update(
                            guard=guard_s, scale=tasks[0][2][3]) or {})
    course, a = make_course(tmp_path, {"alice": None})
    grade_code.grade_class(course, a, grade_code.graded_cells(course, a), ["alice"],
                           timeout_scale=2.5, log=lambda *_: None)
    assert seen == {"guard": grade_code.GUARD_S * 2.5, "scale": 2.5}
