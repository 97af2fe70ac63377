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


def test_a_check_job_runs_every_world_size_it_can_and_says_which_it_leaves_out():
    """`submit check --gpus 0` ran world size 2 alone: a bug only 3 ranks show passed."""
    assert slurm.check_sizes(0) == [1, 2, 3, 4] and slurm.check_sizes(2) == [1, 2]
    assert slurm.check_sizes(4, 2) == [2]
    assert slurm.left_out([1, 2, 3, 4]) == ""
    said = slurm.left_out([1, 2])
    assert said.startswith("world sizes 3, 4 not checked") and "--gpus 4" in said


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


ECHO_ARGS = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"


def run_template(tmp_path, template, env, fakes=()) -> subprocess.CompletedProcess:
    """A template run by bash as a job's batch step would run it, with `fakes` (srun,
    scontrol...) on the PATH printing their arguments, and RTP_COURSE printing its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {"srun": 'echo "srun $*"', "scontrol": "echo node1", **dict(fakes)}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "course.py").write_text(ECHO_ARGS)        # the template splits RTP_COURSE on spaces
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path),
            "RTP_COURSE": f"{sys.executable} {bin_dir / 'course.py'}", **env}
    return subprocess.run(["bash", str(ROOT / template)], env=full, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def course_call(r: subprocess.CompletedProcess) -> dict:
    import json
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("tasks, sizes", [("8", ["1", "2", "3", "4"]), ("2", ["1", "2"]),
                                          ("1", ["1"])])
def test_a_check_job_runs_the_course_sizes_its_gpus_hold(tmp_path, tasks, sizes):
    """slurm/check.sbatch on 8 GPUs ran `--world-size 8` (no check runs there: exit 2); it runs
    the course table's world sizes that fit its tasks, one per GPU, on NCCL."""
    argv = course_call(run_template(tmp_path, "slurm/check.sbatch", {
        "SLURM_NTASKS": tasks, "SLURM_GPUS_PER_TASK": "1", "SLURM_JOB_ID": "7"}))["argv"]
    i = argv.index("--world-size")
    assert argv[i + 1:i + 1 + len(sizes) + 1] == [*sizes, "--json"], argv
    assert argv[argv.index("--backend") + 1] == "nccl"


def test_world_sizes_asked_for_win_and_the_template_follows_the_course_table(tmp_path):
    import re
    from rtp_course.course import COURSE
    argv = course_call(run_template(tmp_path, "slurm/check.sbatch", {
        "SLURM_NTASKS": "8", "RTP_WORLD_SIZES": "2 4"}))["argv"]
    assert argv[argv.index("--world-size"):][:3] == ["--world-size", "2", "4"]
    line = re.search(r"^course_sizes=\((.*)\)$", (ROOT / "slurm" / "check.sbatch").read_text(), re.M)
    assert [int(n) for n in line[1].split()] == sorted({n for ex in COURSE for n in ex.world_sizes})


def test_a_check_submitted_for_8_gpus_runs_the_course_sizes(monkeypatch, tmp_path):
    """`rtp-course submit check --gpus 8` asked the job for world size 8 (exit 2)."""
    seen = {}
    monkeypatch.setattr(slurm, "_require_slurm", lambda command: None)
    monkeypatch.setattr(slurm, "sbatch", lambda template, args, **kw: seen.update(kw) or "42")
    slurm.submit_check(["comm"], gpus=8, impl=ROOT / "solutions", out_dir=tmp_path)
    assert seen["env"]["RTP_WORLD_SIZES"] == "1 2 3 4" and "--ntasks=8" in seen["flags"]


def test_multinode_srun_gets_the_cpus_and_a_port_of_the_job(tmp_path):
    """Slurm 22.05+ does not hand sbatch's --cpus-per-task to srun: the template passes it.
    Two jobs on one head node took torchrun's 29500 both; the port now follows the job id."""
    r = run_template(tmp_path, "slurm/train_multinode.sbatch", {
        "SLURM_JOB_ID": "12345", "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_PER_TASK": "16", "SLURM_GPUS_ON_NODE": "4"})
    assert r.returncode == 0, r.stdout + r.stderr
    srun = r.stdout[r.stdout.index("srun "):]        # its arguments, the bash -c script's lines too
    assert "--cpus-per-task=16" in srun.split(), srun
    assert "--rdzv_endpoint node1:32345" in srun and "29500" not in srun, srun


