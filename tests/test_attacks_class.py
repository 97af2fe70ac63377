"""A hostile class, graded: afterwards the grading machine is as it was outside the run's own
directories, and every honest part of every submission still earned its points.

Each submission is the reference with one recipe pasted in at import. Every trace a recipe
tries to leave carries a marker, so what is left behind is found wherever it lands, and the
grader's own HOME and temporary directory are compared whole, before and after.
"""
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rtp_course.runtime import sandbox
from test_attacks import ROOT, hostile

MARK = f"rtpclass{uuid.uuid4().hex[:8]}"

RECIPES = {
    # leave files wherever a path might be writable
    "files": f"""
import os as _os, site as _site, sys as _sys, tempfile as _tf
for _d in [_os.path.expanduser('~'), _os.path.expanduser('~/.cache'), '/tmp', '/dev/shm',
           _tf.gettempdir(), *_site.getsitepackages(), _os.path.dirname(_os.__file__),
           _os.path.dirname(_os.path.dirname(__file__))]:
    try:
        with open(_os.path.join(_d, '{MARK}.pth'), 'w') as _f:
            _f.write('import os; os.system("touch /tmp/{MARK}-ran")')
    except OSError:
        pass
""",
    # processes that try to outlive the run: detached, double-forked, and one that re-forks
    "processes": f"""
import ctypes as _ct, os as _os, subprocess as _sp, time as _time
_sp.Popen(['sh', '-c', 'exec -a {MARK}-detached sleep 300'], start_new_session=True)
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _ct.CDLL(None).prctl(15, b'{MARK[:15]}', 0, 0, 0)    # its name, for ps to find
        for _ in range(100000):                         # a new pid every few milliseconds
            if _os.fork():
                _os._exit(0)
            _time.sleep(0.003)
    _os._exit(0)
""",
    # fill what it may write: its own temporary directory
    "disk": """
import os as _os
with open(_os.path.join(_os.environ['HOME'], 'big'), 'wb') as _f:
    _f.write(b'x' * (64 << 20))
""",
}


def _tree(root: Path) -> dict:
    """{relative path: (size, mtime)} of every file, and every directory, under root.

    A directory's own mtime is left out: Python writing a __pycache__ into a package
    the honest run never imported changes it, and what a directory holds is listed anyway."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            out[str(p.relative_to(root))] = ("dir",) if p.is_dir() and not p.is_symlink() \
                else (st.st_size, st.st_mtime_ns)
    return out


def _marked() -> list:
    """Files and processes anywhere that carry the marker."""
    found = []
    for d in ["/tmp", "/dev/shm", *sys.path]:
        if d and os.path.isdir(d):
            found += [f"{d}/{n}" for n in os.listdir(d) if MARK in n]
    ps = subprocess.run(["ps", "-eo", "comm,args"], capture_output=True, text=True).stdout
    return found + [line for line in ps.splitlines() if MARK[:15] in line]


GRADE = """
import sys
from rtp_course.checker import check
for impl in sys.argv[1:]:
    rep = check('comm', impl=impl, hidden=False, world_sizes=[2], quiet=True, grading=True)
    print(impl.rsplit('/', 1)[-1], rep.score('comm'))
"""


@pytest.mark.skipif(sandbox.abi_version() < 1, reason="this kernel offers no Landlock")
def test_grading_a_hostile_class_leaves_the_machine_as_it_was(tmp_path):
    home, tmp = tmp_path / "grader-home", tmp_path / "grader-tmp"
    home.mkdir()
    tmp.mkdir()
    (home / ".bashrc").write_text("# the grader's\n")
    impls = [hostile(tmp_path / name, {"comm": [("import torch\n", "import torch\n" + code)]},
                     name=name) for name, code in RECIPES.items()]
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "RTP_COURSE_WARM": "0"}
    # an honest class first: what grading itself makes (torch's caches) is there before
    honest = subprocess.run([sys.executable, "-c", GRADE, str(ROOT / "solutions")],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert honest.stdout.split() == ["solutions", "1.0"], honest.stderr[-3000:]
    before = {"home": _tree(home), "tmp": _tree(tmp), "course": _tree(ROOT / "rtp_course")}
    r = subprocess.run([sys.executable, "-c", GRADE, *map(str, impls)], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # every submission is the reference under its recipe: full marks, the recipe held
    scores = dict(line.split() for line in r.stdout.splitlines())
    assert scores == {name: "1.0" for name in RECIPES}, r.stdout
    after = {"home": _tree(home), "tmp": _tree(tmp), "course": _tree(ROOT / "rtp_course")}
    after["course"] = {k: v for k, v in after["course"].items() if "__pycache__" not in k}
    before["course"] = {k: v for k, v in before["course"].items() if "__pycache__" not in k}
    assert after == before
    assert not _marked(), _marked()
