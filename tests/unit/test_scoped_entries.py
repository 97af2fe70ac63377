"""tests/wrong and tests/correct entries as edits scoped to named definitions (EDITS,
tests/helpers/wrongs.py): each entry builds and compiles; a key the reference does not define,
or an edit whose text its definition holds 0 or 2+ times, fails naming the entry and the key;
a refactoring of the reference in another function keeps an entry applying; and
scripts/anchor_entries.py keys each REPLACE pair on the innermost definition holding it."""
from __future__ import annotations

import importlib.util
import runpy
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import wrongs  # noqa: E402

_spec = importlib.util.spec_from_file_location("anchor_entries", ROOT / "scripts" / "anchor_entries.py")
anchor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(anchor)

ENTRIES = sorted(p for folder in ("wrong", "correct") for p in (ROOT / "tests" / folder).glob("*/*.py")
                 if not p.name.startswith("_"))


@pytest.mark.parametrize("path", ENTRIES,
                         ids=[p.relative_to(ROOT / "tests").as_posix() for p in ENTRIES])
def test_each_entry_builds_and_compiles(path):
    built = wrongs.build(path)                     # fails naming the entry and the key
    compile(built, str(path), "exec")
    assert built != wrongs.base_of(path)[0] or not any(
        runpy.run_path(str(path)).get(k) for k in ("EDITS", "REPLACE", "ADD")), \
        f"{path}: its edits change nothing"


REFERENCE = '''import torch


@torch.no_grad()
def f(x):
    return x


class C:
    def m(self):
        return 1

    def n(self):
        return 1


class C:  # noqa: F811  (redefined, as solutions/flyweight.py's faster design does)
    def m(self):
        return 2
'''


def test_edits_change_only_their_definition():
    out = wrongs.scoped(REFERENCE, {"C#1.n": [("return 1", "return 3")],
                                    "f": [("@torch.no_grad()\n", "")],
                                    "C.m": [("return 2", "return 4")]})
    assert out == REFERENCE.replace("@torch.no_grad()\n", "").replace(
        "        return 1\n\n\nclass", "        return 3\n\n\nclass").replace("return 2", "return 4")


def test_add_appends_new_top_level_source(tmp_path):
    entry = tmp_path / "comm" / "helper.py"
    entry.parent.mkdir()
    entry.write_text('"""A helper."""\n'
                     'EDITS = {"AllReduce.forward": [("        return out\\n",\n'
                     '                                "        return _half(out)\\n")]}\n'
                     'ADD = """def _half(t):\\n    return t / 2\\n"""\n')
    built = wrongs.build(entry)
    assert built.endswith("\n\n\ndef _half(t):\n    return t / 2\n")
    assert built.count("return _half(out)") == 1


@pytest.mark.parametrize("edits, said", [
    ({"g": [("x", "y")]}, r"EDITS names 'g', which the reference does not define"),
    ({"C.k": [("x", "y")]}, r"EDITS names 'C\.k'"),
    ({"C#3": [("x", "y")]}, r"EDITS names 'C#3'"),
    ({"f": [("return 1", "return 0")]},
     r"an edit of EDITS\['f'\] no longer applies.*occurs 0 times in f"),
    ({"C#1": [("return 1", "return 0")]}, r"an edit of EDITS\['C#1'\] .*occurs 2 times in C#1"),
    ({"C#1.m": [("return 2", "return 0")]}, r"an edit of .*occurs 0 times in C#1\.m"),   # only in C.m
    ({"C#1": [("return 1\n\n    def n", "")], "C#1.n": [("1", "0")]},
     r"EDITS names both 'C#1' and 'C#1\.n', which overlap"),
])
def test_edits_fail_loudly_naming_entry_and_key(edits, said):
    with pytest.raises(AssertionError, match=f"^an entry: {said}"):
        wrongs.scoped(REFERENCE, edits, "an entry")


COMM = ROOT / "tests" / "wrong" / "comm" / "allreduce_average.py"
REFACTOR = ("        return x.view_as(x)\n",
            "        out = x.view_as(x)   # refactored\n        return out\n")


