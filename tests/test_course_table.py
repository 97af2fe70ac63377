"""The course table is the one place the course's facts live: adding an exercise is one row
plus its files, and every tool (CLI, checker, reports, nbgrader source builder) follows."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtp_course import course

ROOT = Path(__file__).resolve().parents[1]

STUB = '''"""Exercise E7: a toy pipeline stage.

Notebook: notebooks/09_pipeline.ipynb. Check: `rtp-course check pipeline`.
Tasks:

    E7.1  section 1: `double`
"""


def double(x, group=None):
    """2 * x."""
    raise NotImplementedError("[E7.1] double: return 2 * x")
'''
SOLUTION = '''def double(x, group=None):
    return 2 * x
'''
CHECKS = '''import torch

from rtp_course.checker.registry import Check


class Double(Check):
    exercise, name = "pipeline", "double"

    def run(self, ctx):
        with ctx.phase("forward"):
            ctx.record("forward/output", ctx.impl.pipeline.double(torch.ones(3, dtype=ctx.dtype) * ctx.rank))

    def expected(self, world_size):
        return {r: {"forward/output": torch.ones(3, dtype=torch.float64) * 2 * r} for r in range(world_size)}
'''
ROW = '''COURSE = COURSE + (
    Exercise("E7", "pipeline", "a toy pipeline stage", "09_pipeline", 5, (Task("E7.1", ("double",), 1),)),
)
'''


def test_exercise_list_is_defined_once():
    """No other file of the course spells out the list of exercise modules."""
    spelled = re.compile(r"""["']data_parallel["'],\s*["']comm["'],\s*["']tensor_parallel["']""")
    hits = [p.relative_to(ROOT) for p in ROOT.rglob("*.py")
            if ".venv" not in p.parts and "tests" not in p.parts and spelled.search(p.read_text())]
    assert hits == [], f"the exercise list is written out in {hits}: derive it from rtp_course.course"
    assert course.EXERCISES == tuple(e.module for e in course.COURSE)


def test_tasks_have_unique_ids_and_sections():
    for ex in course.COURSE:
        ids = [t.id for t in ex.tasks]
        assert len(ids) == len(set(ids)) and all(i.startswith(ex.id + ".") for i in ids), ids
        sections = [t.section for t in ex.tasks]
        assert sections == sorted(set(sections)), f"{ex.module}: tasks out of section order"


@pytest.fixture(scope="session")  # one build per test process (conftest: SHARED_FIXTURES)
def seventh(tmp_path_factory):
    """A copy of the course with a seventh exercise: one row in the table plus its files."""
    root = tmp_path_factory.mktemp("course7")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("rtp_course", "solutions", "scripts", "notebooks"):
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    table = root / "rtp_course" / "course" / "__init__.py"
    text = table.read_text()
    anchor = "\n# Notebooks graded by questions"
    assert anchor in text
    table.write_text(text.replace(anchor, "\n" + ROW + anchor, 1))                     # the row
    (root / "rtp_course" / "pipeline.py").write_text(STUB)                             # its files
    (root / "solutions" / "pipeline.py").write_text(SOLUTION)
    (root / "rtp_course" / "checker" / "public" / "pipeline.py").write_text(CHECKS)
    shutil.copy2(ROOT / "notebooks" / "03_tp_communication.ipynb", root / "notebooks" / "09_pipeline.ipynb")
    return root


def _run(root, *args, cwd=None):
    env = {**__import__("os").environ, "PYTHONPATH": str(root), "RTP_COURSE_GRADING_DIR": str(root / "grading")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=cwd or root, timeout=300)


@pytest.mark.extended    # the scaffold's copy (test_scaffold.py) holds the row's CLI and stub
def test_a_seventh_exercise_is_one_row_plus_its_files(seventh):
    r = _run(seventh, "-m", "rtp_course.cli", "check", "--help")
    assert "pipeline" in r.stdout, r.stdout + r.stderr
    r = _run(seventh, "-m", "rtp_course.cli", "check", "pipeline", "--impl",
             str(seventh / "solutions"), "--world-size", "1", "2")
    assert r.returncode == 0 and "PASS  [E7.1] pipeline.double" in r.stdout, r.stdout + r.stderr
    r = _run(seventh, "-m", "rtp_course.cli", "check", "pipeline", "--impl",
             str(seventh / "rtp_course"), "--world-size", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not implemented yet (task E7.1, notebook 09 section 1)" in r.stdout, r.stdout
    r = _run(seventh, str(seventh / "scripts" / "make_nbgrader_source.py"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (seventh / "grading" / "source" / "09_pipeline" / "rtp_course" / "pipeline.py").exists()


def test_every_check_names_its_task():
    """A report tags each check with its task ([E2.1]) and says where it is taught (read:)."""
    from rtp_course.checker.registry import check_modules, load_checks
    for hidden in (False, True):
        untagged = [c.id for c in load_checks(check_modules(list(course.EXERCISES), hidden))
                    if not c.task_id]
        assert untagged == [], untagged


def test_check_names_are_unique():
    """A check's id names its result files and its report line: a hidden check named like a
    public one would overwrite it (load_checks refuses the pair)."""
    from rtp_course.checker.registry import check_modules, load_checks
    checks = load_checks(check_modules(list(course.EXERCISES), True))
    ids = [c.id for c in checks]
    assert len(ids) == len(set(ids))
