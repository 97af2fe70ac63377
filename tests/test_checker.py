"""The checker engine and CLI: verdicts, exit codes, reports, isolation."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtp_course.course import COURSE, EXERCISES
from rtp_course.checker import engine, report

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "rtp_course.cli"]


def cli(*args, **kw):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, cwd=ROOT, **kw)


def test_reference_solutions_pass_every_public_and_hidden_check_on_1_to_4_ranks(tmp_path):
    """...under NCCL's rules on CPU (RTP_COURSE_EMULATE=nccl): every tensor made without a
    device treated as a GPU run would (rule 'Device'), the checks' own included, one handle per
    batch, contiguous tensors only: neither the reference nor the harness breaks one. At
    world size 2 the nbgrader cycle grades the reference so (alice's full marks,
    test_nbgrader_cycle.py); here the other sizes of each exercise."""
    out = tmp_path / "r.json"
    from test_nbgrader_cycle import WORLD_SIZES as CYCLE_SIZES
    here = [n for n in engine.DEFAULT_WORLD_SIZES if n not in CYCLE_SIZES]
    p = cli("check", "--impl", "solutions", "--hidden", "--json", str(out), "--world-size",
            *map(str, here), env={**os.environ, "RTP_COURSE_EMULATE": "nccl"})
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(out.read_text())
    assert rep["passed"] is True
    assert set(rep["exercises"]) == set(EXERCISES)
    sizes = {c["world_size"] for ex in rep["exercises"].values() for c in ex["checks"]}
    assert sizes == set(here) and sizes | set(CYCLE_SIZES) == {1, 2, 3, 4}
    assert len(rep["exercises"]["comm"]["checks"]) >= 20


NO_DYNAMO = """
import sys as _sys
if "torch._dynamo" in _sys.modules:
    raise ImportError("the ranks' forkserver preloaded torch._dynamo")
class _NoDynamo:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("torch._dynamo"):
            raise ImportError(f"a rank of an exercise that does not train imported {name}")
