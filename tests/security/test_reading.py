"""What a graded rank may read and write: the Python installation, torch, the course and the
code under test, and its scratch; not the solutions, the hidden checks, the gradebook or
another run's files, and nothing outside its scratch is written."""
import hashlib
import os
from pathlib import Path

import rtp_course
from hostile import ROOT, at_forward, at_import, hostile, needs_landlock, run


@needs_landlock
def test_cannot_read_solutions_hidden_checks_or_the_gradebook(tmp_path):
    """Before confinement (a plain `rtp-course check`) every one of these is readable."""
    gradebook = tmp_path / "grading" / "gradebook.db"
    gradebook.parent.mkdir()
    gradebook.write_text("scores")
    secrets = [ROOT / "solutions" / "comm.py", ROOT / "tests" / "hidden" / "comm.py", gradebook,
               Path.home() / ".cache" / "rtp-course"]
    probe = "\n".join([
        "import os as _os",
        f"for _p in {[str(s) for s in secrets]!r}:",
        "    try:",
        "        (_os.listdir(_p) if _os.path.isdir(_p) else open(_p).read())",
        "    except OSError:",
        "        continue",
        "    raise RuntimeError('LEAKED ' + _p)",
    ])
    results, text = run(hostile(tmp_path, at_forward(probe)))
    assert "LEAKED" not in text and all(r.passed for r in results), text
    assert "confined (Landlock" in text, text


@needs_landlock
def test_cannot_read_the_solutions_in_a_child_process(tmp_path):
    """A child process (`cat`) inherits the rank's confinement."""
    probe = ("import subprocess as _sp\n"
             f"_r = _sp.run(['cat', {str(ROOT / 'solutions' / 'comm.py')!r}], capture_output=True)\n"
             "if _r.returncode == 0:\n"
             "    raise RuntimeError('LEAKED through a child process')")
    results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
    assert "LEAKED" not in text and all(r.passed for r in results), text


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_landlock
def test_cannot_write_the_installation_the_gradebook_or_outside_its_run(tmp_path):
    """Before confinement, each of these writes lands."""
    gradebook = tmp_path / "gradebook.db"
    gradebook.write_text("scores")
    verdict = Path(rtp_course.__file__).parent / "checker" / "verdict.py"
    marker = Path("/tmp") / f"rtp-attack-marker-{os.getpid()}"
    cache = Path.home() / ".cache" / "rtp-course" / f"attack-{os.getpid()}"
    targets = [verdict, gradebook, marker, cache]
    before = {p: _digest(p) for p in targets if p.exists()}
    probe = "\n".join([
        f"for _p in {[str(t) for t in targets]!r}:",
        "    try:",
        "        open(_p, 'a').write('# tampered\\n')",
        "    except OSError:",
        "        continue",
        "    raise RuntimeError('WROTE ' + _p)",
    ])
    results, text = run(hostile(tmp_path, at_import(probe)), only=("Duplication",))
    assert "WROTE" not in text and all(r.passed for r in results), text
    assert {p: _digest(p) for p in targets if p.exists()} == before
    assert not marker.exists() and not cache.exists()


RELOAD_PROBE = """import importlib.util as _util
from pathlib import Path as _Path
import rtp_course.checker.public.comm as _loaded
_path = _Path(_loaded.__file__)
try:
    _spec = _util.spec_from_file_location('_fresh_checks', _path)
    _mod = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
except OSError:
    pass
else:
    raise RuntimeError('LOADED THE CHECKS AGAIN')
try:
    open(_path.parent / 'tensor_parallel.py').read()
except OSError:
    pass
else:
    raise RuntimeError('READ A CHECK FILE')"""


@needs_landlock
def test_the_checks_files_cannot_be_loaded_again_in_a_rank(tmp_path):
    """A class loaded afresh from the checks' own file would have its parent side back: the
    confined rank may list the directory but not open a file in it."""
    results, text = run(hostile(tmp_path, at_import(RELOAD_PROBE)))
    assert results and all(r.passed for r in results), text
