"""Done-when of grades an instructor can sign: a class of 15 hand-ins of assignment 05
(grade("rotation"), 10 points for code; 16 checks of equal weight run at world sizes 2 and 3,
as `--world-size 2 3` grades, every bug below showing there) graded by the documented
commands (docs/INSTRUCTORS.md) beside three busy processes per core, every student's exported
grade written here as a number.

* the reference, a notebook cell that raises, a disguised copy: 10;
* the stubs: 0;
* realistic bugs of tests/wrong/rotation: what their failing checks leave;
* ring_reduce_scatter looping for ever, or waiting on a recv that never comes, the rest of
  E4 correct: the four checks that call it fail, nothing else: 12/16 of 10 = 7.5;
* ring_all_gather leaving its last rotation's handle unwaited: the checks that call it;
* the reference handed in 1.75 h late, under each of nbgrader's penalty methods: "zero" (0),
  "none" (10), and a course's own plugin that takes half (5);
* the reference graded while the watchdog finds ring_all_gather's check starved
  (RTP_COURSE_TEST_BUSY, a test-only switch of the grader's): 10 over the 15 checks graded,
  provisional, which `export` refuses unless told, then marks.

No student's page shows the grader's internals (its uid, Landlock, seccomp, a port, a path of
the grading machine). The time of autograde and grade is printed (`pytest -s`).
"""
import csv
import os
import re
import sys
import time
from pathlib import Path

import pytest

import wrongs
from wrongs import SPINS, WAITS, reduce_scatter_starting_with
from grading_course import (alembic_on_path, busy, hand_in, leftovers, run_cli, stop,
                            working_disguise)

pytestmark = [pytest.mark.stress, pytest.mark.timeout(3600)]
ROOT = Path(__file__).resolve().parents[1]
A = "05_ring_rotation"
WORLD_SIZES = ("2", "3")
DUE, ON_TIME, LATE = "2026-12-01 17:00:00 UTC", "2026-12-01T12:00:00+00:00", "2026-12-01T18:45:00+00:00"
FORCED_BUSY = "rotation.ring_all_gather"

REFERENCE = (ROOT / "solutions" / "rotation.py").read_text()


def _bug(name: str) -> str:
    return wrongs.build(ROOT / "tests" / "wrong" / "rotation" / f"{name}.py")


# {student: (rotation.py or None for the stubs, exported points, notebook cell or None)}
CLASS = {
    "ref": (REFERENCE, 10.0, None),
    "stubs": (None, 0.0, None),
    "nb_error": (REFERENCE, 10.0, "raise RuntimeError('a cell of mine fails')"),
    "copycat": ("disguised", 10.0, None),
    # the four checks that call ring_reduce_scatter (its three and subgroup's) fail: 12/16
    "rs_spins": (reduce_scatter_starting_with(SPINS), 7.5, None),
    "rs_waits": (reduce_scatter_starting_with(WAITS), 7.5, None),
    "bug_reduce_scatter_own_chunk_first": (_bug("reduce_scatter_own_chunk_first"), 7.5, None),
    # ring_all_gather's three checks: 13/16
    "ag_unwaited": (_bug("all_gather_last_rotation_unwaited"), 8.12, None),
    # at 3 ranks every check that rotates, and ring_peers, fail; bad_direction, wait_twice and
    # subgroup (two ranks a group) pass: 3/16
    "bug_swapped_directions": (_bug("swapped_directions"), 1.88, None),
    # ring_peers names a rank past the group's end: every check fails
    "bug_ring_peers_off_by_one": (_bug("ring_peers_off_by_one"), 0.0, None),
    # every rotation deadlocks; ring_peers and bad_direction pass: 2/16
    "bug_blocking_send_first": (_bug("blocking_send_first"), 1.25, None),
    # a float32 buffer for float64 data: only ring_peers, bad_direction and the float32
    # checks of ring_all_gather and ring_reduce_scatter pass: 4/16
    "bug_receive_buffer_default_dtype": (_bug("receive_buffer_default_dtype"), 2.5, None),
    # rotate writes into its input: the checks that look at the input, or pass it on, fail;
    # ring_peers, bad_direction, wait_twice, two_in_flight and ring_reduce_scatter's pass: 7/16
    "bug_mutates_input": (_bug("mutates_input"), 4.38, None),
    "late": (REFERENCE, 0.0, None),                 # under "zero"; see the penalty tests
    "busy": (REFERENCE, 10.0, None),                # provisional
}
LATE_UNDER = {"none": 10.0, "half": 5.0}


