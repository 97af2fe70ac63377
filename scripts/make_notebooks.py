#!/usr/bin/env python3
"""Build the course notebooks (nbgrader source form) from readable Python sources.

    python scripts/make_notebooks.py            # scripts/notebook_src/*.py -> notebooks/*.ipynb
    python scripts/make_notebooks.py --check    # exit 1 if a committed notebook is out of date

The .ipynb files are what nbgrader reads (commit both). A source is a Python
file in "percent" form; each cell starts with a marker line:

    # %% [markdown]                 markdown; every line starts with "# " (or is "#")
    # %%                            ordinary code
    # %% solution id=GRADE_ID       autograded answer: code between ### BEGIN/END SOLUTION
    # %% test id=GRADE_ID points=N  read-only graded test cell (may hold ### BEGIN HIDDEN TESTS)

Cells carry stable ids (so a rebuild changes nothing) and no outputs.
"""
import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "scripts" / "notebook_src"
OUT = ROOT / "notebooks"
MARKER = re.compile(r"^# %%(?P<rest>.*)$")
KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
          "language_info": {"name": "python"}}


def _options(text: str) -> dict:
    return dict(re.findall(r"(\w+)=(\S+)", text))


def _nbgrader(kind: str, opts: dict) -> dict:
    if "id" not in opts:
        raise ValueError(f"a {kind} cell needs id=GRADE_ID")
    meta = {"grade_id": opts["id"], "schema_version": 3, "task": False}
    if kind == "solution":
        meta.update(grade=False, locked=False, solution=True)
    else:
        meta.update(grade=True, locked=True, solution=False, points=float(opts.get("points", 1)))
    return meta


def _strip(lines: list) -> str:
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def parse(path: Path):
    """The cells of one source file: a list of (kind, options, text)."""
    cells, current = [], None
    for line in path.read_text().splitlines():
        m = MARKER.match(line)
        if m:
            rest = m["rest"].strip()
            kind = ("markdown" if rest.startswith("[markdown]") else
                    "solution" if rest.startswith("solution") else
                    "test" if rest.startswith("test") else "code")
            current = (kind, _options(rest), [])
            cells.append(current)
        elif current is None:
            if line.strip():
                raise ValueError(f"{path}: text before the first '# %%' marker: {line!r}")
        elif current[0] == "markdown":
            if line.strip() and not line.startswith("#"):
                raise ValueError(f"{path}: markdown line without '#': {line!r}")
            current[2].append(line[2:] if line.startswith("# ") else line[1:])
        else:
            current[2].append(line)
    return [(kind, opts, _strip(lines)) for kind, opts, lines in cells]


def build(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(metadata=dict(KERNEL))
    tag = path.stem.split("_")[0]
    for i, (kind, opts, text) in enumerate(parse(path)):
        cell_id = f"nb{tag}-{i:02d}"
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(text, id=cell_id)
        else:
            cell = nbformat.v4.new_code_cell(text, id=cell_id)
            if kind in ("solution", "test"):
                cell.metadata["nbgrader"] = _nbgrader(kind, opts)
                cell.metadata["editable"] = kind == "solution"
                cell.metadata["deletable"] = False
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("names", nargs="*", help="source stems (default: all)")
    args = parser.parse_args(argv)
    sources = sorted(SRC.glob("*.py"))
    if args.names:
        sources = [s for s in sources if s.stem in args.names]
    stale = []
    for src in sources:
        target = OUT / f"{src.stem}.ipynb"
        text = nbformat.writes(build(src)) + "\n"
        if args.check:
            if not target.exists() or target.read_text() != text:
                stale.append(target.name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print("out of date (run scripts/make_notebooks.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