def test_a_gpu_bench_job_measures_the_gpu_preset(tmp_path):
    """On GPUs the bench job ran the few-million-parameter fp32 default (kernel-launch latency)."""
    bench_env = {"SLURM_NTASKS": "4", "SLURM_JOB_ID": "5", "RTP_BENCH_OUT": str(tmp_path / "b")}
    argv = course_call(run_template(tmp_path, "slurm/bench.sbatch",
                                    {**bench_env, "SLURM_GPUS_PER_TASK": "1"}))["argv"]
    assert argv[argv.index("--preset") + 1] == "gpu" and "nccl" in argv
    argv = course_call(run_template(tmp_path, "slurm/bench.sbatch",
                                    {**bench_env, "SLURM_GPUS_PER_TASK": "0"}))["argv"]
    assert "--preset" not in argv


@pytest.mark.parametrize("template", ["slurm/check.sbatch", "slurm/bench.sbatch",
                                      "slurm/doctor.sbatch", "slurm/train_multinode.sbatch",
                                      "rtp_course/instructor/grade.sbatch"])
def test_every_template_asks_for_memory(template):
    """Without a memory request a job gets the partition's default, often a few hundred MB
    per CPU on clusters that set none: a GPU rank's CUDA context alone needs more."""
    import re
    text = (ROOT / template).read_text()
    assert re.search(r"^#SBATCH --mem(-per-cpu|-per-gpu)?=\d+[KMGT]?$", text, re.M), template


@pytest.mark.parametrize("gpus, backend", [("4", "nccl"), ("0", None)])
def test_a_grading_task_with_gpus_grades_on_nccl(tmp_path, gpus, backend):
    """grade.sbatch with --gpus-per-task=4 reserved GPUs and graded on CPU (gloo): a task
    with GPUs now grades on them, with NCCL (grading.grading_backend reads the variable)."""
    env = course_call(run_template(tmp_path, "rtp_course/instructor/grade.sbatch", {
        "SLURM_GPUS_PER_TASK": gpus, "SLURM_ARRAY_TASK_ID": "0", "RTP_STUDENTS": "students.txt",
        "RTP_ASSIGNMENT": "05_ring_rotation"}))["env"]
    assert env.get("RTP_COURSE_GRADE_BACKEND") == backend


def test_grade_slurm_gpus_submits_nccl_grading_at_the_sizes_they_hold(monkeypatch, tmp_path):
    """`rtp-course grade --slurm --gpus 4`: the array's tasks grade on NCCL at 1 to 4 ranks; a
    world size the GPUs cannot hold is refused before anything is submitted."""
    from rtp_course.cli import build_parser
    from rtp_course.instructor import grade_slurm
    seen = {}
    monkeypatch.setattr(grade_slurm, "sbatch", lambda template, **kw: seen.update(kw) or "9")
    grade_slurm.submit(tmp_path, "05_ring_rotation", ["alice"], gpus=4)
    assert seen["env"]["RTP_COURSE_GRADE_BACKEND"] == "nccl"
    assert seen["env"]["RTP_WORLD_SIZES"] == "1 2 3 4" and "--gpus-per-task=4" in seen["flags"]
    seen.clear()
    grade_slurm.submit(tmp_path, "05_ring_rotation", ["alice"], gpus=0)
    assert "RTP_COURSE_GRADE_BACKEND" not in seen["env"]
    with pytest.raises(ValueError, match="world size 4 needs 4 GPUs"):
        grade_slurm.submit(tmp_path, "05_ring_rotation", ["alice"], gpus=2, world_sizes=[2, 4])
    grade = build_parser(["grade"])._subparsers._group_actions[0].choices["grade"]
    assert "NCCL" in next(a.help for a in grade._actions if "--gpus" in a.option_strings)


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
    assert "x forward (fails at world size 1,2; world size 2, phase forward, rank 1):" in text
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
    scratch = tmp_path / "tmp"   # the job's temp dir: torchrun's logs must not stay there
    scratch.mkdir()
    # The port is free when chosen, and may be taken before torchrun binds it (the suite's
    # ranks open stores meanwhile): a rendezvous that could not reach its store runs again.
    for attempt in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, RTP_TRAIN_MODULE="rtp_slurm_probe", PYTHONPATH=str(tmp_path),
                   RTP_PYTHON=sys.executable, RTP_NPROC_PER_NODE="2", RTP_PORT=str(port),
                   TMPDIR=str(scratch))
        out = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0",
                              "--cpus-per-task=2", "--time=5", f"--output={tmp_path}/train-%j.out",
                              str(ROOT / "slurm" / "train_multinode.sbatch")],
                             env=env, capture_output=True, text=True, check=True).stdout
        job_id = out.strip().split(";")[0]
        job = slurm.Job(job_id, log=tmp_path / f"train-{job_id}.out")
        state = job.wait(timeout=120, progress=False)
        if state == "COMPLETED" or "connection to the C10d store has failed" not in job.log_tail():
            break
    assert state == "COMPLETED", job.summary()
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