def _config(folder: Path, policy: str) -> None:
    """The late penalty where nbgrader looks for it (a Jupyter config directory)."""
    folder.mkdir(exist_ok=True)
    (folder / "latehalf.py").write_text(
        "from nbgrader.plugins import LateSubmissionPlugin\n\n\n"
        "class Half(LateSubmissionPlugin):\n"
        "    def late_submission_penalty(self, student_id, score, total_seconds_late):\n"
        "        return score / 2\n")
    line = ('c.AssignLatePenalties.plugin_class = "latehalf.Half"' if policy == "half"
            else f'c.LateSubmissionPlugin.penalty_method = "{policy}"')
    (folder / "nbgrader_config.py").write_text(f"c = get_config()\n{line}\n")


def _exported(course: Path, env: dict, *flags) -> tuple:
    r = run_cli([sys.executable, "-m", "rtp_course.cli", "export", *flags], course, check=False,
                env=env)
    rows = {}
    if r.returncode == 0:
        with open(course / "grades.csv") as fh:
            rows = {row["student_id"]: row for row in csv.DictReader(fh) if row["assignment"] == A}
    return r, rows


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    course, subs, config = tmp / "grading", tmp / "submissions", tmp / "jupyter"
    _config(config, "zero")
    env = {"JUPYTER_CONFIG_DIR": str(config),
           "PYTHONPATH": os.pathsep.join(p for p in (str(config), os.environ.get("PYTHONPATH")) if p)}
    py, cli = sys.executable, [sys.executable, "-m", "rtp_course.cli"]
    run_cli([py, "scripts/make_nbgrader_source.py", A], course, env=env)
    with alembic_on_path():
        run_cli([py, "-m", "nbgrader", "generate_assignment", A], course, env=env)
        run_cli([py, "-m", "nbgrader", "db", "assignment", "add", A, "--duedate", DUE], course, env=env)
    stub = (ROOT / "rtp_course" / "rotation.py").read_text()
    hand_in(subs, course, A, "rotation",
            {s: (working_disguise(REFERENCE, stub) if rotation == "disguised" else rotation, cell)
             for s, (rotation, _, cell) in CLASS.items()})
    times = tmp / "times.csv"
    times.write_text("".join(f"{s},{LATE if s == 'late' else ON_TIME}\n" for s in CLASS))
    run_cli([py, "scripts/collect_submissions.py", str(subs), "--times", str(times)], course, env=env)
    run_cli([*cli, "seal"], course, env=env)
    others = [s for s in CLASS if s != "busy"]
    steps = {"autograde": ([*cli, "autograde", A], {}),
             "grade": ([*cli, "grade", A, "--world-size", *WORLD_SIZES, "--student", *others], {}),
             "grade busy": ([*cli, "grade", A, "--world-size", *WORLD_SIZES, "--student", "busy"],
                            {"RTP_COURSE_TEST_BUSY": FORCED_BUSY})}
    out, seconds = {}, {}
    spinning = busy(3 * len(os.sched_getaffinity(0)))
    try:
        for name, (cmd, extra) in steps.items():
            start = time.perf_counter()
            out[name] = run_cli(cmd, course, check=False, env={**env, **extra})
            seconds[name] = time.perf_counter() - start
    finally:
        stop(spinning)
    print(f"\nclass of {len(CLASS)} (assignment {A}), {len(spinning)} busy processes beside it, "
          f"world sizes {' '.join(WORLD_SIZES)}: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    exports = {"plain": _exported(course, env), "provisional": _exported(course, env, "--provisional")}
    for policy in LATE_UNDER:        # the same class under another late policy
        _config(config, policy)
        exports[f"{policy} before regrade"] = _exported(course, env, "--provisional")
        out[f"regrade under {policy}"] = run_cli(
            [*cli, "regrade", A, "--student", "late", "--world-size", *WORLD_SIZES], course,
            check=False, env=env)
        exports[policy] = _exported(course, env, "--provisional")
    return {"course": course, "out": out, "exports": exports, "leftovers": leftovers(course),
            "env": env}


def test_every_command_succeeded_and_nothing_is_left(graded):
    for name, r in graded["out"].items():
        if name != "grade busy":        # exits 1, saying so (below)
            assert r.returncode == 0, f"{name}:\n{r.stdout[-4000:]}\n{r.stderr[-3000:]}"
    assert graded["leftovers"] == []


def test_every_exported_grade_is_what_the_code_earns(graded):
    r, rows = graded["exports"]["provisional"]
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(rows) == sorted(CLASS), "a student is missing from the export"
    got = {s: float(rows[s]["score"]) for s in CLASS}
    expected = {s: points for s, (_, points, _) in CLASS.items()}
    table = "\n".join(f"{s:36} expected {expected[s]:5.2f}  exported {got[s]:5.2f}" for s in CLASS)
    print("\n" + table)
    wrong = {s: (expected[s], got[s], _page(graded["course"], s)[:1500])
             for s in CLASS if abs(got[s] - expected[s]) > 0.005}
    assert not wrong, f"{table}\n{wrong}"


def test_a_provisional_grade_is_refused_then_marked(graded):
    said = graded["out"]["grade busy"]
    assert said.returncode == 1 and "not fully graded" in said.stderr and "busy/" + A in said.stderr, \
        said.stdout[-3000:] + said.stderr[-3000:]
    r, _ = graded["exports"]["plain"]
    assert r.returncode != 0 and "busy" in r.stdout + r.stderr and "--provisional" in r.stdout + r.stderr, \
        r.stdout + r.stderr
    _, rows = graded["exports"]["provisional"]
    marked = {s for s, row in rows.items() if row["provisional"] not in ("", "no", "False", "0")}
    assert marked == {"busy"}, {s: row["provisional"] for s, row in rows.items()}
    page = _page(graded["course"], "busy")
    assert "1 of 16 checks could not be graded" in page, page[:2000]


def test_a_late_hand_in_loses_what_each_penalty_method_takes(graded):
    for policy, points in LATE_UNDER.items():
        stale, _ = graded["exports"][f"{policy} before regrade"]
        assert stale.returncode != 0 and "late penalty" in stale.stdout + stale.stderr, \
            stale.stdout + stale.stderr
        r, rows = graded["exports"][policy]
        assert r.returncode == 0, r.stdout + r.stderr
        assert float(rows["late"]["score"]) == points, (policy, rows["late"])
        assert float(rows["ref"]["score"]) == 10.0


def test_a_hang_in_one_function_costs_only_its_own_checks(graded):
    for student in ("rs_spins", "rs_waits", "bug_blocking_send_first"):
        page = _page(graded["course"], student)
        assert "NOT RUN" not in page, page[:3000]
        assert re.search(r"PASS +\[E4\.1\] rotation\.ring_peers", page), page[:3000]
        for blamed in re.findall(r"may follow from \[E[\d.]+\] rotation\.(\w+)", page):
            assert re.search(rf"(FAIL|ERROR|HANG) +\[E[\d.]+\] rotation\.{blamed} ", page), page
    assert "never waited" in _page(graded["course"], "ag_unwaited")


def test_the_copy_is_in_the_review(graded):
    with open(graded["course"] / "review.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert any(r["student"] == "copycat" and r["kind"] == "near-copy" and r["where"] == "reference"
               for r in rows), rows[:10]


INTERNALS = [r"\buid\b", r"Landlock", r"seccomp", r"\b\d{1,3}(\.\d{1,3}){3}\b", r"\]:\d{2,5}\b",
             r"localhost:\d+", r"pair\.cc", r"/__w/", r"site-packages", r"/tmp/", r"/proc/"]


def test_no_students_page_shows_the_graders_internals(graded):
    course = graded["course"]
    run_cli([sys.executable, "-m", "nbgrader", "generate_feedback", A], course, env=graded["env"])
    pages = sorted((course / "checks").glob(f"*/{A}/*.txt"))
    pages += sorted((course / "feedback").glob(f"*/{A}/*.html"))
    assert len(pages) >= 2 * len(CLASS), pages
    machine = [str(course.parent), str(ROOT), sys.prefix, os.path.expanduser("~")]
    found = {}
    for page in pages:
        text = page.read_text(errors="replace")
        if page.suffix == ".html":      # what the student reads: the text, not the page's code
            text = re.sub(r"<(script|style)\b.*?</\1>", "", text, flags=re.S)
            text = re.sub(r"<[^>]+>", " ", text)
        hits = [p for p in INTERNALS if re.search(p, text)] + [m for m in machine if m in text]
        if hits:
            found[str(page.relative_to(course))] = hits
    assert not found, found


def _page(course: Path, student: str) -> str:
    path = course / "checks" / student / A / "rotation.txt"
    return path.read_text() if path.exists() else f"(no report: {path})"
