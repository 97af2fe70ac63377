"""`rtp-course release OUT`: the student edition builds, holds nothing of the instructor's, and works.

The edition is built from this repository; while the course notebooks are not
in nbgrader form yet, the notebook checks run on a copy of the repository with
two small fixture notebooks (test_nbgrader_cycle.py grades those same fixtures).
"""
import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from rtp_course.instructor.release import MARKERS, ReleaseError, build

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted(p for p in (ROOT / "solutions").glob("*.py") if p.name != "__init__.py")
FIXTURE_SOLUTION = "lr = 0.1 * world_size  # the linear scaling rule"


# ------------------------------------------------------------------ fixture notebooks

def _cell(kind, source, **nbgrader):
    cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = dict(nbgrader, schema_version=3)
    return cell


def fixture_notebook(exercise: str, points: int, hidden_call: str) -> nbformat.NotebookNode:
    """A course notebook in nbgrader source form: an answer cell, its test, the exercise's grade cell."""
    nb = nbformat.v4.new_notebook(cells=[
        _cell("md", f"# Fixture: grading `{exercise}`\n\nImplement `rtp_course/{exercise}.py`."),
        _cell("code", "from rtp_course.checker import check\nworld_size = 4"),
        _cell("code", f"### BEGIN SOLUTION\n{FIXTURE_SOLUTION}\n### END SOLUTION",
              grade=False, solution=True, locked=False, grade_id=f"{exercise}_answer"),
        _cell("code", "assert abs(lr - 0.4) < 1e-12, 'scale the learning rate with the world size'",
              grade=True, solution=False, locked=True, points=1, grade_id=f"{exercise}_answer_test"),
        _cell("code", f"# The checks of {exercise} on your rtp_course/{exercise}.py\n"
                      f"### BEGIN HIDDEN TESTS\nfrom rtp_course.instructor.grading import grade\n{hidden_call}\n"
                      f"### END HIDDEN TESTS",
              grade=True, solution=False, locked=True, points=points, grade_id=f"grade_{exercise}"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


FIXTURES = {"02_data_parallel": "data_parallel", "03_tp_communication": "comm"}


def write_fixture_notebooks(folder: Path, world_sizes=None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, ex in FIXTURES.items():
        ws = f", world_sizes={tuple(world_sizes)}" if world_sizes else ""
        path = folder / f"{stem}.ipynb"
        nbformat.write(fixture_notebook(ex, 10, f'grade("{ex}", points=10{ws})'), path)
        paths.append(path)
    return paths


def instructor_copy(dst: Path) -> Path:
    """This repository (no caches, no git, no virtualenv), its notebooks replaced by the fixtures."""
    skip = shutil.ignore_patterns(".git", ".venv", "grading", "release", "__pycache__", "*.egg-info",
                                  ".pytest_cache", ".ipynb_checkpoints")
    shutil.copytree(ROOT, dst, ignore=skip)
    shutil.rmtree(dst / "notebooks", ignore_errors=True)
    write_fixture_notebooks(dst / "notebooks")
    return dst


def _env(out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(out), OMP_NUM_THREADS="1")
    env.pop("RTP_COURSE_HIDDEN_CHECKS", None)
    env.pop("RTP_COURSE_IMPL", None)
    return env


@pytest.fixture(scope="session")  # one build per test process (conftest: SHARED_FIXTURES)
def edition(tmp_path_factory):
    """The real release of this repository, built with the CLI."""
    out = tmp_path_factory.mktemp("release") / "student-edition"
    grading = tmp_path_factory.mktemp("grading")
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", "release", str(out)],
                       capture_output=True, text=True, cwd=tmp_path_factory.getbasetemp(),
                       env=dict(os.environ, RTP_COURSE_GRADING_DIR=str(grading)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (grading / "grader-manifest.json").is_file() and "Grader manifest written" in r.stdout
    return out


@pytest.fixture(scope="session")  # one build per test process (conftest: SHARED_FIXTURES)
def fixture_edition(tmp_path_factory):
    root = instructor_copy(tmp_path_factory.mktemp("instructor") / "repo")
    return root, build(tmp_path_factory.mktemp("release") / "edition", root=root, log=lambda *a: None)


def _files(out: Path):
    return sorted(p for p in out.rglob("*") if p.is_file())


# ------------------------------------------------------------------ nothing leaks

def test_the_license_pyproject_names_ships(edition):
    """pyproject.toml names Apache-2.0: the edition carries the license's text."""
    assert "Apache-2.0" in (edition / "pyproject.toml").read_text()
    assert "Apache License" in (edition / "LICENSE").read_text()


def test_no_instructor_files(edition):
    rels = [p.relative_to(edition).as_posix() for p in _files(edition)]
    assert not (edition / "solutions").exists() and not any("solutions" in r.split("/") for r in rels)
    for gone in ("tests/hidden", "tests/wrong", "scripts", "DESIGN.md", "docs/INSTRUCTORS.md",
                 "nbgrader_config.py", "grading"):
        assert not (edition / gone).exists(), gone
    assert not any(r.endswith((".pyc", ".db")) or "__pycache__" in r for r in rels)
    readme = (edition / "README.md").read_text()
    assert "student edition" in readme and "INSTRUCTORS" not in readme


def _function_bodies(text: str) -> dict:
    """{AST dump of a function body of 2+ statements (docstring dropped): function name}."""
    out = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            if len(body) >= 2:
                out.setdefault(ast.dump(ast.Module(body=body, type_ignores=[])), node.name)
    return out


def _distinctive_lines(path: Path) -> set:
    """Code lines of a solution module long enough to be its own: not docstrings, not imports,
    not the interface its stub gives students (class headers, given one-liners)."""
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    doc = {i for n in ast.walk(ast.parse(path.read_text()))
           if isinstance(n, scopes) and ast.get_docstring(n, clean=False)
           for i in range(n.body[0].lineno, n.body[0].end_lineno + 1)}
    stub = ROOT / "rtp_course" / path.name
    given = {line.strip() for line in stub.read_text().splitlines()} if stub.exists() else set()
    return {s for i, line in enumerate(path.read_text().splitlines(), 1)
            if i not in doc and len(s := line.strip()) >= 30 and s not in given
            and not s.startswith(("#", "def ", "class ", "from ", "import "))}


@functools.lru_cache(maxsize=None)
def _shipped_texts(edition: Path) -> tuple:
    """((path, text, its function bodies), ...) of the edition's text files, read and parsed
    once for every solution's test."""
    return tuple((path, text, set(_function_bodies(text)) if path.suffix == ".py" else set())
                 for path in _files(edition)
                 if path.suffix in (".py", ".ipynb", ".md", ".txt", ".sbatch", ".toml", ".yml")
                 for text in (path.read_text(),))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_no_solution_code_ships(edition, solution):
    sol_text = solution.read_text()
    bodies = _function_bodies(sol_text)
    lines = _distinctive_lines(solution)
    for path, text, shipped_bodies in _shipped_texts(edition):
        assert text != sol_text, f"{path} is solutions/{solution.name}"
        if path.suffix == ".py":
            same = set(bodies) & shipped_bodies
            assert not same, f"{path} holds {sorted(bodies[k] for k in same)} of solutions/{solution.name}"
        hits = {s for s in lines if s in text}
        assert len(hits) < max(4, 0.2 * len(lines)), f"{path}: lines of solutions/{solution.name}: {hits}"
    stub = edition / "rtp_course" / solution.name
    assert "NotImplementedError" in stub.read_text(), f"{stub} is not a stub"


def test_no_markers_or_grade_cells(edition, fixture_edition):
    for out in (edition, fixture_edition[1]):
        for path in _files(out):
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for m in MARKERS:
                assert m not in text, f"{path}: {m}"
        for path in (out / "notebooks").glob("*.ipynb"):  # hidden test code is gone from every cell
            for cell in nbformat.read(path, as_version=4).cells:
                assert "grade(" not in cell.source and "rtp_course.instructor.grading" not in cell.source, path


def test_notebooks_are_nbgrader_student_versions(fixture_edition):
    _, out = fixture_edition
    nbs = sorted((out / "notebooks").glob("*.ipynb"))
    assert [p.stem for p in nbs] == sorted(FIXTURES)
    for path in nbs:
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert FIXTURE_SOLUTION not in text and "grade(" not in text and "rtp_course.instructor.grading" not in text
        answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
        assert "raise NotImplementedError()" in answer.source
        graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert len(graded) == 2 and all(c.metadata["nbgrader"]["locked"] for c in graded)
        assert all("checksum" in c.metadata["nbgrader"] for c in graded)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_release_refuses_to_ship_a_solution(tmp_path):
    root = instructor_copy(tmp_path / "repo")
    shutil.copy2(root / "solutions" / "comm.py", root / "rtp_course" / "comm.py")  # an instructor slip
    with pytest.raises(ReleaseError, match=r"rtp_course/comm.py: holds a function body of solutions/comm.py"):
        build(tmp_path / "out", root=root, log=lambda *a: None)
    assert not (tmp_path / "out").exists()


def test_release_refuses_to_build_without_a_shipped_file(tmp_path):
    """Without LICENSE the edition went out without one, silently (pyproject names Apache-2.0)."""
    root = instructor_copy(tmp_path / "repo")
    (root / "LICENSE").unlink()
    with pytest.raises(ReleaseError, match=r"has no LICENSE: the student edition ships them"):
        build(tmp_path / "out", root=root, log=lambda *a: None)
    assert not (tmp_path / "out").exists()


def test_release_will_not_overwrite(edition):
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", "release", str(edition)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--force" in r.stderr


# ------------------------------------------------------------------ it works

def test_pyproject_packages_rtp_course_only(edition):
    from setuptools import find_packages
    find = tomllib.loads((edition / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(where=str(edition), include=find["include"])
    assert "rtp_course" in packages and all(p.startswith("rtp_course") for p in packages)


def test_students_install_no_instructor_tools(edition):
    """nbgrader installed in a student's environment shows its instructor menus ("Create
    Assignment", formgrader) in JupyterLab: the edition's dev extra leaves it out."""
    dev = re.search(r"^dev = \[(.*)\]", (edition / "pyproject.toml").read_text(), re.M).group(1)
    assert "nbgrader" not in dev and "jupyterlab" in dev


def test_checker_reports_not_implemented(edition):
    """The README's check command, on the edition's own stubs."""
    env = _env(edition)
    where = subprocess.run([sys.executable, "-c", "import rtp_course; print(rtp_course.__file__)"],
                           capture_output=True, text=True, env=env, cwd=edition)
    assert Path(where.stdout.strip()).is_relative_to(edition)
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--world-size", "2",
                        "--impl", str(edition / "rtp_course")],
                       capture_output=True, text=True, env=env, cwd=edition, timeout=300)
    assert r.returncode != 0 and "not implemented yet" in r.stdout, r.stdout + r.stderr


def test_edition_has_no_grading_code_and_finds_no_hidden_checks(edition):
    assert not (edition / "rtp_course" / "instructor").exists()
    code = ("from rtp_course.course import EXERCISES, edition\n"
            "from rtp_course.checker.registry import check_modules, hidden_dir\n"
            "assert edition() == 'student', edition()\n"
            "assert hidden_dir() is None, hidden_dir()\n"
            "assert all(m.startswith('rtp_course.checker.public.') for m in check_modules(EXERCISES, False))\n"
            "try:\n    check_modules(['comm'], True)\nexcept FileNotFoundError:\n    pass\n"
            "else:\n    raise SystemExit('hidden checks found')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=_env(edition), cwd=edition / "notebooks", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", "release", str(edition / "x")],
                       capture_output=True, text=True, env=_env(edition), cwd=edition, timeout=300)
    assert r.returncode == 2 and "student edition" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_readme_commands_work(edition):
    readme = (edition / "README.md").read_text()
    for cmd in ('pip install -e ".[dev]"', "jupyter lab", "rtp-course check comm",
                "rtp-course submit check comm", "python -m pytest -q", "conda env create",
                "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"):
        assert cmd in readme, cmd
    assert "pip install torch " not in readme and "pip install torch\n" not in readme, readme
    env = _env(edition)
    for args in (["submit", "check", "--help"], ["info"]):
        r = subprocess.run([sys.executable, "-m", "rtp_course.cli", *args], capture_output=True,
                           text=True, env=env, cwd=edition)
        assert r.returncode == 0, r.stdout + r.stderr
    shipped = sorted(p.name for p in (edition / "tests").rglob("test_*.py"))
    assert shipped and "test_release.py" not in shipped
    for p in (edition / "tests").rglob("*.py"):
        text = p.read_text()
        assert "solutions" not in text and "tests/wrong" not in text, p
    # The README's test command in the edition: every test collects; the launcher's and the
    # devices' (the runtime's, a copy of what this suite runs in tests/given) are left out; in
    # one process (-n 0: xdist's workers would each import torch again, for tests of seconds)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--co", "-n", "0",
                        "-p", "no:cacheprovider"],
                       capture_output=True, text=True, env=env, cwd=edition, timeout=600)
    assert r.returncode == 0 and "test_launcher.py" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


@pytest.mark.extended     # the same tests run in this suite (tests/given); here, as shipped
def test_the_editions_own_tests_pass(edition):
    env = _env(edition)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider",
                        "--ignore", "tests/given/test_launcher.py",
                        "--ignore", "tests/given/test_devices.py"],
                       capture_output=True, text=True, env=env, cwd=edition, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
