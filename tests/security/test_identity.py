"""identity.py and reveal.py: which trees an unprivileged rank must be shown, and showing them
in a mount namespace of its own (root only), nothing changing outside it."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from hostile import needs_root
from rtp_course.confinement import identity

UID = identity.BASE + 4242


@pytest.fixture
def tmp_path():
    """A directory others may traverse all the way down (pytest's own is under a 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="rtp-identity-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tree(root, *parts, mode=0o755):
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    for p in [path, *path.parents]:
        if p == root:
            break
        os.chmod(p, mode)
    return path


def test_a_tree_under_a_closed_directory_is_shown_by_covering_it(tmp_path):
    """A Python under a 0700 home: the home is covered, the installation shown."""
    home = _tree(tmp_path, "home")
    python = _tree(tmp_path, "home", "pyenv", "3.11")
    os.chmod(home, 0o700)
    covers, why = identity.plan([python], UID)
    assert why == "" and covers == {home: [python]}


def test_an_open_path_needs_no_cover(tmp_path):
    assert identity.plan([_tree(tmp_path, "opt", "lib")], UID) == ({}, "")


def test_a_closed_tree_keeps_the_rank_root_and_says_why(tmp_path):
    """What others may not read themselves cannot be shown: the rank stays root, and the
    report's confinement line names the path."""
    submission = _tree(tmp_path, "grading", "alice")
    os.chmod(submission, 0o700)
    assert identity.plan([submission], UID) == ({}, f"{submission} is not readable by uid {UID}")


def test_a_tree_inside_another_must_be_reachable_from_it(tmp_path):
    outer = _tree(tmp_path, "venv")
    inner = _tree(tmp_path, "venv", "lib", "site-packages")
    os.chmod(outer / "lib", 0o711)
    assert identity.plan([outer, inner], UID) == ({}, "")
    os.chmod(outer / "lib", 0o700)
    assert identity.plan([outer, inner], UID)[1] == f"{outer / 'lib'} is not readable by uid {UID}"


def test_the_ranks_own_scratch_is_readable_by_it(tmp_path):
    scratch = _tree(tmp_path, "run", "tmp.0")
    os.chmod(scratch, 0o700)
    if os.geteuid() == 0:
        os.chown(scratch, UID, UID)
        assert identity.plan([scratch], UID) == ({}, "")


def test_a_uid_of_the_machine_is_never_taken():
    assert identity.plan([], 0) == ({}, "uid 0 is a user of this machine")


SHOWN = """
import json, os, sys
from pathlib import Path
from rtp_course.confinement import identity, reveal
closed, tree, sibling, uid = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
assert reveal.own_mounts()
covers, why = identity.plan([tree], uid)
assert not why and covers == {closed: [tree]}, (covers, why)
reveal.reveal(covers)
identity.drop(uid)
print(json.dumps({"ids": os.getresuid(), "groups": os.getgroups(),
                  "tree": sorted(os.listdir(tree)), "sibling": sibling.exists(),
                  "closed": sorted(os.listdir(closed))}))
"""


@needs_root
def test_a_dropped_process_sees_its_tree_and_nothing_else_of_the_closed_directory(tmp_path):
    """In a mount namespace of its own, a root process covers a 0700 directory, shows the
    one tree it needs there, and drops to a uid of its own: it reads the tree, the rest of
    the directory does not exist for it, and the machine's mounts are unchanged."""
    closed = _tree(tmp_path, "root")
    tree = _tree(tmp_path, "root", "pyenv")
    (tree / "python.py").write_text("")
    (closed / "secret").write_text("")
    os.chmod(closed, 0o700)
    mounts = open("/proc/self/mountinfo").read()
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SHOWN), str(closed), str(tree),
                           str(closed / "secret"), str(UID)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said == {"ids": [UID] * 3, "groups": [], "tree": ["python.py"], "sibling": False,
                    "closed": ["pyenv"]}, said
    assert open("/proc/self/mountinfo").read() == mounts
    assert (closed / "secret").exists()


@needs_root
def test_a_submission_others_cannot_read_is_graded_unprivileged(tmp_path):
    """A submission in a 0700 directory of its own (a grading directory): the ranks see a copy
    of its modules in the run's directory (checker/group.py), so they still drop to a uid of
    their own, every check passes, and the grader's directory is nowhere in what they see."""
    from hostile import hostile, run
    impl = hostile(tmp_path, {})
    os.chmod(impl, 0o700)
    results, text = run(impl, only=("Duplication",))
    assert results and all(r.passed for r in results), text
    assert "not unprivileged" not in text and "as uid" in text, text
    assert "confined (Landlock" in text and "seccomp" in text, text
