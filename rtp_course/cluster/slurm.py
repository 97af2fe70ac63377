"""Submit checker and benchmark jobs to Slurm and follow them, from a notebook or the CLI.

    from rtp_course.cluster import slurm
    job = slurm.submit_check(["comm"], gpus=2)   # sbatch slurm/check.sbatch comm
    job.wait()                                   # a live line: PENDING (2nd in queue) -> RUNNING -> ...
    print(job.summary())                         # the checker's report, or why the job failed

Jobs are submitted with the same sbatch templates that shell users run
(slurm/*.sbatch), so there is one definition of a checker job. We talk to
Slurm through its own commands (sbatch --parsable, squeue, scontrol, sacct)
rather than a library: submitit pickles Python functions, writes its own sbatch
script and reads job states only from sacct, which many small clusters (and our
test cluster) run without.
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from rtp_course.cluster.job import (  # noqa: F401  (re-exported: the public API lives here)
    CANCELLED, COMPLETED, FAILED, FINAL_STATES, PENDING, RUNNING, TIMEOUT,
    Job, SlurmError, SlurmNotFound, format_report, normalize_state, run_slurm_command)

TEMPLATE_DIR = Path(os.environ.get("RTP_SLURM_DIR", Path(__file__).resolve().parents[2] / "slurm"))


def slurm_available():
    """(True, 'partitions: ...') when sbatch exists and the controller answers, else (False, why)."""
    if shutil.which("sbatch") is None:
        return False, "Slurm was not found on this machine (no `sbatch` command on PATH)"
    r = run_slurm_command("sinfo", "-h", "-o", "%P", timeout=15, check=False)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no answer"])[-1]
        return False, f"Slurm is installed but its controller does not answer ({last})"
    return True, "Slurm found; partitions: " + (", ".join(r.stdout.split()) or "none")


def local_check_command(exercises=(), world_size=2, impl=None):
    """The shell command that runs the same check on this machine (CPU, gloo)."""
    sizes = world_size if isinstance(world_size, (list, tuple)) else [world_size]
    cmd = ["rtp-course", "check", *exercises, "--world-size", *map(str, sizes)]
    return shlex.join(cmd + (["--impl", str(impl)] if impl else []))


def _require_slurm(local_command):
    ok, why = slurm_available()
    if not ok:
        raise SlurmNotFound(f"{why}.\nRun the same thing locally instead:\n    {local_command}")


def course_command():
    """How the job runs the course CLI: this Python's `rtp-course`, so the job sees this install."""
    if os.environ.get("RTP_COURSE"):
        return os.environ["RTP_COURSE"]
    beside = Path(sys.executable).parent / "rtp-course"
    found = str(beside) if beside.exists() else shutil.which("rtp-course")
    return found or f"{sys.executable} -m rtp_course.cli"


def _template(name):
    path = TEMPLATE_DIR / name
    if not path.exists():
        raise SlurmError(f"sbatch template {path} not found (set RTP_SLURM_DIR to the course's slurm/)")
    return path


def _job_environment(extra):
    """The submitter's environment for the job, less the SLURM_* of an allocation we may be in
    (a notebook inside a Slurm job): sbatch would pass them on and they clash with the new job's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    return {**env, "RTP_COURSE": course_command(), **extra}


def gpu_count(text: str) -> int:
    """argparse type of --gpus: a count, 0 for a CPU-only job."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GPUs: give 0 (CPU, gloo) or more")
    return n


class Unsatisfiable(SlurmError):
    """A request this cluster cannot run (GPUs it lacks, a partition it does not have)."""


def _partition_gres(partition) -> dict:
    """{partition: generic resources of its nodes} as sinfo lists them ({} if sinfo fails)."""
    cmd = ["sinfo", "-h", "-o", "%P|%G"] + ([f"--partition={partition}"] if partition else [])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in r.stdout.splitlines():
        name, _, gres = line.partition("|")
        found.setdefault(name.rstrip("*"), []).append(gres)
    return found


def require_gpus(gpus, partition) -> None:
    """Refuse before sbatch, in one sentence, a GPU job for a partition whose nodes have none
    (sbatch's own answer is 'Invalid generic resource (gres) specification')."""
    if not gpus:
        return
    found = _partition_gres(partition)
    if not found:
        if partition:
            raise Unsatisfiable(f"Slurm has no partition '{partition}' (sinfo lists none by that name); "
                             f"`sinfo -s` shows the partitions of this cluster")
        return
    with_gpus = [p for p, gres in found.items() if any("gpu" in g for g in gres)]
    if partition and partition not in with_gpus or not partition and not with_gpus:
        where = f"partition '{partition}'" if partition else "this cluster"
        other = f"; partitions with GPUs: {', '.join(with_gpus)} (--partition)" if with_gpus else ""
        raise Unsatisfiable(f"{where} has no GPUs (sinfo shows no 'gpu' resource on its nodes): "
                         f"submit with --gpus 0 to run the check on CPUs with gloo{other}")


