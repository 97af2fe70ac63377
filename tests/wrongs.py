"""The collection of realistic wrong implementations in tests/wrong/<exercise>/<bug>.py.

Each file is a complete exercise module with one bug. Its docstring's first
line says the bug; `EXPECT: <regex>` is what the checker's report must say
(matched across lines), `WORLD_SIZES: 2 3` the world sizes that show it, and
the optional `ONLY: check_a check_b` limits the run to those checks (speed).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRONG = ROOT / "tests" / "wrong"
SOLUTIONS = ROOT / "solutions"


def collect(exercise: str | None = None):
    """Wrong implementations of the exercises that have checks."""
    from rtp_course.checker.registry import check_modules
    files = sorted(WRONG.glob(f"{exercise or '*'}/*.py"))
    return [f for f in files if not f.name.startswith("_") and check_modules([f.parent.name], False)]


def spec(path: Path) -> dict:
    text = path.read_text()
    doc = re.match(r'\s*"""(.*?)"""', text, re.S)
    assert doc, f"{path}: needs a module docstring"
    body = doc.group(1)
    expect = re.search(r"^EXPECT:\s*(.+)$", body, re.M)
    sizes = re.search(r"^WORLD_SIZES:\s*(.+)$", body, re.M)
    only = re.search(r"^ONLY:\s*(.+)$", body, re.M)
    return {"bug": body.strip().splitlines()[0],
            "expect": expect.group(1).strip() if expect else None,
            "world_sizes": [int(x) for x in sizes.group(1).split()] if sizes else [2, 3],
            "only": only.group(1).split() if only else None}


def impl_with(path: Path, dest: Path) -> Path:
    """A copy of solutions/ whose `<exercise>.py` is replaced by the wrong file."""
    shutil.copytree(SOLUTIONS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(path, dest / f"{path.parent.name}.py")
    return dest
