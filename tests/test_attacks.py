"""Hostile submissions: the grader's verdict cannot be forged, read around or outlived.

Each attack is the reference solution with a few hostile lines added (so that,
where the attack is held, the checks still pass on the honest part). The threat
model is in docs/INSTRUCTORS.md.
"""
import hashlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import rtp_course
from rtp_course.checker import engine, report
from rtp_course.runtime import reaper, sandbox
from rtp_course.runtime.launcher import RankFailed, launch
from processes import running

ROOT = Path(__file__).resolve().parents[1]
CONFINED = sandbox.abi_version() >= 1
needs_landlock = pytest.mark.skipif(not CONFINED, reason="this kernel offers no Landlock")


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


def run(impl, world_sizes=(2,), only=("Duplication", "AllReduce"), **kw):
    results = engine.run(["comm"], impl=str(impl), world_sizes=world_sizes, only=list(only), **kw)
    return results, report.text(results)


FORWARD = "    def forward(ctx, x, group=None):\n"     # Duplication.forward, the first in comm.py


def at_forward(code):
    return {"comm": [(FORWARD, FORWARD + "".join(f"        {line}\n" for line in code.splitlines()))]}


def at_import(code):
    return {"comm": [("import torch\n", "import torch\n" + code + "\n")]}


def own_run_dirs():
    """Temporary run directories of this process on disk (less multiprocessing's own, `rtp-mp-`,
    which holds the live forkserver's socket and goes when this process ends)."""
    import tempfile
    return sorted(p for p in Path(tempfile.gettempdir()).glob(f"rtp-*-o{os.getpid()}-*")
                  if not p.name.startswith("rtp-mp-"))


def own_leftovers():
    return [p.name for p in own_run_dirs()]


@pytest.fixture(autouse=True)
def _no_leftovers_before():
    """Each test starts without run directories of this process (earlier tests' are not ours)."""
    for p in own_run_dirs():
        shutil.rmtree(p, ignore_errors=True)


# ---- reading what it must not ----------------------------------------------------------------

@needs_landlock
def test_cannot_read_solutions_hidden_checks_or_the_gradebook(tmp_path):
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
def test_cannot_import_the_solutions_by_path_in_a_child_process(tmp_path):
    probe = ("import subprocess as _sp\n"
             f"_r = _sp.run(['cat', {str(ROOT / 'solutions' / 'comm.py')!r}], capture_output=True)\n"
             "if _r.returncode == 0:\n"
             "    raise RuntimeError('LEAKED through a child process')")
    results, text = run(hostile(tmp_path, at_forward(probe)), only=("Duplication",))
    assert "LEAKED" not in text and all(r.passed for r in results), text


# ---- forging the verdict from inside the worker ------------------------------------------------

ASK_THE_CHECKS = """import gc as _gc
from rtp_course.checker.registry import Check as _Check
_checks = [o for o in _gc.get_objects() if isinstance(o, _Check)]
if not any(c.hidden for c in _checks):
    raise RuntimeError('FOUND NO HIDDEN CHECK')
for _c in _checks:
    for _name in ('expected', 'comm_rules'):
        try:
            getattr(_c, _name)(2)
        except RuntimeError as _e:
            if 'parent process only' not in str(_e):
                raise
        else:
            raise RuntimeError('ANSWERED ' + _c.id + '.' + _name)
_left = [f for f in _gc.get_objects() if type(f).__name__ == 'function'
         and f.__code__.co_name in ('expected', 'comm_rules')
         and 'hidden' in f.__code__.co_filename]
if _left:
    raise RuntimeError('KEPT ' + repr(_left))"""


def test_a_check_object_found_in_the_worker_does_not_give_its_answer(tmp_path):
    """Every check object is reachable from code under test (gc); none computes expected values
    or rules there, and no function of a hidden check's parent side is left in memory."""
    results, text = run(hostile(tmp_path, at_forward(ASK_THE_CHECKS)),
                        only=("Duplication", "Duplication_float32"), hidden=True)
    assert len(results) == 2 and all(r.passed for r in results), text