def test_submit_check_on_cpu_gives_the_verdict_of_check(slurm_cluster, tmp_path, monkeypatch, capsys):
    """`rtp-course submit check rotation --gpus 0` on a wrong direction that only 3 ranks show:
    it ran world size 2 alone and passed, where `rtp-course check` fails it."""
    course = real_course_command()
    if course is None:
        pytest.skip("the rtp-course CLI is not installed (pip install -e .)")
    from wrongs import impl_with
    impl = impl_with(ROOT / "tests" / "wrong" / "rotation" / "swapped_directions.py", tmp_path / "impl")
    monkeypatch.setenv("RTP_COURSE", course)
    args = argparse.Namespace(what="check", names=["rotation"], gpus=0, world_size=None,
                              impl=str(impl), time="00:05:00", timeout=None, partition=None,
                              account=None, qos=None, sbatch=[], out_dir=str(tmp_path),
                              setup=None, no_wait=False)
    assert slurm.cli_submit(args) == 1
    said = capsys.readouterr().out
    assert "checker: FAILED" in said and "x rotate (fails at world size 3" in said, said
    assert "not checked" not in said, said


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
    """A grading directory with one assignment graded by grade("comm") (the table's 10 points), one
    submission per student ({name: (old, new) edit of solutions/comm.py or None}) and a
    gradebook that knows them, as `nbgrader autograde` would have left it."""
    import nbformat
    from nbgrader.api import Gradebook
    course, a = tmp_path / "course", "03_tp_communication"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('grade("comm")', metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "comm-code", "points": 10}})]
    (course / "source" / a).mkdir(parents=True)
    nbformat.write(nb, course / "source" / a / f"{a}.ipynb")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        gb.add_assignment(a)
        gb.add_notebook(a, a)
        gb.add_grade_cell("comm-code", a, a, max_score=10, cell_type="code")
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
    """One array task per student on the real cluster (a CPU per rank: two tasks side by side
    at world size 2); the gradebook gets each student's report and the points a local
    `rtp-course grade` gives."""
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
    assert on_slurm["alice"] == 10 and 0 < on_slurm["mallory"] < 10 and on_slurm["sam"] == 0, (on_slurm, out)
    assert "FAIL  [E2.1] comm.Duplication" in reports["mallory"], reports["mallory"]
    assert "comm.py does not parse" in reports["sam"], reports["sam"]

    # Locally, the student whose points are neither all nor none (the others' are asserted
    # above): the same points as the array task gave
    out = grade("--student", "mallory")
    assert _gradebook_scores(course, a, students) == on_slurm, out
    assert f"mallory/03_tp_communication: comm {on_slurm['mallory']:g}/10" in out, out


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
