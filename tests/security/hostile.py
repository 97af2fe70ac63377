"""Hostile submissions, as the security tests build them: the reference solution with a few
hostile lines pasted in, run by the checker as grading runs it (confined), so that where an
attack is held the checks still pass on the honest part. docs/SECURITY.md is the threat
model these tests hold."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from rtp_course.checker import engine, report
from rtp_course.confinement import landlock

ROOT = Path(__file__).resolve().parents[2]
LANDLOCK = landlock.abi_version()
needs_landlock = pytest.mark.skipif(LANDLOCK < 1, reason="this kernel offers no Landlock "
                                                         "(Linux 5.13+, landlock in lsm=)")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="graded as root only: the tests do "
                                                          "not run as root here")
FORWARD = "    def forward(ctx, x, group=None):\n"     # Duplication.forward, the first in comm.py
ALL_REDUCE = "        out = x.contiguous().clone()\n        dist.all_reduce(out, group=group)\n"


def hostile(tmp_path, edits, name="impl"):
    """A copy of solutions/ with `edits` ({module: [(old, new)]}) applied."""
    impl = tmp_path / name
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    for module, pairs in edits.items():
        path = impl / f"{module}.py"
        text = path.read_text()
        for old, new in pairs:
            assert old in text, (module, old)
            text = text.replace(old, new, 1)
        path.write_text(text)
    return impl


def _indented(code: str, spaces: int) -> str:
    return "".join(f"{' ' * spaces}{line}\n" for line in code.splitlines())


def at_forward(code):
    """`code` run first in Duplication.forward (a check's phase, on every rank)."""
    return {"comm": [(FORWARD, FORWARD + _indented(code, 8))]}


def at_import(code):
    """`code` run when comm.py is imported (before any check)."""
    return {"comm": [("import torch\n", "import torch\n" + code + "\n")]}


def in_all_reduce(code):
    """`code` run in AllReduce.forward, before its all-reduce."""
    return {"comm": [(ALL_REDUCE, "        out = x.contiguous().clone()\n" + _indented(code, 8)
                      + "        dist.all_reduce(out, group=group)\n")]}


def run(impl, world_sizes=(2,), only=("Duplication", "AllReduce"), confine=True, **kw):
    """The checks `only` of comm on `impl`, confined as grading confines them."""
    results = engine.run(["comm"], impl=str(impl), world_sizes=world_sizes, only=list(only),
                         confine=confine, **kw)
    return results, report.text(results)


def own_run_dirs():
    """Temporary run directories of this process on disk (less multiprocessing's own, `rtp-mp-`,
    which holds the live forkserver's socket and goes when this process ends)."""
    return sorted(p for p in Path(tempfile.gettempdir()).glob(f"rtp-*-o{os.getpid()}-*")
                  if not p.name.startswith("rtp-mp-"))