def sbatch(template, args=(), *, flags=(), gpus=0, time_limit=None, partition=None,
           account=None, qos=None, extra_sbatch=(), env=None, what="the job") -> str:
    """Submit `template` (with its `args`) by sbatch and return the job id. `flags`: the job's
    shape (--ntasks, --array, --output ...); `env`: added to the submitter's environment.
    GPUs the partition lacks are refused first, in one sentence."""
    require_gpus(gpus, partition)
    cmd = ["sbatch", "--parsable", *flags]
    cmd += [f"--time={time_limit}"] if time_limit else []
    for flag, value in (("partition", partition), ("account", account), ("qos", qos)):
        cmd += [f"--{flag}={value}"] if value else []
    cmd += [*extra_sbatch, str(template), *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=_job_environment(env or {}),
                           timeout=60)
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"sbatch did not answer in 60 s: {shlex.join(cmd)}") from e
    if r.returncode != 0:
        raise SlurmError(f"sbatch refused {what}: {r.stderr.strip()}\n    command: {shlex.join(cmd)}")
    return r.stdout.strip().split(";")[0]  # "id" or "id;cluster"


def _task_flags(ntasks, gpus, log) -> list:
    return [f"--ntasks={ntasks}", f"--gpus-per-task={1 if gpus else 0}", f"--output={log}"]


def submit_check(exercises=(), gpus=1, world_size=None, impl=None, time="00:15:00",
                 partition=None, account=None, qos=None, extra_sbatch=(), out_dir="slurm-jobs",
                 timeout=None, setup=None, env=None):
    """Submit slurm/check.sbatch: `rtp-course check EXERCISES` on one node, return a Job.

    gpus: GPUs (= tasks) of the node; 0 runs the check on CPU with gloo.
    world_size: an int or a list of ints; each <= gpus on GPUs (default: the course's world
        sizes that fit the GPUs, as slurm/check.sbatch runs them; on CPU all of them, as
        `rtp-course check` runs them: one verdict everywhere).
    impl: the package directory with the exercise modules (default: $RTP_COURSE_IMPL, else
        your own rtp_course, as a local check() would use).
    setup: shell code the job runs first (module load ..., source venv/bin/activate).
    The log and the JSON report go to out_dir/rtp-check-<jobid>.{out,json}.
    """
    exercises = [exercises] if isinstance(exercises, str) else list(exercises)
    sizes = check_sizes(gpus, world_size)
    if gpus and max(sizes) > gpus:
        raise ValueError(f"world size {max(sizes)} needs {max(sizes)} GPUs; gpus={gpus}")
    _require_slurm(local_check_command(exercises, sizes, impl))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    job_env = {"RTP_REPORT": str(out / "rtp-check-%j.json"),
               "RTP_WORLD_SIZES": " ".join(map(str, sizes))}
    from rtp_course.course.impl import default_impl, resolve
    job_env["RTP_IMPL"] = str(resolve(impl or default_impl()))
    if timeout:
        job_env["RTP_TIMEOUT"] = str(timeout)
    if setup:
        job_env["RTP_SETUP"] = setup
    job_id = sbatch(_template("check.sbatch"), exercises,
                    flags=_task_flags(gpus or max(sizes), gpus, out / "rtp-check-%j.out"),
                    gpus=gpus, time_limit=time, partition=partition, account=account, qos=qos,
                    extra_sbatch=list(extra_sbatch), env={**job_env, **(env or {})})
    return Job(job_id, log=out / f"rtp-check-{job_id}.out", report_path=out / f"rtp-check-{job_id}.json")


def check_sizes(gpus: int, world_size=None) -> list:
    """The world sizes a check job runs: those asked for, else the course's that fit."""
    if world_size:
        return list(world_size) if isinstance(world_size, (list, tuple)) else [world_size]
    return _course_sizes(gpus or None)


def _course_sizes(gpus: int | None) -> list:
    """The course's world sizes that `gpus` GPUs hold (8 GPUs: 1 to 4, no check runs at 8;
    None: all of them, CPU ranks)."""
    from rtp_course.course import COURSE
    return sorted(n for n in {n for ex in COURSE for n in ex.world_sizes}
                  if gpus is None or n <= gpus)


def left_out(sizes) -> str:
    """What a job's world sizes leave out of the course's, said ('' when none)."""
    missing = [n for n in _course_sizes(None) if n not in sizes]
    if not missing:
        return ""
    return (f"world size{'s' * (len(missing) > 1)} {', '.join(map(str, missing))} not checked "
            f"by this job (it runs {', '.join(map(str, sizes))}): `rtp-course check` runs every "
            f"size on CPU; on GPUs, submit with --gpus {max(missing)}")


