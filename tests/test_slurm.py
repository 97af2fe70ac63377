"""Slurm jobs from Python and the CLI, against a real single-node Slurm started for this session.

The time-limit job is submitted by the first Slurm test and checked by the last,
so its minute (Slurm's smallest limit, enforced every 30 s) overlaps the others.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from pathlib import Path

import pytest

from rtp_course.cluster import slurm
from slurm_fixture import ROOT, fake_course, real_course_command, slurm_cluster  # noqa: F401

# ---- no Slurm needed --------------------------------------------------------------------------


def test_without_slurm_the_message_gives_the_local_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
    ok, why = slurm.slurm_available()
    assert not ok and "Slurm was not found" in why
    with pytest.raises(slurm.SlurmNotFound) as e:
        slurm.submit_check(["comm"], gpus=0, world_size=2, impl="solutions", out_dir=tmp_path)
    assert "Slurm was not found" in str(e.value)
    assert "rtp-course check comm --world-size 2 --impl solutions" in str(e.value)
    args = slurm.add_submit_arguments(argparse.ArgumentParser()).parse_args(
        ["check", "comm", "--gpus", "2", "--out-dir", str(tmp_path)])
    assert slurm.cli_submit(args) == 2
    assert slurm.check_on_slurm(["comm"], gpus=0, world_size=2, out_dir=tmp_path) is None


@pytest.mark.parametrize("raw, state", [
    ("PENDING", "PENDING"), ("CONFIGURING", "PENDING"), ("RUNNING", "RUNNING"),
    ("COMPLETING", "RUNNING"), ("COMPLETED", "COMPLETED"), ("CANCELLED by 0", "CANCELLED"),
    ("CANCELLED+", "CANCELLED"), ("TIMEOUT", "TIMEOUT"), ("OUT_OF_MEMORY", "FAILED"),
    ("NODE_FAIL", "FAILED"), ("PREEMPTED", "CANCELLED"), ("", "PENDING")])
def test_slurm_states_fold_onto_six(raw, state):
    assert slurm.normalize_state(raw) == state


# ---- a real Slurm -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def timeout_job(slurm_cluster, fake_course, tmp_path_factory):
    """A job that outlives its 1-minute limit, submitted as early as possible."""
    return slurm.submit_check(["sleep"], gpus=0, world_size=1, time="00:01:00",
                              out_dir=tmp_path_factory.mktemp("timeout"), env={"RTP_COURSE": fake_course})


@pytest.fixture
def fake(fake_course, monkeypatch):
    monkeypatch.setenv("RTP_COURSE", fake_course)


def test_local_cluster_is_up(slurm_cluster, timeout_job):
    assert slurm_cluster["start_s"] < 60
    ok, why = slurm.slurm_available()
    assert ok, why
    assert timeout_job.state() in ("PENDING", "RUNNING")


def test_check_job_with_two_cpu_tasks_completes_and_report_is_read_back(slurm_cluster, fake, tmp_path):
    job = slurm.submit_check(["comm"], gpus=0, world_size=2, out_dir=tmp_path)
    assert job.wait(timeout=60, progress=False) == "COMPLETED"
    rep = job.report()
    assert rep["passed"] and rep["exercises"]["comm"]["checks"][0]["world_size"] == 2
    assert job.report_path == tmp_path / f"rtp-check-{job.job_id}.json"
    assert "tasks 2" in job.log_tail()  # the job had 2 tasks
    text = job.summary()
    assert "COMPLETED" in text and "checker: PASSED" in text and "comm: passed (1/1 checks)" in text


def test_failed_checks_end_failed_with_the_diagnosis(slurm_cluster, fake, tmp_path):
    job = slurm.submit_check(["bad"], gpus=0, world_size=[1, 2], out_dir=tmp_path)
    assert job.wait(timeout=60, progress=False) == "FAILED"
    text = job.summary()
    assert "some checks failed (exit code 1)" in text
    assert "x forward (fails at world size 1,2; world size 1, phase forward, rank 1):" in text
    assert "max abs error 0.5" in text and "hint: all-reduce the partial sums" in text


def test_crashing_job_ends_failed_with_exit_code_and_log_tail(slurm_cluster, fake, tmp_path):
    job = slurm.submit_check(["fail"], gpus=0, world_size=2, out_dir=tmp_path)
    assert job.wait(timeout=60, progress=False) == "FAILED"
    assert job.report() is None
    text = job.summary()
    assert "FAILED: exit code 3" in text
    assert "no report" in text and "Traceback: boom in the fake checker" in text


def test_cancelled_job_ends_cancelled(slurm_cluster, fake, tmp_path):
    job = slurm.submit_check(["sleep"], gpus=0, world_size=2, out_dir=tmp_path)
    job.wait(timeout=2, progress=False)
    job.cancel()
    assert job.wait(timeout=30, progress=False) == "CANCELLED"
    assert "CANCELLED: cancelled" in job.summary()


def test_queue_position_counts_pending_jobs_in_order(slurm_cluster, fake, tmp_path):
    # Each job wants all 4 CPUs of the node: at most one runs, the others queue in submit order.
    jobs = [slurm.submit_check(["sleep"], gpus=0, world_size=4, out_dir=tmp_path) for _ in range(3)]
    try:
        time.sleep(1.5)
        positions = [j.queue_position() for j in jobs]
        states = [j.state() for j in jobs]
        pending = [p for p, s in zip(positions, states) if s == "PENDING"]
        assert len(pending) >= 2 and pending == list(range(1, len(pending) + 1)), (states, positions)
        assert all(p is None for p, s in zip(positions, states) if s != "PENDING")
        assert "in the queue" in jobs[-1].summary()
    finally:
        for j in jobs:
            j.cancel()
    assert [j.wait(timeout=30, progress=False) for j in jobs] == ["CANCELLED"] * 3


def test_cli_submit_waits_and_returns_the_verdict(slurm_cluster, fake, tmp_path, capsys):
    parser = slurm.add_submit_arguments(argparse.ArgumentParser())
    assert slurm.cli_submit(parser.parse_args(
        ["check", "comm", "--gpus", "0", "--world-size", "2", "--out-dir", str(tmp_path)])) == 0
    assert "checker: PASSED" in capsys.readouterr().out
    assert slurm.cli_submit(parser.parse_args(
        ["check", "bad", "--gpus", "0", "--out-dir", str(tmp_path)])) == 1
    job_id = capsys.readouterr().out.split("submitted Slurm job ")[1].split(";")[0]
    assert slurm.cli_submit(parser.parse_args(["status", job_id])) == 0
    assert "some checks failed" in capsys.readouterr().out


def test_gpus_on_a_partition_without_gpus_is_one_sentence(slurm_cluster, fake, tmp_path, capsys):
    """The test cluster's nodes have no GPUs: sbatch would answer 'Invalid generic resource'."""
    parser = slurm.add_submit_arguments(argparse.ArgumentParser())
    assert slurm.cli_submit(parser.parse_args(
        ["check", "comm", "--gpus", "4", "--out-dir", str(tmp_path)])) == 2
    err = capsys.readouterr().err
    assert "has no GPUs" in err and "--gpus 0" in err, err
    assert "gres" not in err.lower() and "Traceback" not in err
    with pytest.raises(slurm.SlurmError, match="no partition 'nosuch'"):
        slurm.submit_check(["comm"], gpus=2, partition="nosuch", out_dir=tmp_path)


