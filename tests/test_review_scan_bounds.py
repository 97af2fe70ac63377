"""The review's scan is bounded: a compression bomb is never decompressed (fold.py folds no codec
that expands data), and every scan of a submission runs in a worker process with CPU-time,
memory and wall-time limits (review/worker.py): a file whose scan runs out is flagged
"scan-limit" and the class's other files keep their flags.

Before: a never-called function holding a ~2 KB bz2 constant decoded with codecs.decode(...,
"bz2") made the folder decompress ~1.4 GB for every nested call, and `rtp-course grade` never
wrote anyone's review.csv."""
import bz2
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.instructor.review.fold import Folder, MAX_LEN
from rtp_course.instructor.review.scan import scan_source
from rtp_course.instructor.review.worker import (LIMITS, Limits, fingerprint_files, scan_dirs,
                                                 scan_files, scan_impl)

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "import gc\n\n\ndef f():\n    return gc.get_objects()\n"     # introspection at line 5


@functools.lru_cache(maxsize=1)
def bomb_source():
    """36 bz2 streams of 40 MB of zeros each (1.4 GB, 1.8 KB compressed), compressed twice
    more, decoded by three nested codecs.decode(..., "bz2") in a function never called."""
    layer = bz2.compress(b"\0" * 40_000_000) * 36
    assert len(layer) <= MAX_LEN                     # what the folder used to accept
    for _ in range(2):
        layer = bz2.compress(layer)
    return ("import codecs\n\n\n"
            "def _never_called():\n"
            f"    blob = {layer!r}\n"
            '    a = codecs.decode(codecs.decode(codecs.decode(blob, "bz2"), "bz2"), "bz2")\n'
            '    b = codecs.decode(codecs.decode(codecs.decode(blob, "bz2_codec"), "bz2"), "bz2")\n'
            '    c = codecs.decode(codecs.decode(codecs.decode(blob, "BZ2"), "bz2"), "bz2")\n'
            "    return a, b, c\n")


def test_the_folder_decodes_only_with_codecs_that_keep_the_size():
    import ast
    folder = Folder([], lambda node: ast.unparse(node) if isinstance(node, ast.Attribute) else None)

    def fold(expr):
        return folder.strings(ast.parse(expr, mode="eval").body)
    packed = bz2.compress(b"f_back")
    assert fold(f'codecs.decode({packed!r}, "bz2")') is None
    assert fold(f'codecs.decode({bz2.compress(b"x" * 100_000)!r}, "bz2_codec")') is None
    assert fold('codecs.decode(b"x\\x9c+\\xc9\\x8fOK\\xcc\\x04\\x00\\x0c@\\x02\\xed", "zlib")') is None
    assert fold('codecs.decode("s_onpx", "rot13")') == {"f_back"}
    assert fold('codecs.decode("s_onpx", "ROT-13")') == {"f_back"}
    assert fold('codecs.decode(b"665f6261636b", "hex")') == {"f_back"}
    assert fold('codecs.decode(b"Zl9iYWNr\\n", "base64")') == {"f_back"}
    assert fold('codecs.encode("f_back", "latin-1")') == {"f_back"}
    assert fold('codecs.decode(b"f_back")') == {"f_back"}
    assert fold('codecs.encode("ab" * 1500, "hex")') is None             # longer than MAX_LEN


def test_a_compression_bomb_is_flagged_not_decompressed():
    source = bomb_source()
    assert len(source) < 2000
    start = time.perf_counter()
    flags = scan_source(source, "comm.py")
    assert time.perf_counter() - start < 5
    assert {(f.line, f.code) for f in flags} >= {(6, "obfuscation"), (7, "obfuscation"), (8, "obfuscation")}


def test_a_class_with_a_bomb_is_scanned_within_its_bounds(tmp_path):
    """The bomb's file is flagged (it decodes hidden data), in the same worker call as another
    student's files, which keep their normal flags."""
    bomber, other = tmp_path / "bomber", tmp_path / "other"
    bomber.mkdir(), other.mkdir()
    (bomber / "comm.py").write_text(bomb_source())
    (bomber / "rotation.py").write_text((ROOT / "solutions" / "rotation.py").read_text())
    (other / "comm.py").write_text(HOSTILE)
    (other / "groups.py").write_text((ROOT / "solutions" / "groups.py").read_text())
    start = time.perf_counter()
    flags = scan_dirs({"bomber": bomber, "other": other}, EXERCISES)
    assert time.perf_counter() - start < LIMITS.wall_s
    assert {(f.file, f.line, f.code) for f in flags["bomber"]} == {
        ("comm.py", 6, "obfuscation"), ("comm.py", 7, "obfuscation"), ("comm.py", 8, "obfuscation")}
    assert [(f.file, f.line, f.code) for f in flags["other"]] == [("comm.py", 5, "introspection")]
    assert scan_impl(other, ["comm", "groups"]) == flags["other"]