_sys.meta_path.insert(0, _NoDynamo())
"""


@pytest.mark.extended     # a start-up cost, not a verdict: every light exercise, hidden checks
def test_exercises_that_do_not_train_never_import_what_only_an_optimizer_needs(tmp_path):
    """For them (`trains=False` in the course table) the ranks' forkserver does not preload
    dynamo (1.3 s off a cold check); a rank that imported it would pay that time itself."""
    light = [e.module for e in COURSE if not e.trains]
    assert light
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    for module in light:
        with open(impl / f"{module}.py", "a") as fh:
            fh.write(NO_DYNAMO)
    p = cli("check", *light, "--impl", str(impl), "--hidden",
            env=dict(os.environ, RTP_COURSE_WARM="0"))
    assert p.returncode == 0, p.stdout + p.stderr


def test_stubs_report_not_implemented_without_a_traceback(tmp_path):
    out = tmp_path / "r.json"
    p = cli("check", "comm", "--world-size", "2", "--json", str(out))
    assert p.returncode == 1
    assert "not implemented yet" in p.stdout
    assert "Traceback" not in p.stdout + p.stderr
    rep = json.loads(out.read_text())
    assert {c["status"] for c in rep["exercises"]["comm"]["checks"]} == {"notimpl"}


def test_the_verdict_process_never_imports_the_code_under_test():
    code = ("import sys\n"
            "from rtp_course.checker import engine\n"
            "if __name__ == '__main__':\n"
            "    results = engine.run(['comm'], impl='solutions', world_sizes=[2])\n"
            "    assert results and all(r.passed for r in results)\n"
            "    print(sorted(m for m in sys.modules if m.startswith(('rtp_impl', 'solutions'))))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_a_copy_placed_anywhere_is_checked(tmp_path):
    shutil.copytree(ROOT / "solutions", tmp_path / "submission")
    results = engine.run(["comm"], impl=str(tmp_path / "submission"), world_sizes=[3])
    assert results and all(r.passed for r in results)


@pytest.mark.parametrize("args, words", [
    (["check", "comm", "--impl", "/nonexistent"], "not a directory"),
    (["check", "nonsense"], "unknown exercise"),
])
def test_bad_input_gets_a_clear_error(args, words):
    p = cli(*args)
    assert p.returncode == 2
    assert words in p.stderr
    assert "Traceback" not in p.stderr


def test_two_checks_at_once_do_not_collide(tmp_path):
    procs = [subprocess.Popen(CLI + ["check", "comm", "--impl", "solutions", "--world-size", "2",
                                     "--json", str(tmp_path / f"{i}.json")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(2)]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    for i in range(2):
        assert json.loads((tmp_path / f"{i}.json").read_text())["passed"]


def test_report_text_names_phase_rank_tensor_error_and_hint(tmp_path):
    from wrongs import WRONG, impl_with
    impl = impl_with(WRONG / "comm" / "dup_no_allreduce.py", tmp_path / "impl")
    results = engine.run(["comm"], impl=str(impl), world_sizes=[2], only=["Duplication"])
    text = report.text(results)
    bad = [r for r in results if not r.passed][0]
    assert (bad.phase, bad.rank, bad.world_size) == ("backward", 0, 2)
    assert bad.key == "backward/grad input"
    for words in ("world size 2", "phase backward", "rank 0", "max abs error", "hint:"):
        assert words in text
    assert report.to_json(results)["exercises"]["comm"]["passed"] is False


def test_score_gives_partial_credit(tmp_path):
    from rtp_course.checker import CheckReport
    from wrongs import WRONG, impl_with
    impl = impl_with(WRONG / "comm" / "dup_no_allreduce.py", tmp_path / "impl")
    rep = CheckReport(engine.run(["comm"], impl=str(impl), world_sizes=[2]))
    assert 0 < rep.score("comm") < 1


def test_code_under_test_cannot_import_the_reference_solutions(tmp_path):
    sub = tmp_path / "submission"
    shutil.copytree(ROOT / "solutions", sub)
    (sub / "comm.py").write_text("from solutions.comm import *  # noqa\n")
    results = engine.run(["comm"], impl=str(sub), world_sizes=[2], only=["Duplication"])
    assert results and not results[0].passed
    assert "may not import the reference solutions" in results[0].message


@pytest.mark.parametrize("kw, says", [
    (dict(only=["NoSuchCheck"]), "no check named 'NoSuchCheck' in comm; its checks are Duplication"),
    (dict(timeout=-1), "positive numbers of seconds"),
    (dict(timeout_scale=0), "positive numbers of seconds"),
])
def test_bad_check_arguments_are_refused_before_anything_runs(kw, says):
    with pytest.raises(ValueError, match=says):
        engine.run(["comm"], impl=str(ROOT / "solutions"), world_sizes=[2], **kw)


@pytest.mark.extended     # a way of launching, not a verdict
def test_a_script_without_a_main_guard_is_checked_once(tmp_path):
    """multiprocessing runs the parent's main script again in each new process: the ranks
    must not, or a plain two-line script checks itself in every rank."""
    script = tmp_path / "check_me.py"
    script.write_text("from rtp_course.checker import check\n"
                      f"check('comm', impl={str(ROOT / 'solutions')!r}, world_sizes=[2])\n"
                      "print('the script ran')\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "RTP_COURSE_WARM": "0"})
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Traceback" not in out, out[-3000:]
    assert out.count("the script ran") == 1 and "4 / 4" in out, out[-3000:]


@pytest.mark.extended     # a way of launching, not a verdict
def test_a_function_defined_in_the_main_script_can_still_be_launched(tmp_path):
    script = tmp_path / "launch_me.py"
    script.write_text("import torch.distributed as dist\n"
                      "from rtp_course.runtime.launcher import launch\n"
                      "def rank_and_size(rank, world_size):\n"
                      "    return dist.get_rank(), world_size\n"
                      "if __name__ == '__main__':\n"
                      "    print(launch(rank_and_size, 2))\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "[(0, 2), (1, 2)]" in r.stdout, (r.stdout + r.stderr)[-3000:]
