"""A small grading directory for the grading tests: source notebooks with grading cells, a
gradebook that knows the students (as `nbgrader autograde` would have left it), submissions
made from the reference with edits."""
import ast
import builtins
import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def grading_cell(exercise: str, grade_id: str, points: float):
    import nbformat
    return nbformat.v4.new_code_cell(f'grade("{exercise}")', metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": grade_id, "points": points}})


def make_course(tmp_path: Path, students: dict, assignment: str = "03_tp_communication",
                cells=(("comm", "comm-code", 3),), answer_cell: bool = False) -> tuple[Path, str]:
    """A grading directory with one assignment whose notebook has `cells` ((exercise, grade_id,
    points)), one submission per student ({name: {module: source}} over the reference, or
    None for the reference as it is) and a gradebook that knows them. `answer_cell`: also a
    solution cell "answer" (nbgrader makes a Comment for those)."""
    import nbformat
    from nbgrader.api import Gradebook
    course = tmp_path / "course"
    nb = nbformat.v4.new_notebook()
    nb.cells = [grading_cell(*c) for c in cells]
    if answer_cell:
        nb.cells.insert(0, nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {
            "grade": False, "solution": True, "locked": False, "grade_id": "answer"}}))
    (course / "source" / assignment).mkdir(parents=True)
    nbformat.write(nb, course / "source" / assignment / f"{assignment}.ipynb")
    shutil.copy(empty_gradebook(tmp_path.parent), course / "gradebook.db")
    with alembic_on_path(), \
            Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        gb.add_assignment(assignment)
        gb.add_notebook(assignment, assignment)
        for exercise, grade_id, points in cells:
            gb.add_grade_cell(grade_id, assignment, assignment, max_score=points, cell_type="code")
        if answer_cell:
            gb.add_solution_cell("answer", assignment, assignment)
        for student, edits in students.items():
            submit(course, assignment, student, edits)
            gb.add_student(student)
            gb.add_submission(assignment, student)
    return course, assignment


def empty_gradebook(folder: Path) -> Path:
    """An empty gradebook in `folder`, made there once (nbgrader makes one by running alembic's
    migrations, about 10 s); a course copies it, as nbgrader then finds it up to date."""
    from nbgrader.api import Gradebook
    made = folder / "empty-gradebook.db"
    if not made.exists():
        building = folder / f"empty-gradebook.{os.getpid()}.db"
        with alembic_on_path(), Gradebook(f"sqlite:///{building}", course_id="rtp-course"):
            pass
        os.replace(building, made)
    return made


@contextlib.contextmanager
def alembic_on_path():
    """nbgrader runs `alembic` from the PATH when it creates a gradebook: this Python's first."""
    before = os.environ["PATH"]
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{before}"
    try:
        yield
    finally:
        os.environ["PATH"] = before


def submit(course: Path, assignment: str, student: str, edits) -> Path:
    """The reference as `student`'s modules, with {module: source (text, or bytes as they are)}
    replacing some."""
    impl = course / "submitted" / student / assignment / "rtp_course"
    if impl.exists():
        shutil.rmtree(impl)
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__", "simple"))
    for module, source in (edits or {}).items():
        if source is None:
            (impl / f"{module}.py").unlink()
        elif isinstance(source, bytes):
            (impl / f"{module}.py").write_bytes(source)
        else:
            (impl / f"{module}.py").write_text(source)
    return impl


def scores(course: Path, assignment: str, students, grade_id: str = "comm-code") -> dict:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        return {s: gb.find_grade(grade_id, assignment, assignment, s).auto_score for s in students}


def working_disguise(source: str, stub: str) -> str:
    """`source` as a copier who wants full marks would hand it in: every name it defines that
    the stub does not (helpers, locals) renamed, docstrings rewritten, comments dropped, the
    layout ast.unparse's. The stub's names and every parameter stay: callers use them."""
    api = {n.name for n in ast.walk(ast.parse(stub)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    tree = ast.parse(source)
    mine = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    mine |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    keep = api | {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)} | set(dir(builtins))
    new = {name: f"v{i}_{name[::-1].strip('_')}" for i, name in enumerate(sorted(mine - keep))
           if not name.startswith("__")}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            node.id = new.get(node.id, node.id)
            return node

        def _def(self, node):
            node.name = new.get(node.name, node.name)
            if ast.get_docstring(node):
                node.body[0].value.value = "In my own words."
            self.generic_visit(node)
            return node
        visit_FunctionDef = visit_ClassDef = _def
    tree = Rename().visit(tree)
    if ast.get_docstring(tree):
        tree.body[0].value.value = "My module."
    return ast.unparse(tree) + "\n"


def run_cli(cmd, course: Path, timeout=1800, check=True, env=None):
    """A command of the instructor's term, run as docs/INSTRUCTORS.md says, on `course`."""
    full = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course), OMP_NUM_THREADS="1",
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **(env or {}))
    full.pop("RTP_COURSE_IMPL", None)
    r = subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"{' '.join(map(str, cmd))}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def busy(n: int) -> list:
    """`n` processes that spin, beside what a test grades."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(processes) -> None:
    for p in processes:
        p.kill()
        p.wait()


def leftovers(course: Path) -> list:
    """Processes still running in, or naming, the grading directory."""
    import psutil
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if Path(p.cwd()).is_relative_to(course) or str(course) in " ".join(p.info["cmdline"] or []):
                found.append((p.pid, " ".join(p.info["cmdline"] or [])[:120]))
        except (psutil.Error, OSError):
            pass
    return found


def hand_in(subs: Path, course: Path, assignment: str, module: str, handed: dict) -> None:
    """Each student's folder as a clone of the student edition holds it: the released
    notebook (with a cell of theirs inserted before the grading cell, where they give one) and
    the exercise modules: the reference's with their `module`, or the stubs as released.
    `handed`: {student: (source of `module` or None for the stubs, cell or None)}."""
    import nbformat
    from rtp_course.course import EXERCISES
    notebook = f"{assignment}.ipynb"
    released = course / "release" / assignment / notebook
    for student, (source, cell) in handed.items():
        folder = subs / student
        (folder / "notebooks").mkdir(parents=True)
        nb = nbformat.read(released, as_version=4)
        if cell:
            at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
            nb.cells.insert(at, nbformat.v4.new_code_cell(cell))
        nbformat.write(nb, folder / "notebooks" / notebook)
        (folder / "rtp_course").mkdir()
        for ex in EXERCISES:
            shutil.copy2(ROOT / ("solutions" if source else "rtp_course") / f"{ex}.py",
                         folder / "rtp_course" / f"{ex}.py")
        if source:
            assert ast.parse(source)
            (folder / "rtp_course" / f"{module}.py").write_text(source)


def hidden_in_utf7(visible: str, hidden: str) -> bytes:
    """A module that reads as `visible` and one comment line wherever it is read as UTF-8 (an
    editor, a diff, a review that does not honour PEP 263), and that Python, honouring its
    `# vim: set fileencoding=utf-7 :` line, runs as `visible` then `hidden`: in UTF-7 the `+AAo-`
    of that comment are newlines."""
    shown = visible.replace("+", "+-").encode("ascii")
    tail = b"+AAo-".join(line.encode("utf-7") for line in hidden.split("\n"))
    data = b"#!/usr/bin/env python3\n# vim: set fileencoding=utf-7 :\n" + shown + b"\n# notes +AAo-" + tail + b"\n"
    assert data.decode("utf-7").endswith(visible + "\n# notes \n" + hidden + "\n")
    assert b"\n" not in data.split(b"# notes ")[1].rstrip(b"\n")        # one line, as UTF-8
    return data
