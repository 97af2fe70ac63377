"""`rtp-course release OUT`: build the student edition from this repository (the instructor edition).

The edition is a copy of the paths in SHIP, so anything new in the instructor
repository stays out until it is named here; instructor material lives in
folders that are not named (`solutions/`, `tests/hidden/`, `tests/wrong/`,
the instructor tests in `tests/`, `scripts/` with the notebook sources,
`rtp_course/instructor/`, `docs/`, DESIGN.md, nbgrader_config.py):

* `notebooks/`: run through nbgrader's own GenerateAssignment (solution regions
  replaced by a stub, hidden test code removed, outputs cleared, graded cells
  locked and checksummed), so the notebooks students hand in match the
  gradebook that `nbgrader generate_assignment` builds from the same sources;
* `rtp_course/`: as is, less `rtp_course/instructor/` (its exercise modules are
  the stubs; the rest, public checks included, is given);
* `tests/given/` (tests of the given code) and `tests/conftest.py`;
* `slurm/`, `.ci/` (install + the tests), `environment.yml`, `.gitignore`,
  `pyproject.toml` (it packages `rtp_course` only), `LICENSE`; and a student README.

The built edition is then scanned (find_leaks): any solution code, nbgrader
marker or instructor file found there fails the release.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.instructor import REPOSITORY

SHIP = ("rtp_course", "notebooks", "tests/given", "tests/conftest.py", "slurm", ".ci",
        "pyproject.toml", "environment.yml", ".gitignore", "LICENSE")
NOT_SHIPPED = ("rtp_course/instructor",)     # inside a shipped folder, but instructor only
IGNORE = ("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", ".pytest_cache")
INSTRUCTOR_FILES = {"DESIGN.md", "INSTRUCTORS.md", "nbgrader_config.py", "gradebook.db", "jupytext.toml"}
# Built from parts so that this file's own text holds no marker it looks for.
MARKERS = tuple(f"### {edge} {what}" for what in ("SOLUTION", "HIDDEN TESTS", "MARK SCHEME")
                for edge in ("BEGIN", "END"))


class ReleaseError(RuntimeError):
    """The edition cannot be built; the message says why."""


def instructor_root() -> Path:
    if not (REPOSITORY / "solutions").is_dir():
        raise ReleaseError(f"no solutions/ in {REPOSITORY}: releases are built from the instructor "
                           f"repository, installed with `pip install -e .`")
    return REPOSITORY


def _ignore(root: Path):
    skip = {(root / p).resolve() for p in NOT_SHIPPED}
    patterns = shutil.ignore_patterns(*IGNORE)

    def ignore(folder, names):
        return set(patterns(folder, names)) | {n for n in names if (Path(folder) / n).resolve() in skip}
    return ignore


INSTRUCTOR_TOOLS = ("nbgrader",)     # dev dependencies only instructors use


def _without_instructor_tools(edition: Path) -> None:
    """The student edition's dependencies (pyproject's dev extra, environment.yml) without
    nbgrader: installed, its JupyterLab extension shows students the instructor's "Create
    Assignment" and formgrader menus."""
    pyproject, conda = edition / "pyproject.toml", edition / "environment.yml"
    if pyproject.is_file():
        text = pyproject.read_text()
        for tool in INSTRUCTOR_TOOLS:
            text = re.sub(rf'\s*"{tool}[^"]*",?', "", text)
        pyproject.write_text(text)
    if conda.is_file():
        lines = conda.read_text().splitlines(keepends=True)
        conda.write_text("".join(ln for ln in lines if not any(
            re.match(rf"\s*-\s*{tool}\b", ln) for tool in INSTRUCTOR_TOOLS)))