def test_a_refactoring_of_another_function_keeps_an_entry_applying(tmp_path):
    """Duplication.forward refactored on a copy of solutions/comm.py: the text the entry edits in
    AllReduce.forward (`return out`) now occurs twice in the module, so an edit of the whole
    module fails, and the entry scoped to AllReduce.forward still applies, there alone."""
    assert list(runpy.run_path(str(COMM))["EDITS"]) == ["AllReduce.forward"]
    solutions = tmp_path / "solutions"
    shutil.copytree(wrongs.SOLUTIONS, solutions, ignore=shutil.ignore_patterns("__pycache__"))
    source = (solutions / "comm.py").read_text()
    assert source.count(REFACTOR[0]) == 1
    (solutions / "comm.py").write_text(source.replace(*REFACTOR))
    pairs = runpy.run_path(str(COMM))["EDITS"]["AllReduce.forward"]
    with pytest.raises(AssertionError, match="occurs 2 times"):
        wrongs.replace((solutions / "comm.py").read_text(), pairs)
    assert wrongs.build(COMM, solutions) == wrongs.build(COMM).replace(*REFACTOR)


def test_a_name_the_reference_lost_fails_naming_entry_and_key(tmp_path):
    solutions = tmp_path / "solutions"
    shutil.copytree(wrongs.SOLUTIONS, solutions, ignore=shutil.ignore_patterns("__pycache__"))
    source = (solutions / "comm.py").read_text()
    (solutions / "comm.py").write_text(source.replace("class AllReduce(", "class AllReduceSum("))
    with pytest.raises(AssertionError, match=r"allreduce_average\.py: EDITS names "
                                             r"'AllReduce\.forward', which solutions/comm\.py"):
        wrongs.build(COMM, solutions)


CLASS_M = ("class C:\n    def m(self):\n        return 1", "class C:\n    def m(self):\n        return 0")
THEN_N = ("return 0\n\n    def n(self):\n        return 1", "return 0\n\n    def n(self):\n        return 5")


@pytest.mark.parametrize("pairs, edits, left", [
    ([("return 2", "return 4")], {"C.m": [("return 2", "return 4")]}, []),
    # held by two methods of C#1 alone: the class
    ([("        return 1\n\n    def n(self):\n        return 1",
       "        return 0\n\n    def n(self):\n        return 0")],
     {"C#1": [("        return 1\n\n    def n(self):\n        return 1",
               "        return 0\n\n    def n(self):\n        return 0")]}, []),
    # a class's and its method's edits: the class takes both, in their order
    ([(CLASS_M[0], CLASS_M[1]), (THEN_N[0], THEN_N[1])], {"C#1": [CLASS_M, THEN_N]}, []),
    # written with the next line, outside the definition: trimmed to inside it
    ([("    return x\n\n", "    return -x\n\n")], {"f": [("    return x\n", "    return -x\n")]}, []),
    # an import stays a module-level edit
    ([("import torch\n", "import math\nimport torch\n"), ("return x", "return x + 1")],
     {"f": [("return x", "return x + 1")]}, [("import torch\n", "import math\nimport torch\n")]),
])
def test_the_script_keys_each_edit_on_its_innermost_definition(pairs, edits, left):
    assert anchor.scoped(REFERENCE, pairs) == (edits, left)
    assert wrongs.replace(wrongs.scoped(REFERENCE, edits), left) == wrongs.replace(REFERENCE, pairs)


@pytest.mark.parametrize("pairs, why", [
    ([], "REPLACE is empty"),
    ([("import torch\n", "import math\nimport torch\n")], "every edit is of module-level text"),
])
def test_the_script_leaves_what_no_definition_holds(pairs, why):
    with pytest.raises(anchor.Textual, match=why):
        anchor.scoped(REFERENCE, pairs)


def test_the_script_rewrites_an_entry_and_then_leaves_it(tmp_path):
    entry = tmp_path / "comm" / "an_entry.py"
    entry.parent.mkdir()
    replace_form = ('"""A bug."""\n\n# The bug:\nREPLACE = [\n    ("        return out\\n",\n'
                    '     "        return out / 2\\n"),\n]\n')
    entry.write_text(replace_form)
    before = wrongs.build(entry)
    assert anchor.convert(entry) == "scoped"
    assert "\nEDITS = {\n    \"AllReduce.forward\": [\n" in entry.read_text()
    assert wrongs.build(entry) == before
    assert anchor.convert(entry).startswith("kept")
