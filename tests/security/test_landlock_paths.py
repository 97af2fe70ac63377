"""landlock.py's rules: a tree granted around its unreadable part (Landlock has no deny rule),
and the directories a process's libraries come from."""
import os
import subprocess
import sys
import textwrap

import pytest

from hostile import needs_landlock
from rtp_course.confinement import landlock


def test_a_tree_is_granted_around_its_unreadable_part(tmp_path):
    site = (tmp_path / "site-packages").resolve()      # an installed (not editable) course
    for f in ["torch/__init__.py", "rtp_course/comm.py", "rtp_course/checker/common.py",
              "rtp_course/checker/public/comm.py", "rtp_course/runtime/launcher.py"]:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text("")
    public = site / "rtp_course" / "checker" / "public"
    full, listed = landlock._readable([str(site), str(site / "rtp_course")], [public])
    # both roots lead to the package: its directories on the way may only be listed
    assert set(listed) == set(map(str, [site, site / "rtp_course", site / "rtp_course" / "checker"]))
    assert str(site / "torch") in full and str(site / "rtp_course" / "runtime") in full
    assert str(site / "rtp_course" / "checker" / "common.py") in full
    assert not [p for p in full if p.startswith(str(public))]


def test_without_an_unreadable_part_a_root_is_one_rule(tmp_path):
    assert landlock._readable([str(tmp_path)], []) == ([str(tmp_path.resolve())], [])


def test_library_directories_leave_out_what_must_stay_closed(tmp_path, monkeypatch):
    """LD_LIBRARY_PATH's directories are granted, less "/", a directory anyone may write,
    a relative entry, and any directory holding or under what must stay unreadable."""
    closed = tmp_path / "hidden"
    inside, beside, world = closed / "lib", tmp_path / "lib", tmp_path / "world"
    for d in (inside, beside, world):
        d.mkdir(parents=True)
    os.chmod(world, 0o777)
    monkeypatch.setenv("LD_LIBRARY_PATH", ":".join(
        map(str, ["/", "relative/lib", tmp_path, inside, beside, world])))
    found = landlock.library_dirs(avoid=[closed])
    assert str(beside.resolve()) in found
    for left_out in ("/", str(tmp_path.resolve()), str(inside.resolve()), str(world.resolve())):
        assert left_out not in found, found


LOADED_LATER = """
import ctypes, os, sys
mapped, listed, elsewhere = sys.argv[1:4]
ctypes.CDLL(os.path.join(mapped, "libmain.so"))        # mapped before confinement
from rtp_course.confinement import landlock
done = landlock.confine(read=[], write=[])
assert done.active, done.describe()
for d in (mapped, listed):
    open(os.path.join(d, "libsibling.so.9")).close()   # what a library loads later
try:
    open(os.path.join(elsewhere, "libsibling.so.9")).close()
    print("ELSEWHERE READABLE")
except PermissionError:
    print("OK")
"""


@needs_landlock
def test_a_confined_process_reads_its_libraries_directories_and_ld_library_path(tmp_path):
    """cuDNN, under a cluster's /apps or /opt, loads its sub-libraries at the first
    convolution, after the rank is confined: the directory of every library mapped at
    confinement, and those of LD_LIBRARY_PATH, are readable (another directory is not).
    Before the fix only the system and Python directories were: EACCES."""
    dirs = [tmp_path / name for name in ("apps", "opt", "elsewhere")]
    for d in dirs:
        d.mkdir()
        (d / "libsibling.so.9").write_text("")
    library = next((f"{d}/libm.so.6" for d in ("/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                                               "/usr/lib64", "/lib64")
                    if os.path.exists(f"{d}/libm.so.6")), None)
    if library is None:
        pytest.skip("no libm.so.6 to copy here")
    (dirs[0] / "libmain.so").write_bytes(open(library, "rb").read())
    env = dict(os.environ, LD_LIBRARY_PATH=str(dirs[1]))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(LOADED_LATER), *map(str, dirs)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "OK", done.stdout + done.stderr


MAKES_NODES = """
import os, sys
from rtp_course.confinement import landlock
worked, private = sys.argv[1:]
done = landlock.confine(read=[], write=[worked, private], links=False, rendezvous_under=[private])
assert done.active, done
for where in (worked, private):
    try:
        os.mkfifo(os.path.join(where, "n1.ipynb"))
        print(where == private and "PRIVATE FIFO" or "WORKED FIFO")
    except PermissionError:
        print("refused")
with open(os.path.join(worked, "n1.html"), "w") as f:
    f.write("a file, as a kernel writes")
print("file")
"""


@needs_landlock
def test_a_confined_kernel_makes_no_fifo_where_nbgrader_writes_after_it(tmp_path):
    """A FIFO in the place of the notebook in the folder a kernel ran in blocks nbgrader,
    which writes the executed notebook there unconfined, until a guard of an hour. The kernel
    may make FIFOs and sockets only in its private directory (multiprocessing's)."""
    worked, private = tmp_path / "submitted", tmp_path / "private"
    worked.mkdir()
    private.mkdir()
    done = subprocess.run([sys.executable, "-c", MAKES_NODES, str(worked), str(private)],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["refused", "PRIVATE", "FIFO", "file"], done.stdout + done.stderr
