"""scripts/new_exercise.py, in a copy of the repository: a toy exercise E0 with one task gets its
course row, stub, reference, checks, hidden checks, notebook pair and the wrong entries of the
rules every exercise holds, and the course's consistency tests pass on what it wrote; the
author's part is marked TODO(author), and a second run writes nothing.

Then the author's part, as scripts/scaffold/toy/ holds it (the scaffold's worked example): the
files written by hand, at most 8 (issue 48); with them the reference passes every check, the
stub fails as not implemented, and every wrong entry, the scaffold's and the author's, is
caught with its message."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY = ["toy", "--id", "E0", "--title", "a toy exercise", "--notebook", "11_toy", "--points", "5",
       "--task", "E0.1=total", "--no-train"]
WRITTEN = ["rtp_course/toy.py", "solutions/toy.py", "rtp_course/checker/public/toy.py",
           "tests/hidden/toy.py", "scripts/notebook_src/11_toy.py", "notebooks/11_toy.ipynb",
           *(f"tests/wrong/toy/{stem}.py" for stem in ("results_wrong", "communication_extra",
                                                       "buffer_without_device", "buffer_in_float32"))]


def copy_of_repository(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in listed:
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    return copy_of_repository(tmp_path_factory.mktemp("repo"))


def _run(copy, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(copy))
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def scaffolded(copy):
    r = _run(copy, "scripts/new_exercise.py", *TOY)
    assert r.returncode == 0, r.stdout + r.stderr
    return copy, r.stdout


def test_it_writes_the_skeleton_and_says_what_is_left(scaffolded):
    copy, said = scaffolded
    assert [p for p in WRITTEN if not (copy / p).is_file()] == []
    assert "Exercise('E0', 'toy', 'a toy exercise', '11_toy', 5" in \
        (copy / "rtp_course" / "course" / "__init__.py").read_text()
    assert "| 11_toy | `grade(\"toy\")`: E0 | 5 |" in (copy / "docs" / "INSTRUCTORS.md").read_text()
    assert "TODO(author)" in (copy / "solutions" / "toy.py").read_text()
    assert "grep -rn 'TODO(author)'" in said and "pytest tests/test_rules_stated.py -k toy" in said


def test_its_wrong_entries_are_whole_and_build_on_the_scaffolded_reference(scaffolded):
    """The entries of the rules every exercise holds wrap the first task's function: written
    whole (no TODO), they build on the reference whatever it becomes."""
    copy, _ = scaffolded
    sys.path.insert(0, str(ROOT / "tests" / "helpers"))
    import wrongs
    for rel in WRITTEN:
        if rel.startswith("tests/wrong/"):
            assert "TODO(author)" not in (copy / rel).read_text(), rel
            assert "\n_reference = total\n" in wrongs.build(copy / rel, copy / "solutions")


def test_the_stub_fails_its_check_with_the_authors_todo(scaffolded):
    copy, _ = scaffolded
    r = _run(copy, "-m", "rtp_course.cli", "check", "toy", "--world-size", "2")
    assert r.returncode != 0 and "[E0.1] toy.total" in r.stdout and "TODO(author)" in r.stdout, \
        r.stdout + r.stderr


@pytest.mark.extended     # the course's own consistency tests, run again on a copy
def test_the_course_is_consistent_with_the_new_row(scaffolded):
    copy, _ = scaffolded
    r = _run(copy, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
             "tests/unit/test_docs_quote_the_code.py", "tests/test_course_table.py",
             "tests/test_notebooks.py::test_tasks_are_marked_in_stub_and_notebook",
             "tests/test_notebooks.py::test_check_cells_offer_slurm",
             "tests/test_rules_stated.py::test_each_stub_names_its_course_wide_rules_and_states_its_own",
             timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_a_second_run_writes_nothing(scaffolded):
    copy, _ = scaffolded
    table = (copy / "rtp_course" / "course" / "__init__.py").read_text()
    r = _run(copy, "scripts/new_exercise.py", *TOY)
    assert r.returncode != 0 and "exist already, nothing written" in r.stderr, r.stderr
    assert (copy / "rtp_course" / "course" / "__init__.py").read_text() == table


EXAMPLE = ROOT / "scripts" / "scaffold" / "toy"       # the author's part of E0, file by file
BY_HAND = sorted(p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*.py"))


@pytest.fixture(scope="module")
def authored(tmp_path_factory):
    """A second copy, scaffolded, with the author's files of scripts/scaffold/toy/ written over
    it and the notebook written again from its source (jupytext: a command, not a file written
    by hand)."""
    dest = copy_of_repository(tmp_path_factory.mktemp("authored"))
    r = _run(dest, "scripts/new_exercise.py", *TOY)
    assert r.returncode == 0, r.stdout + r.stderr
    for rel in BY_HAND:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(EXAMPLE / rel, dest / rel)
    r = _run(dest, "-m", "jupytext", "--quiet", "--to", "ipynb", "-o", "notebooks/11_toy.ipynb",
             "scripts/notebook_src/11_toy.py")
    assert r.returncode == 0, r.stderr
    return dest


def test_an_exercise_takes_at_most_eight_files_by_hand():
    assert len(BY_HAND) <= 8, BY_HAND
    assert "solutions/toy.py" in BY_HAND and "rtp_course/toy.py" in BY_HAND


@pytest.mark.extended     # two checker runs and the course's tests again, on a copy
def test_with_the_authors_files_nothing_is_left_to_do(authored):
    left = subprocess.run(["grep", "-rln", "TODO(author)", "rtp_course", "solutions", "tests",
                           "notebooks", "scripts/notebook_src"], cwd=authored,
                          capture_output=True, text=True).stdout.split()
    assert [p for p in left if "toy" in p] == []


@pytest.mark.extended
def test_with_the_authors_files_the_reference_passes_and_the_stub_does_not(authored):
    r = _run(authored, "-m", "rtp_course.cli", "check", "toy", "--impl", "solutions", "--hidden")
    assert r.returncode == 0 and "toy                 2 / 2         ok" in r.stdout, r.stdout
    r = _run(authored, "-m", "rtp_course.cli", "check", "toy", "--world-size", "2")
    assert r.returncode != 0 and "not implemented yet" in r.stdout, r.stdout


@pytest.mark.extended
def test_with_the_authors_files_every_wrong_entry_is_caught(authored):
    r = _run(authored, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
             "tests/test_rules_stated.py", "tests/test_wrong_implementations.py", "-k", "toy",
             timeout=600)
    assert r.returncode == 0 and "12 passed" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]