def submit_bench(gpus=4, time="00:30:00", partition=None, account=None, qos=None, bench_args=(),
                 extra_sbatch=(), out_dir="slurm-jobs", setup=None, env=None):
    """Submit slurm/bench.sbatch: `rtp-course bench` on `gpus` GPUs (2 CPU ranks if gpus=0)."""
    ranks = gpus or 2
    _require_slurm(shlex.join(["rtp-course", "bench", "--world-size", str(ranks), *bench_args]))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    job_env = {"RTP_BENCH_OUT": str(out / "rtp-bench-%j"), **({"RTP_SETUP": setup} if setup else {})}
    job_id = sbatch(_template("bench.sbatch"), list(bench_args),
                    flags=_task_flags(ranks, gpus, out / "rtp-bench-%j.out"),
                    gpus=gpus, time_limit=time, partition=partition, account=account, qos=qos,
                    extra_sbatch=list(extra_sbatch), env={**job_env, **(env or {})})
    return Job(job_id, log=out / f"rtp-bench-{job_id}.out", bench_dir=out / f"rtp-bench-{job_id}")

def check_on_slurm(exercises=(), gpus=1, wait=True, **kwargs):
    """For a notebook's check cell: submit, follow the job live, print its summary; return the Job.

    Without Slurm, prints why and the local command instead, and returns None."""
    try:
        job = submit_check(exercises, gpus=gpus, **kwargs)
    except SlurmNotFound as e:
        print(e)
        return None
    print(f"submitted Slurm job {job.job_id}; log: {job.log}")
    said = left_out(check_sizes(gpus, kwargs.get("world_size")))
    if said:
        print(said)
    if wait:
        job.wait()
        print(job.summary())
    return job


def add_submit_arguments(parser):
    """The arguments of `rtp-course submit`; the CLI then calls cli_submit(args).

    submit check [EXERCISE ...] [options] | submit bench [options] | submit status|cancel JOBID"""
    sub = parser.add_subparsers(dest="what", required=True, metavar="{check,bench,status,cancel}")
    check = sub.add_parser("check", help="checker job: rtp-course check EXERCISE ... on one node")
    check.add_argument("names", nargs="*", metavar="EXERCISE", help="exercises (none: all)")
    check.add_argument("--world-size", type=int, nargs="+", help="world sizes (default: --gpus)")
    check.add_argument("--impl", help="package directory with the exercise modules")
    check.add_argument("--timeout", type=float, help="per-check timeout in seconds")
    bench = sub.add_parser("bench", help="benchmark job: rtp-course bench on one node")
    bench.add_argument("names", nargs="*", metavar="BENCH_ARG", help="extra arguments (after --)")
    for p, limit in ((check, "00:15:00"), (bench, "00:30:00")):
        p.add_argument("--gpus", type=gpu_count, default=1, help="GPUs of one node (0: CPU with gloo)")
        p.add_argument("--time", default=limit, help=f"time limit, HH:MM:SS (default {limit})")
        p.add_argument("--partition", help="Slurm partition")
        p.add_argument("--account", help="Slurm account")
        p.add_argument("--qos", help="Slurm QOS")
        p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                       help="extra sbatch option, repeatable, e.g. --sbatch=--mem=16G")
        p.add_argument("--setup", help="shell code the job runs first (module load ...; source ...)")
        p.add_argument("--out-dir", default="slurm-jobs", help="where logs and reports go")
        p.add_argument("--no-wait", action="store_true", help="submit, print the job id, return")
    for name, what in (("status", "a job's state, and its result once done"), ("cancel", "cancel a job")):
        sub.add_parser(name, help=what).add_argument("names", nargs=1, metavar="JOBID")
    return parser


def cli_submit(args):
    """`rtp-course submit ...`: 0 when the job completed and its checks passed, 1 if not, 2 without
    Slurm or for a request the cluster cannot run."""
    try:
        if args.what in ("status", "cancel"):
            job = Job.attach(args.names[0])
            if args.what == "cancel":
                job.cancel()
                job.wait(progress=False, timeout=30)
            print(job.summary())
            return 0
        common = dict(partition=args.partition, account=args.account, qos=args.qos,
                      extra_sbatch=args.sbatch, out_dir=args.out_dir, setup=args.setup)
        if args.what == "check":
            job = submit_check(args.names, gpus=args.gpus, world_size=args.world_size, impl=args.impl,
                               time=args.time, timeout=args.timeout, **common)
        else:
            job = submit_bench(gpus=args.gpus, time=args.time, bench_args=args.names,
                               **common)
    except SlurmNotFound as e:
        print(e, file=sys.stderr)
        return 2
    except (Unsatisfiable, ValueError) as e:
        print(f"rtp-course submit: {e}", file=sys.stderr)
        return 2
    except SlurmError as e:
        print(f"rtp-course submit: {e}", file=sys.stderr)
        return 1
    print(f"submitted Slurm job {job.job_id}; log: {job.log}")
    if args.what == "check" and left_out(check_sizes(args.gpus, args.world_size)):
        print(left_out(check_sizes(args.gpus, args.world_size)))
    if args.no_wait:
        print(f"follow it with: rtp-course submit status {job.job_id}")
        return 0
    state = job.wait()
    print(job.summary())
    rep = job.report()
    return 0 if state == COMPLETED and (rep is None or rep.get("passed")) else 1