def test_bench_job_gets_its_output_dir(slurm_cluster, fake, tmp_path):
    job = slurm.submit_bench(gpus=0, out_dir=tmp_path)
    assert job.wait(timeout=60, progress=False) == "COMPLETED"
    assert (job.bench_dir / "bench.csv").read_text().endswith("rtp,2\n")
    assert "benchmark output" in job.summary()


PROBE = """
import os, torch, torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"probe rank {dist.get_rank()} of {dist.get_world_size()} sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""


def test_multinode_template_runs_torchrun_with_c10d(slurm_cluster, tmp_path):
    """train_multinode.sbatch on one node: srun -> torchrun (c10d) -> 2 gloo workers."""
    (tmp_path / "rtp_slurm_probe.py").write_text(PROBE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scratch = tmp_path / "tmp"   # the job's temp dir: torchrun's logs must not stay there
    scratch.mkdir()
    env = dict(os.environ, RTP_TRAIN_MODULE="rtp_slurm_probe", PYTHONPATH=str(tmp_path),
               RTP_PYTHON=sys.executable, RTP_NPROC_PER_NODE="2", RTP_PORT=str(port),
               TMPDIR=str(scratch))
    out = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2",
                          "--time=5", f"--output={tmp_path}/train-%j.out",
                          str(ROOT / "slurm" / "train_multinode.sbatch")],
                         env=env, capture_output=True, text=True, check=True).stdout
    job_id = out.strip().split(";")[0]
    job = slurm.Job(job_id, log=tmp_path / f"train-{job_id}.out")
    assert job.wait(timeout=120, progress=False) == "COMPLETED", job.summary()
    log = job.log_tail()
    assert f"rendezvous localhost:{port}" in log
    assert "probe rank 0 of 2 sum 3" in log and "probe rank 1 of 2 sum 3" in log
    assert not any(scratch.iterdir()), sorted(p.name for p in scratch.iterdir())


def test_real_checker_job_on_two_cpu_tasks(slurm_cluster, tmp_path, monkeypatch):
    """`rtp-course check comm --world-size 2 --impl solutions --json ...` as a Slurm job."""
    course = real_course_command()
    if course is None:
        pytest.skip("the rtp-course CLI is not installed (pip install -e .)")
    monkeypatch.setenv("RTP_COURSE", course)
    job = slurm.submit_check(["comm"], gpus=0, world_size=2, impl=ROOT / "solutions",
                             time="00:05:00", out_dir=tmp_path)
    state = job.wait(timeout=240, progress=False)
    assert state == "COMPLETED", job.summary()
    rep = job.report()
    assert rep["passed"] and "comm" in rep["exercises"], job.summary()
    assert {c["world_size"] for c in rep["exercises"]["comm"]["checks"]} == {2}


def test_doctor_job_on_two_cpu_tasks(slurm_cluster, tmp_path):
    """slurm/doctor.sbatch on the real cluster: every part of the stack, one line each."""
    course = real_course_command()
    if course is None:
        pytest.skip("the rtp-course CLI is not installed (pip install -e .)")
    env = dict(os.environ, RTP_COURSE=course)
    out = subprocess.run(["sbatch", "--parsable", "--ntasks=2", "--gpus-per-task=0", "--time=5",
                          f"--output={tmp_path}/doctor-%j.out", str(ROOT / "slurm" / "doctor.sbatch")],
                         env=env, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    job_id = out.strip().split(";")[0]
    job = slurm.Job(job_id, log=tmp_path / f"doctor-{job_id}.out")
    assert job.wait(timeout=240, progress=False) == "COMPLETED", job.summary()
    log = (tmp_path / f"doctor-{job_id}.out").read_text()
    for part in ("torch", "GPUs", "confined ranks", "reference", "benchmark"):
        assert re.search(rf"^  ok +{part} ", log, re.M), log
    assert "every part works" in log, log


@pytest.fixture
def venv_on_path(monkeypatch):
    """nbgrader's gradebook runs `alembic` from the PATH: this Python's scripts first."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _small_class(tmp_path, students):
    """A grading directory with one assignment graded by grade("comm") (3 points), one
    submission per student ({name: (old, new) edit of solutions/comm.py or None}) and a
    gradebook that knows them, as `nbgrader autograde` would have left it."""
    import nbformat
    from nbgrader.api import Gradebook
    course, a = tmp_path / "course", "03_tp_communication"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('grade("comm")', metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "comm-code", "points": 3}})]
    (course / "source" / a).mkdir(parents=True)
    nbformat.write(nb, course / "source" / a / f"{a}.ipynb")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        gb.add_assignment(a)
        gb.add_notebook(a, a)
        gb.add_grade_cell("comm-code", a, a, max_score=3, cell_type="code")
        for student, edit in students.items():
            impl = course / "submitted" / student / a / "rtp_course"
            shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
            if edit:
                text = (impl / "comm.py").read_text()
                assert edit[0] in text
                (impl / "comm.py").write_text(text.replace(edit[0], edit[1], 1))
            gb.add_student(student)
            gb.add_submission(a, student)
    return course, a