FORGE = """import sys as _sys
from rtp_course.checker import worker as _worker
_record = _worker.Ctx.record
def _forged(ctx, key, tensor):
    check = _sys._getframe(1).f_locals['self']          # the check whose run() records
    try:
        tensor = check.expected(ctx.world_size)[ctx.rank][key]
    except Exception:
        pass
    _record(ctx, key, tensor)
_worker.Ctx.record = _forged"""


def test_records_forged_with_the_checks_own_answer_still_fail(tmp_path):
    """Duplication's backward forgets its all-reduce, and the submission replaces every record
    by the check's answer: there is no answer to take, so the bug fails as it should."""
    impl = hostile(tmp_path, {"comm": [("import torch\n", "import torch\n" + FORGE + "\n"),
                                        ("        dist.all_reduce(grad, group=ctx.group)\n", "")]})
    results, text = run(impl, only=("Duplication", "Duplication_float32"), hidden=True)
    assert len(results) == 2 and not any(r.passed for r in results), text
    assert all("backward/grad input" in r.message for r in results), text


# ---- changing what grades later submissions ---------------------------------------------------

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_landlock
def test_cannot_write_the_installation_the_gradebook_or_outside_its_run(tmp_path):
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


# ---- results are data, never code ------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_pickle_in_a_result_file_is_not_executed(tmp_path):
    from attack_targets import Bomb
    marker = tmp_path / "pwned"
    path = tmp_path / "result.comm.Duplication.0.pt"
    path.write_bytes(pickle.dumps({"status": "ok", "records": Bomb(marker)}))
    outcome = engine._load_outcome(path, 0)
    assert outcome["status"] == "error" and "not a result the checker can judge" in outcome["message"]
    torch.save({"status": "ok", "records": Bomb(marker)}, path)
    assert engine._load_outcome(path, 0)["status"] == "error"
    assert not marker.exists()


def test_a_launched_function_cannot_return_code(tmp_path):
    import attack_targets
    marker = tmp_path / "pwned"
    with pytest.raises(RankFailed, match="could not be read as plain data"):
        launch(attack_targets.return_bomb, 1, args=(str(marker),), timeout=60)
    assert not marker.exists()


# ---- faults of the code under test are grades, not crashes of the grader -----------------------

@pytest.mark.parametrize("call, says", [
    ("import sys\nsys.exit(0)", r"your code called sys\.exit\(0\) \(.*comm\.py"),
    ("import os\nos._exit(0)", r"your code called os\._exit\(0\) \(.*comm\.py"),
    ("import ctypes\nctypes.string_at(0)", r"SIGSEGV"),
])
def test_exits_and_crashes_are_reported_and_grading_goes_on(tmp_path, call, says):
    import re
    results, text = run(hostile(tmp_path, at_forward(call)))
    dup = [r for r in results if r.check == "Duplication"]
    assert dup and not dup[0].passed and re.search(says, dup[0].message), text
    assert [r.passed for r in results if r.check == "AllReduce"] == [True], text
    assert own_leftovers() == []


def test_an_import_that_hangs_is_detected_once(tmp_path):
    results, text = run(hostile(tmp_path, at_import("while True:\n    pass")), world_sizes=(1, 2))
    assert len(results) == 4 and not any(r.passed for r in results), text
    first = [r for r in results if r.world_size == 1]
    assert all("importing comm.py did not finish" in r.message for r in first), text
    later = [r for r in results if r.world_size == 2]
    assert all("not run: it did not finish at world size 1" in r.message for r in later), text


def test_a_check_that_hangs_is_not_run_again_at_larger_sizes(tmp_path):
    results, text = run(hostile(tmp_path, at_forward("import time\ntime.sleep(1000)")),
                        world_sizes=(2, 3), only=("Duplication",), timeout=3)
    assert [r.status for r in results] == ["deadlock", "deadlock"], text
    assert "not run: it did not finish at world size 2" in results[1].message


RECV_FROM_NEXT = """import torch.distributed as dist
dist.recv(x.new_empty(1), src=(dist.get_rank() + 1) % dist.get_world_size())"""


def test_a_plain_deadlock_is_stopped_when_every_rank_waits(tmp_path):
    """Both ranks wait in recv: stopped once nobody moves, not at the check's 30 s timeout."""
    results, text = run(hostile(tmp_path, at_forward(RECV_FROM_NEXT)), only=("Duplication",))
    assert results[0].status == "deadlock", text
    assert "no rank moved for 6 s, each waiting in a communication call" in results[0].message, text
    assert "rank 0 waited in recv called from comm.py" in results[0].message, text