def build(out, root=None, force: bool = False, log=print) -> Path:
    """Write the student edition of `root` (default: this repository) into `out`."""
    root = Path(root).resolve() if root else instructor_root()
    out = Path(out).resolve()
    missing = [name for name in SHIP if not (root / name).exists()]
    if missing:     # the edition would ship without them (a license, the CI, the tests' config)
        raise ReleaseError(f"{root} has no {', '.join(missing)}: the student edition ships them")
    if out == root or out in root.parents or any(out.is_relative_to(root / s) for s in SHIP):
        raise ReleaseError(f"{out}: choose a directory outside the shipped parts of {root}")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise ReleaseError(f"{out} exists and is not empty (use --force to replace it)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name in SHIP:
            src, dst = root / name, out / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if name == "notebooks" and src.is_dir():
                log(f"  notebooks: {', '.join(student_notebooks(src, dst)) or 'none'}")
            elif src.is_dir():
                shutil.copytree(src, dst, ignore=_ignore(root))
            elif src.is_file():
                shutil.copy2(src, dst)
        (out / "README.md").write_text(student_readme(out))
        _without_instructor_tools(out)
        leaks = find_leaks(out, root)
        if leaks:
            raise ReleaseError("the edition would leak instructor material:\n  " + "\n  ".join(leaks))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def student_notebooks(src: Path, dst: Path) -> list[str]:
    """nbgrader's GenerateAssignment on every notebook of `src`, into `dst` (other files copied)."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    if [p for p in src.rglob("*.ipynb") if p.parent != src and ".ipynb_checkpoints" not in p.parts]:
        raise ReleaseError(f"notebooks in subfolders of {src} are not supported: nbgrader "
                           f"processes top-level notebooks only, and raw ones would leak")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*IGNORE, "*.ipynb"))
    notebooks = sorted(src.glob("*.ipynb"))
    if not notebooks:
        return []
    with tempfile.TemporaryDirectory(prefix="rtp-release-") as tmp:
        course = Path(tmp)
        (course / "source" / "edition").mkdir(parents=True)
        for nb in notebooks:
            shutil.copy2(nb, course / "source" / "edition" / nb.name)
        cfg = Config()
        cfg.CourseDirectory.root = str(course)
        cfg.CourseDirectory.course_id = "rtp-course-release"
        old_path = os.environ.get("PATH", "")
        # nbgrader runs `alembic` from PATH when it creates a gradebook: use this Python's.
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), old_path])
        try:
            result = NbGraderAPI(config=cfg).generate_assignment("edition", force=True, create=True)
        finally:
            os.environ["PATH"] = old_path
        if not result["success"]:
            raise ReleaseError("nbgrader could not build the student notebooks:\n"
                               + result.get("error", "") + result.get("log", ""))
        for nb in notebooks:
            shutil.copy2(course / "release" / "edition" / nb.name, dst / nb.name)
    return [nb.name for nb in notebooks]


def _title(nb: Path) -> str:
    import nbformat
    for cell in nbformat.read(nb, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):  # "# 02 · Data parallelism" -> "Data parallelism"
                    return re.sub(r"^\d+\s*[·:.-]\s*", "", line.lstrip("# ").strip())
    return nb.stem


def builds_on(notebook: str) -> str:
    """' (exercise E8, `rtp_course/context_parallel.py`; it builds on your E4 (`rotation.py`),
    which its checks run)' for the notebook of an exercise whose tasks call another exercise's functions (the
    course table's `requires`), ' (exercise E2, rtp_course/comm.py)' for one that does not, ''
    for a notebook of no exercise."""
    from rtp_course.course import COURSE
    ex = next((e for e in COURSE if e.notebook == notebook), None)
    if ex is None:
        return ""
    own = {t.id for t in ex.tasks}
    needed = {r for t in ex.tasks for r in t.requires} - own
    uses = [e for e in COURSE if e is not ex and any(t.id in needed for t in e.tasks)]
    runs = "; it builds on your " + " and ".join(f"{e.id} (`{e.module}.py`)" for e in uses) \
        + ", which its checks run" if uses else ""
    return f" (exercise {ex.id}, `rtp_course/{ex.module}.py`{runs})"


def student_readme(out: Path) -> str:
    nbs = sorted((out / "notebooks").glob("*.ipynb"))
    notebooks = "\n".join(f"* `notebooks/{nb.name}`: {_title(nb)}{builds_on(nb.stem)}"
                          for nb in nbs) or "* (none yet)"
    env = out / "environment.yml"
    name = re.search(r"^name:\s*(\S+)", env.read_text(), re.M) if env.exists() else None
    torch_pin = re.search(r"^\s*-\s*(torch==\S+)", env.read_text(), re.M) if env.exists() else None
    torch_pin = torch_pin.group(1) if torch_pin else "torch"
    gpu = (f"\n    conda env create -f environment.yml && conda activate {name.group(1)}\n\n"
           f"(`environment.yml` installs {torch_pin} and the course) or, without conda, the "
           f"commands above without `--index-url`.\n" if name else
           f"\n    pip install {torch_pin} && pip install -e \".[dev]\"\n")
    tests = ("\n## Tests of the given code\n\n    python -m pytest -q\n"
             if list((out / "tests").rglob("test_*.py")) else "")
    return STUDENT_README.format(notebooks=notebooks, torch=torch_pin, gpu=gpu, tests=tests,
                                 modules=", ".join(f"`{m}.py`" for m in EXERCISES))


STUDENT_README = """\
# rtp-course: distributed training in PyTorch (student edition)

From data parallelism to Megatron tensor parallelism, ring rotation and
Rotated Tensor Parallelism (RTP). You implement the real mechanisms in the
stub files of `rtp_course/`; a multi-process checker compares what you built
with the single-device model and tells you exactly what is wrong. It runs on
a laptop CPU (gloo, several processes) and on a Slurm GPU cluster (NCCL).

## Set up

On a laptop or any machine without a GPU (the CPU build of the torch the
course is tested with; a plain `pip install torch` would fetch a CUDA build of
several GB):

    python3 -m venv .venv && source .venv/bin/activate
    pip install {torch} --index-url https://download.pytorch.org/whl/cpu
    pip install -e ".[dev]"
    rtp-course info            # torch, backend, GPUs, Slurm

On a GPU machine or cluster, the same torch from PyPI, which is built for CUDA
(NCCL included):
{gpu}
## Work

    jupyter lab

Open the notebooks in order; each names the stub you implement next:

{notebooks}

Your code goes in the exercise modules of `rtp_course/`: {modules}.
Everything else in `rtp_course/` is given.

## Check your work

    rtp-course check comm                    # one exercise, world sizes 1 2 3 4, on CPU
    rtp-course check comm --world-size 2     # only 2 processes
    rtp-course check                         # every exercise

or from a notebook: `from rtp_course.checker import check; check("comm")`. A stub
reports "not implemented yet"; a wrong implementation gets a diagnosis (check,
phase, rank, tensor, error size, hint); a deadlock is stopped and reported.

## On a Slurm cluster

    rtp-course submit check comm --gpus 2 [--partition P --account A --time 00:10:00]
    rtp-course submit status JOBID

or `sbatch slurm/check.sbatch comm` (see `slurm/README.md`); from a notebook,
`rtp_course.cluster.slurm.submit_check(["comm"], gpus=2)`.
{tests}
## Hand in

Your notebooks (`notebooks/*.ipynb`) and your exercise modules (`rtp_course/*.py`),
as your instructor asks. Do not delete or edit the locked (graded) cells: they are
graded by hidden checks that run on your own `rtp_course` code.
"""


# ------------------------------------------------------------------ leak scan

def _code_lines(text: str) -> set[str]:
    """Stripped code lines of a Python source: no docstrings, comments, imports or headers."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {s.strip() for s in text.splitlines()}
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    skip = ("#", "import ", "from ", "def ", "class ", "@", "raise NotImplementedError")
    return {s.split("  #")[0] for i, line in enumerate(text.splitlines(), 1)
            if (s := line.strip()) and i not in docs and not s.startswith(skip) and len(s) >= 25}


def _bodies(text: str) -> set[str]:
    """Every function body of two or more statements (docstring dropped), as an AST dump."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            if len(body) >= 2:
                out.add(ast.dump(ast.Module(body=body, type_ignores=[])))
    return out


def _read(path: Path) -> tuple[str, list[str], set[str]]:
    """(whole text, Python sources in it, its stripped lines worth comparing) of one file."""
    if path.suffix == ".ipynb":
        import nbformat
        cells = nbformat.read(path, as_version=4).cells
        code = [c.source for c in cells if c.cell_type == "code"]
        lines = set().union(*map(_code_lines, code)) | {
            s.strip() for c in cells if c.cell_type != "code" for s in c.source.splitlines()}
        return "\n".join(c.source for c in cells), code, lines
    text = path.read_text()
    if path.suffix == ".py":
        return text, [text], _code_lines(text)
    return text, [], {s.strip() for s in text.splitlines()}


def _stub_lines(path: Path) -> set[str]:
    return {s.strip() for s in path.read_text().splitlines()} if path.exists() else set()


def find_leaks(out: Path, root: Path) -> list[str]:
    """What in the edition `out` belongs to the instructor edition `root` only (empty: nothing)."""
    leaks = []
    solutions = {p.relative_to(root / "solutions").as_posix(): p.read_text()
                 for p in sorted((root / "solutions").rglob("*.py")) if p.name != "__init__.py"}
    # A solution's lines that its stub shares are the interface students are given, not answers.
    sol_lines = {n: _code_lines(t) - _stub_lines(root / "rtp_course" / Path(n).name)
                 for n, t in solutions.items()}
    sol_bodies = {n: _bodies(t) for n, t in solutions.items()}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out)
        if "solutions" in rel.parts or rel.name in INSTRUCTOR_FILES or \
                rel.as_posix().startswith(("tests/hidden", "tests/wrong", "scripts/", *NOT_SHIPPED)):
            leaks.append(f"{rel}: instructor-only file")
            continue
        try:
            text, code, lines = _read(path)
        except (UnicodeDecodeError, ValueError):
            continue  # binary (an image): no text to leak
        leaks += [f"{rel}: nbgrader marker '{m}'" for m in MARKERS if m in text]
        bodies = set().union(*map(_bodies, code))
        for name in solutions:
            if sol_bodies[name] & bodies:
                leaks.append(f"{rel}: holds a function body of solutions/{name}")
            hits = sol_lines[name] & lines
            if len(hits) >= max(4, 0.2 * len(sol_lines[name])):
                leaks.append(f"{rel}: {len(hits)} lines of solutions/{name}, e.g. {sorted(hits)[0]!r}")
    return leaks


def cli_release(args) -> int:
    try:
        print(f"building the student edition in {args.out} ...")
        out = build(args.out, force=args.force)
    except ReleaseError as e:
        print(f"rtp-course release: {e}", file=sys.stderr)
        return 2
    from rtp_course.instructor import manifest
    sealed = manifest.seal()
    print(f"student edition written to {out} (no leaks found).\n"
          f"Grader manifest written to {sealed}: `rtp-course grade` refuses to grade if a file of "
          f"the grader changes (after an intended change: `rtp-course seal`).\n"
          f"Publish it, e.g.: cd {out} && git init && git add -A && git commit -m 'student edition'")
    return 0
