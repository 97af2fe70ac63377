"""docs/INSTRUCTORS.md quotes the code: its figures and defaults, its assignments and points, the
commands it names. README, INSTRUCTORS.md, DESIGN.md and the code gave four different `--jobs`
defaults and grading times; the code is the truth and this test holds the docs to it."""
import re
from pathlib import Path

import pytest

from rtp_course import course
from rtp_course.checker import budgets
from rtp_course.cli import build_parser
from rtp_course.instructor import autograde, grade_code, grade_outcome, grade_pool, points
from rtp_course.instructor.review import similarity

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "INSTRUCTORS.md").read_text()


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after `heading`."""
    part = DOC.split(heading, 1)[1]
    rows = [ln for ln in part.splitlines() if ln.startswith("|")]
    block = []
    for ln in part.splitlines()[1:]:
        if ln.startswith("|"):
            block.append([c.strip() for c in ln.strip("|").split("|")])
        elif block:
            break
    assert rows, heading
    return block[2:]                       # less the header and the rule


def _figures() -> dict:
    return {row[0]: row[1] for row in _table("## Figures and defaults")}


def _parser_default(command: str, option: str):
    sub = build_parser([command])._subparsers._group_actions[0].choices[command]
    return next(a.default for a in sub._actions if option in a.option_strings)


def test_the_assignments_and_points_are_the_course_tables():
    rows = {r[0]: r[2] for r in _table("## 3. The assignments and their points")}
    want = {e.notebook: str(e.points) for e in course.COURSE} | {k: str(v) for k, v in course.QUIZZES.items()}
    assert {k: v for k, v in rows.items() if k != "total"} == want
    assert rows["total"] == str(points.total()) == _figures()["course total"].split()[0]
    assert f"{len(course.GRADED_NOTEBOOKS)} assignments, {points.total()} points in all" in " ".join(DOC.split())


def test_the_figures_are_the_codes(monkeypatch):
    f = _figures()
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    assert f["`grade --jobs` default"] == "one submission per two cores" and grade_pool.default_jobs() == 4
    assert f["`autograde --jobs` default"] == "one student per core" and autograde.default_jobs() == 8
    assert f["wall-clock guard per submission and round"] == f"{grade_code.GUARD_S:g} s"
    assert f["regrades of checks not graded"] == str(grade_outcome.ROUNDS - 1)
    assert f["CPU budget of one submission's run"] == f"{budgets.RUN_CPU:g} CPU-s"
    assert f["near-copy threshold"] == f"{similarity.NEAR_COPY:g}"
    timeout = re.search(r"^c\.Execute\.timeout = (\d+)$", (ROOT / "nbgrader_config.py").read_text(), re.M)
    assert f["notebook cell timeout"] == f"{timeout[1]} s"
    import inspect
    from rtp_course.instructor import grade_slurm
    assert inspect.signature(grade_slurm.submit).parameters["cpus"].default is None
    assert "cpus = cpus or max(world_sizes or (4,))" in inspect.getsource(grade_slurm.submit)
    assert f["`grade --slurm` task"] == ("4 CPUs (one per rank of the largest world size graded), "
                                         f"{_parser_default('grade', '--time')}")
    sbatch = (ROOT / "rtp_course" / "instructor" / "autograde.sbatch").read_text()
    a_cpus = re.search(r"^#SBATCH --cpus-per-task=(\d+)$", sbatch, re.M)[1]
    a_time = _parser_default("autograde", "--time")
    assert f"#SBATCH --time={a_time}" in sbatch
    assert f["`autograde --slurm` task"] == f"{a_cpus} CPUs, {a_time}"
    import importlib.util
    spec = importlib.util.spec_from_file_location("c", ROOT / "scripts" / "collect_submissions.py")
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    assert f["collected module / notebook, at most"] == \
        f"{collect.MODULE_BYTES >> 20} MB / {collect.NOTEBOOK_BYTES >> 20} MB"


@pytest.mark.parametrize("said, value", [
    (r"wall-clock guard of\s+(\d+) s per round", lambda: f"{grade_code.GUARD_S:g}"),
    (r"bounded apart, at\s+(\d+) s", lambda: f"{grade_pool.START_S:g}"),
    (r"a run to (\d+) CPU-seconds", lambda: f"{budgets.RUN_CPU:g}"),
    (r"up to (\d+) more times", lambda: str(grade_outcome.ROUNDS - 1)),
    (r"--jobs N: N at once \(default: (one per two cores)\)", lambda: "one per two cores"),
    (r"--jobs N: N students at once \(default: (one per core)\)", lambda: "one per core"),
    (r"`--time`\s+\(default (\S+) per task\)", lambda: _parser_default("autograde", "--time")),
    (r"4 CPUs and (\d+)\s+minutes by default", lambda: str(int(_parser_default("grade", "--time").split(":")[1]))),
])
def test_the_text_quotes_the_same_figures(said, value):
    found = re.findall(said, DOC)
    assert found and set(found) == {value()}, (said, found)


def test_every_command_it_names_exists():
    commands = set(re.findall(r"rtp-course (\w[\w-]*)", DOC))
    sub = build_parser(["grade"])._subparsers._group_actions[0].choices
    assert commands <= set(sub), commands - set(sub)
    for script in set(re.findall(r"scripts/(\w+\.py)", DOC)):
        assert (ROOT / "scripts" / script).is_file(), script


def test_the_readme_does_not_contradict_it():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Instructors", 1)[1].split("\n## ", 1)[0]
    for claim in re.findall(r"--jobs[^\n]*\(default: ([^)]*)\)", section):
        assert claim in ("one per two cores", "one per core"), claim
    assert "docs/INSTRUCTORS.md" in section
    assert not re.search(r"\d+(\.\d+)?x faster|about \d+ s\b", section), "timings belong in docs/PERFORMANCE.md"


def test_the_release_is_a_plain_folder_as_release_says():
    """The docs called the student edition "a git repository of its own"; release makes a
    plain folder and says to `git init` it."""
    release = (ROOT / "rtp_course" / "instructor" / "release.py").read_text()
    assert "git init" in release and "git init" in DOC
    assert "repository of its own" not in DOC.replace("as a repository of its own", "")


def test_design_quotes_the_checkers_constants():
    """DESIGN.md's numbers are the code's: the pause of a poll that says no, and the share of
    a CPU under which a waiting rank is starved."""
    from rtp_course.checker import watchdog
    from rtp_course.runtime.commlog import works
    design = " ".join((ROOT / "DESIGN.md").read_text().split())
    assert f"yields the CPU for {works.POLL_PAUSE * 1000:g} ms" in design
    assert watchdog.STARVED == 0.5 and "own threads use under half a CPU" in design