def _gradebook_scores(course, a, students):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        return {s: gb.find_grade("comm-code", a, a, s).auto_score for s in students}


@pytest.mark.slow   # a class graded twice, on the cluster and locally: about 1 minute alone
def test_class_graded_as_a_slurm_array_matches_local_grading(slurm_cluster, tmp_path, venv_on_path):
    """One array task per student on the real cluster; the gradebook gets the same points as
    a local `rtp-course grade --jobs 2`, and each student's report."""
    if real_course_command() is None:
        pytest.skip("the rtp-course CLI is not installed (pip install -e .)")
    students = {"alice": None, "mallory": ("        dist.all_reduce(grad, group=ctx.group)", "        pass"),
                "sam": ("def duplicate(x, group=None):", "def duplicate(x, group=None:")}
    course, a = _small_class(tmp_path, students)
    env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course), RTP_COURSE=real_course_command())

    def grade(*args):
        r = subprocess.run([real_course_command(), "grade", a, "--world-size", "2", *args], env=env,
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert subprocess.run([real_course_command(), "seal"], env=env, capture_output=True).returncode == 0
    out = grade("--slurm", "--time", "00:05:00")
    assert "Slurm array" in out and "3 task(s)" in out, out
    on_slurm = _gradebook_scores(course, a, students)
    reports = {s: (course / "checks" / s / a / "comm.txt").read_text() for s in students}
    logs = sorted((course / "slurm" / a).glob("rtp-grade-*_*.out"))
    assert len(logs) == 3, logs
    assert on_slurm["alice"] == 3 and 0 < on_slurm["mallory"] < 3 and on_slurm["sam"] == 0, (on_slurm, out)
    assert "FAIL  [E2.1] comm.Duplication" in reports["mallory"], reports["mallory"]
    assert "comm.py does not parse" in reports["sam"], reports["sam"]

    out = grade("--jobs", "2")
    assert _gradebook_scores(course, a, students) == on_slurm, out
    assert "alice/03_tp_communication: comm 3/3" in out, out


def test_merge_reports_a_student_whose_task_left_nothing(slurm_cluster, tmp_path, capsys, venv_on_path):
    from rtp_course.instructor import grade_slurm
    course, a = _small_class(tmp_path, {"alice": None, "bob": None})
    (course / "checks" / "alice" / a).mkdir(parents=True)
    grade_slurm.points_file(course, "alice", a).write_text('{"comm-code": 3.0}')
    (course / "checks" / "alice" / a / "comm.txt").write_text("comm: 3 of 3 points for your code\n")
    got = grade_slurm.merge(course, a, ["alice", "bob"])
    assert got == {"alice": {"comm-code": 3.0}}
    out = capsys.readouterr().out
    assert "bob/03_tp_communication: no result from its array task" in out
    assert f"rtp-course grade {a} --student bob" in out
    assert _gradebook_scores(course, a, ["alice"]) == {"alice": 3.0}


# Last in the module: the job has been running since the first test, so what is left to
# wait is short.
def test_job_past_its_time_limit_ends_timeout(slurm_cluster, timeout_job):
    # Slurm rounds limits up to whole minutes and checks them every 30 s: 60 to 90 s after the start.
    assert timeout_job.wait(timeout=150, progress=False) == "TIMEOUT"
    text = timeout_job.summary()
    assert "TIMEOUT: reached its time limit (00:01:00)" in text
    assert "DUE TO TIME LIMIT" in text  # slurmstepd's line, from the log's tail