def slow_file():
    """Honest code padded to 2 MB: a few seconds of scan, more than the tests' limits allow."""
    honest = (ROOT / "solutions" / "flyweight.py").read_text()
    return honest * (2_000_000 // len(honest))


def _three(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "comm.py").write_text(HOSTILE)
    (tmp_path / "a" / "flyweight.py").write_text(slow_file())
    (tmp_path / "a" / "rotation.py").write_text(HOSTILE.replace("gc.get_objects()", "gc.get_referrers(f)"))
    (tmp_path / "b" / "comm.py").write_text(HOSTILE)
    return {"a": tmp_path / "a", "b": tmp_path / "b"}


def _check_the_others(flags, why):
    a = {f.file: f for f in flags["a"]}
    assert (a["comm.py"].line, a["comm.py"].code) == (5, "introspection")
    assert (a["rotation.py"].line, a["rotation.py"].code) == (5, "introspection")
    assert a["flyweight.py"].code == "scan-limit" and a["flyweight.py"].line == 1, a["flyweight.py"]
    assert why in a["flyweight.py"].reason and "read the file" in a["flyweight.py"].reason
    assert [(f.file, f.line, f.code) for f in flags["b"]] == [("comm.py", 5, "introspection")]


def test_a_worker_killed_for_cpu_time_mid_file_loses_no_other_result(tmp_path):
    """SIGXCPU ends the worker in flyweight.py; a new one scans the files left."""
    start = time.perf_counter()
    flags = scan_dirs(_three(tmp_path), ["comm", "flyweight", "rotation"], Limits(cpu_s=1))
    assert time.perf_counter() - start < 30
    _check_the_others(flags, "ran out of CPU time")


def test_a_worker_past_its_wall_time_is_killed_and_loses_no_other_result(tmp_path):
    start = time.perf_counter()
    flags = scan_dirs(_three(tmp_path), ["comm", "flyweight", "rotation"], Limits(wall_s=2.0))
    assert time.perf_counter() - start < 30
    _check_the_others(flags, "ran out of time (2 s of wall-clock time)")


def test_a_file_that_blows_the_memory_limit_loses_no_other_result(tmp_path):
    """The 2 MB file's syntax tree does not fit in 100 MB: that file is flagged, the worker
    (or a new one) scans the others."""
    flags = scan_dirs(_three(tmp_path), ["comm", "flyweight", "rotation"], Limits(memory=100 << 20))
    _check_the_others(flags, "memory")


def test_a_worker_that_cannot_start_flags_every_file(tmp_path):
    """No worker, no scan: every file says so rather than being scanned unbounded."""
    (tmp_path / "comm.py").write_text(HOSTILE)
    (tmp_path / "groups.py").write_text(HOSTILE)
    flags = scan_files([(str(tmp_path / "comm.py"), "comm.py"), (str(tmp_path / "groups.py"), "groups.py")],
                       Limits(memory=1 << 20))
    assert [[(f.file, f.code) for f in fl] for fl in flags] == [[("comm.py", "scan-limit")],
                                                               [("groups.py", "scan-limit")]]
    assert all("read the file" in fl[0].reason for fl in flags)


def test_no_file_no_worker():
    assert scan_files([]) == [] and scan_dirs({}, EXERCISES) == {}


def test_the_similarity_fingerprints_are_made_in_the_bounded_worker_too(tmp_path):
    """A file that runs the worker out of CPU time has no fingerprints (its scan flags it);
    the others have the grader's own, and no worker means none rather than unbounded work."""
    from rtp_course.instructor.review.similarity import fingerprints
    dirs = _three(tmp_path)
    honest = (ROOT / "solutions" / "comm.py").read_text()
    (dirs["a"] / "comm.py").write_text(honest)
    files = [(str(dirs["a"] / f"{ex}.py"), None) for ex in ("comm", "flyweight", "rotation")]
    made = fingerprint_files(files, Limits(cpu_s=1))
    assert made[1] is None, "the 2 MB file was fingerprinted in 1 CPU-second"
    assert made[0] == fingerprints(honest) and len(made[0]) > 20, made
    assert made[2] == fingerprints((dirs["a"] / "rotation.py").read_text()), made
    assert fingerprint_files(files[:1], Limits(memory=1 << 20)) == [None]


# ---- moved from tests/unit: they start the worker, or Python itself ---------------------------

def test_scan_impl_reads_the_exercise_files(tmp_path):
    (tmp_path / "comm.py").write_text("import torch\n")
    (tmp_path / "rotation.py").write_text("import torch\nimport gc\nx = gc.get_objects()\n")
    flags = scan_impl(tmp_path, ["comm", "rotation", "groups"])
    assert [(f.file, f.line, f.code) for f in flags] == [("rotation.py", 3, "introspection")]
    assert scan_impl(ROOT / "solutions", EXERCISES) == []


def test_fingerprints_are_the_same_in_every_process():
    """str's hash() is salted per process: the fingerprints must not use it."""
    from rtp_course.instructor.review.similarity import fingerprints
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from rtp_course.instructor.review.similarity import fingerprints\n"
            "print(sorted(fingerprints(open(%r).read()))[:20])"
            % (str(ROOT), str(ROOT / "solutions" / "comm.py")))
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=seed)).stdout for seed in ("1", "2")}
    assert len(runs) == 1 and runs.pop().strip() == str(sorted(fingerprints(
        (ROOT / "solutions" / "comm.py").read_text()))[:20])