ALL_COLLECTIVES_HANG = """import time as _time
import torch.distributed as _dist
for _name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor"):
    setattr(_dist, _name, lambda *a, **k: _time.sleep(1000))"""


def test_an_exercise_that_keeps_hanging_stops_at_its_hang_budget(tmp_path):
    """Every communication computes for ever (no call in progress): the first check is stopped at
    the exercise's hang budget (here 20 s x 0.2), the others are not run."""
    results, text = run(hostile(tmp_path, at_import(ALL_COLLECTIVES_HANG)), timeout_scale=0.2,
                        only=("Duplication", "AllReduce", "AllGather", "Split"))
    assert [r.status for r in results] == ["deadlock"] * 4, text
    assert sum("did not finish within 4 s" in r.message for r in results) == 1, text
    assert sum("hang budget" in r.message for r in results) == 3, text


# ---- nothing outlives the run ------------------------------------------------------------------

DETACH = """import subprocess, time
subprocess.Popen(['sleep', '{tag}1'], start_new_session=True)
subprocess.Popen(['sh', '-c', 'sleep {tag}2'], start_new_session=True, env={{}})
time.sleep(1000)"""


def _alive(tag: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout
    return [p for p in out.split() if running(p)]


def test_detached_grandchildren_end_with_the_run(tmp_path):
    tag = f"9{os.getpid() % 1000}.{time.time_ns() % 10000}"
    results, text = run(hostile(tmp_path, at_forward(DETACH.format(tag=tag))),
                        only=("Duplication",), timeout=4)
    assert results[0].status == "deadlock", text
    assert _alive(tag) == [] and own_leftovers() == []


def test_killing_the_checker_ends_its_workers_and_their_children(tmp_path):
    tag = f"8{os.getpid() % 1000}.{time.time_ns() % 10000}"
    impl = hostile(tmp_path, at_forward(DETACH.format(tag=tag)))
    checker = subprocess.Popen([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--impl",
                                str(impl), "--world-size", "2"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_alive(tag)) < 6 and time.monotonic() < deadline:   # 2 ranks x (sleep, sh + sleep)
        time.sleep(0.2)
    assert len(_alive(tag)) >= 6, "the hostile code never started"
    time.sleep(1.5)   # the guardian looks once a second: what it never saw may escape (documented)
    import tempfile
    # multiprocessing's own directory (the forkserver's socket) is one of the checker's run dirs
    assert list(Path(tempfile.gettempdir()).glob(f"rtp-mp-o{checker.pid}-*"))
    workers = reaper.descendants(checker.pid)
    checker.send_signal(signal.SIGKILL)
    checker.wait()
    deadline = time.monotonic() + 15
    while (_alive(tag) or any(running(p) for p in workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(tag) == [], "processes the code under test detached outlived the checker"
    assert not [p for p in workers if running(p)], "workers outlived the checker"
    assert not list(Path(tempfile.gettempdir()).glob(f"rtp-*-o{checker.pid}-*"))


# ---- an altered grader -------------------------------------------------------------------------

def test_grade_refuses_to_run_from_an_altered_grader(tmp_path):
    """A change to any file a verdict depends on (here a hidden check) after sealing stops grading."""
    hidden = tmp_path / "hidden"
    shutil.copytree(ROOT / "tests" / "hidden", hidden, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, RTP_COURSE_HIDDEN_CHECKS=str(hidden), RTP_COURSE_GRADING_DIR=str(tmp_path / "grading"))
    cli = [sys.executable, "-m", "rtp_course.cli"]
    missing = subprocess.run(cli + ["grade", "03_tp_communication"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "rtp-course seal" in missing.stderr, missing.stderr
    assert subprocess.run(cli + ["seal"], env=env, capture_output=True).returncode == 0
    with open(hidden / "comm.py", "a") as fh:
        fh.write("\n# changed\n")
    r = subprocess.run(cli + ["grade", "03_tp_communication"], env=env, capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "changed: hidden/comm.py" in r.stderr and "reinstall" in r.stderr, r.stderr
