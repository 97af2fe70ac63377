"""`rtp-course doctor` on CPU: every part of the stack one line, and a failing part says what
to do in one sentence."""
import io
import re

import pytest

from rtp_course.cli import doctor
from rtp_course.course import material
from rtp_course.runtime import devices


# That every part works on this CPU node: the proof script's dry run runs the doctor
# (tests/test_gpu_proof.py, test_the_dry_run_runs_the_doctor_with_every_part_ok).


class _Reached(Exception):
    pass


def test_the_probe_confines_through_the_checkers_entry_point(monkeypatch):
    """The doctor's probe called Landlock with a sandbox of its own (no namespaces, its own
    grants, the grader's environment and no limits), so it could pass where the checker's
    confined ranks fail. It now calls confinement.rank.confine(rank, job, impl_dir), the call
    worker.run_checks makes for a grading rank, with a grading rank's job, before anything
    else; the old probe has no such step (the monkeypatch below fails there, before any
    confinement touches this process)."""
    from rtp_course.confinement import rank as confinement
    calls = []
    monkeypatch.setattr(confinement, "confine",
                        lambda rank, job, impl_dir: calls.append((rank, job, impl_dir)) or "confined")
    assert doctor._confine_as_checker(1, "nccl", "/impl") == "confined"
    (rank, job, impl_dir), = calls
    assert (rank, impl_dir, job["backend"], job["confine"]) == (1, "/impl", "nccl", True)
    assert job["closed"] == material.closed_to_code_under_test() != []   # as a graded rank's

    def first_thing(rank, backend, impl_dir):
        raise _Reached((rank, backend, impl_dir))
    monkeypatch.setattr(doctor, "_confine_as_checker", first_thing)
    with pytest.raises(_Reached) as e:
        doctor._probe(0, 2, "gloo", "/impl")     # no group here: confinement comes first
    assert e.value.args[0] == (0, "gloo", "/impl")


def test_the_probes_ranks_get_the_checkers_namespaces(monkeypatch):
    from rtp_course.confinement import Isolation
    from rtp_course.runtime import launcher
    seen = {}

    def launch(fn, world_size, args=(), **kw):
        seen.update(kw, fn=fn, args=args)
        return [{"all_reduce": True, "p2p": True, "subgroup": True, "confinement": "x"}] * world_size
    monkeypatch.setattr(launcher, "launch", launch)
    doctor._ranks("gloo", 2)
    assert seen["fn"] is doctor._probe and isinstance(seen["isolation"], Isolation)


def test_a_launch_that_fails_once_is_tried_again_and_twice_is_named(monkeypatch):
    """A busy node broke the probe's connections once (rank 1 raised on the transport, in the
    Slurm doctor job beside the test suite): one more launch; a node that fails twice is
    reported with the exception's own line, not the traceback's header."""
    from rtp_course.runtime import launcher
    tries = []

    def flaky(fn, world_size, args=(), **kw):
        tries.append(1)
        if len(tries) == 1:
            raise launcher.RankFailed(1, "Traceback (most recent call last):\n  ...\n"
                                         "DistNetworkError: Connection reset by peer")
        return [{"all_reduce": True, "p2p": True, "subgroup": True, "confinement": "x"}] * world_size
    monkeypatch.setattr(launcher, "launch", flaky)
    assert doctor._ranks("gloo", 2).startswith("2 gloo ranks") and len(tries) == 2

    def broken(fn, world_size, args=(), **kw):
        raise launcher.RankFailed(1, "Traceback (most recent call last):\n  ...\n"
                                     "RuntimeError: gloo cannot bind")
    monkeypatch.setattr(launcher, "launch", broken)
    with pytest.raises(doctor.Failed, match="did not run, twice .*RuntimeError: gloo cannot bind"):
        doctor._ranks("gloo", 2)


def test_the_reference_run_holds_every_rotation_check(monkeypatch):
    """On a GPU the reference failed its own rotate_async check (a fresh communicator's first
    transfer blocks until the peer takes part); the doctor ran one check per exercise only."""
    from rtp_course.checker import engine
    from rtp_course.checker.registry import check_modules, load_checks
    seen = {}
    monkeypatch.setattr(engine, "run", lambda exercises, **kw: seen.update(kw) or [])
    doctor._reference([2], "gloo")
    rotation = {c.id for c in load_checks(check_modules(["rotation"], False)) if c.applies(2)}
    assert "rotation.rotate_async" in rotation and rotation <= set(seen["only"])
    from rtp_course.course import EXERCISES
    assert {o.split(".")[0] for o in seen["only"]} == set(EXERCISES)   # one run, every exercise


def test_nccl_without_gpus_fails_with_what_to_ask_for(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    out = io.StringIO()
    assert doctor.run(backend="nccl", out=out) == 1
    line = next(l for l in out.getvalue().splitlines() if l.startswith("  FAIL"))
    assert "this process sees 1" in line and "--gpus-per-task=1" in line, line


@pytest.mark.parametrize("version", ["2.7.0+cu126", "2.10.0", "2.14.0", "3.0.0"])
def test_a_torch_outside_the_range_is_named_with_the_fix(monkeypatch, version, capsys):
    """The course requires torch 2.11 to 2.13, the releases it has run on. The doctor passed
    2.6 to 2.8 (2.7.0 hangs at
    random in NCCL's non-blocking mode) and said nothing of a newer torch; `info` said nothing."""
    import torch
    from rtp_course import cli
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(doctor.Failed, match=r"outside the course's range, 2\.11 to 2\.13: "
                                            r"install one of those \(pip install 'torch>=2\.11,<2\.14'"):
        doctor._torch()
    assert cli.main(["info"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("torch "))
    assert "OUTSIDE THE COURSE'S RANGE" in line and version in line


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.12.1", "2.13.0+cpu"])
def test_a_torch_inside_the_range_passes(monkeypatch, version):
    import torch
    monkeypatch.setattr(torch, "__version__", version)
    assert doctor._torch().startswith(version)


def test_the_range_is_the_one_pyproject_admits():
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    low, high = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', text).groups()
    (lo, hi) = doctor.TORCH_RANGE
    assert low == f"{lo[0]}.{lo[1]}" and high == f"{hi[0]}.{hi[1] + 1}"
