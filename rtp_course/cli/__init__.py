"""`rtp-course`: check, info, doctor, submit, bench, release, seal, grade, and the
instructor's term: autograde, regrade, points, export."""
from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import time

from rtp_course import __version__
from rtp_course.course import EXERCISES, edition


def cmd_check(args) -> int:
    from rtp_course.course import BY_MODULE
    from rtp_course.runtime import forkserver
    # imports torch for the ranks while this process imports it too
    forkserver.start(optimizers=any(BY_MODULE[e].trains if e in BY_MODULE else True
                                    for e in args.exercises or EXERCISES))
    from rtp_course.checker import engine, report
    from rtp_course.course.impl import ImplError
    from rtp_course.runtime.launcher import LaunchError
    from rtp_course.cli.progress import Bar
    start = time.perf_counter()
    bar = Bar()
    try:
        results = engine.run(args.exercises or None, impl=args.impl, world_sizes=args.world_size,
                             hidden=args.hidden, timeout_scale=args.timeout_scale,
                             timeout=args.timeout,
                             backend=args.backend, only=args.only,
                             progress=None if args.quiet else bar)
    except (ImplError, LaunchError, ValueError, FileNotFoundError) as e:
        print(f"\rrtp-course check: {e}", file=sys.stderr)
        return 2
    finally:
        bar.clear()
    print(report.text(results, verbose=args.verbose))
    review = _review(args.impl, args.exercises or EXERCISES, results)
    for flag in review:
        print(f"  REVIEW  {report.visible(str(flag))}")
    print(f"\n  ({time.perf_counter() - start:.1f} s)")
    if args.json:
        report.write_json(results, args.json, review=[f.as_dict() for f in review])
    return 0 if results and all(r.passed for r in results) else 1


def _review(impl: str, exercises, results) -> list:
    """What the instructor should look at in the code under test (instructor edition: a static
    scan of the exercise modules for code that reaches into the grader, and the checks during
    which a rank changed the harness); [] otherwise."""
    try:
        from rtp_course.instructor.review.scan import Flag
        from rtp_course.instructor.review.worker import scan_impl
    except ImportError:                      # the student edition
        return []
    from rtp_course.confinement.integrity import MARK
    from rtp_course.course.impl import resolve
    changed = {(r.exercise, r.check): Flag(f"{r.exercise}.py", 0, f"{r.exercise}.{r.check}: "
                                           f"{MARK} while it ran", "harness-changed")
               for r in results if MARK in (r.message or "")}
    return scan_impl(str(resolve(impl)), list(exercises)) + list(changed.values())


def cmd_info(args) -> int:
    import torch
    import torch.distributed as dist
    from rtp_course.runtime.devices import gpu_count
    from rtp_course.runtime.launcher import default_backend
    gpus = gpu_count()
    from rtp_course.cli.doctor import torch_outside_range
    outside = torch_outside_range(torch.__version__)
    rows = [("rtp-course", __version__), ("python", sys.version.split()[0]),
            ("torch", torch.__version__ + (f"  OUTSIDE THE COURSE'S RANGE: {outside}" if outside
                                           else "")),
            ("backends", ", ".join(b for b, ok in (("gloo", dist.is_gloo_available()),
                                                     ("nccl", dist.is_nccl_available())) if ok)),
            ("default backend", default_backend()), ("GPUs", str(gpus))]
    for i in range(gpus):
        rows.append((f"  cuda:{i}", torch.cuda.get_device_name(i)))
    found = [c for c in ("sbatch", "squeue", "srun") if shutil.which(c)]
    rows.append(("Slurm", "found (" + ", ".join(found) + ")" if found else "not found"))
    rows.append(("edition", edition()))
    for k, v in rows:
        print(f"{k:<16} {v}")
    return 0


def _delegate(module: str, func: str):
    def run(args):
        if module.startswith("rtp_course.instructor.") and edition() != "instructor":
            print(f"rtp-course {args.command}: this is the student edition; "
                  f"`{args.command}` is for instructors (run it in the instructor repository)",
                  file=sys.stderr)
            return 2
        return getattr(importlib.import_module(module), func)(args)
    return run


def build_parser(argv=None) -> argparse.ArgumentParser:
    """`argv` says which subcommand runs: only its module is imported (bench pulls in
    matplotlib and FSDP, ~3 s that `check` should not pay)."""
    wanted = (argv if argv is not None else sys.argv[1:])[:1]
    p = argparse.ArgumentParser(prog="rtp-course", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _check_command(sub)

    i = sub.add_parser("info", help="torch version, backend, GPUs, Slurm")
    i.set_defaults(func=cmd_info)

    d = sub.add_parser("doctor", help="does this node run the course? torch, GPUs, confined ranks, "
                                      "NCCL/gloo, the reference, a benchmark step")
    d.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl if 2+ GPUs, else gloo")
    d.set_defaults(func=_delegate("rtp_course.cli.doctor", "cli_doctor"))

    s = sub.add_parser("submit", help="run a checker job (or benchmark) on Slurm")
    if wanted == ["submit"]:
        _slurm_args(s)
    s.set_defaults(func=_delegate("rtp_course.cluster.slurm", "cli_submit"))

    b = sub.add_parser("bench", help="DDP / FSDP / TP / RTP: memory by category and step time")
    if wanted == ["bench"]:
        _bench_args(b)
    b.set_defaults(func=_delegate("rtp_course.cli.bench", "cli_bench"))

    _grade_command(sub)

    sl = sub.add_parser("seal", help="record the grader's files, which `grade` then verifies "
                                     "(instructor edition; release does it too)")
    sl.set_defaults(func=_delegate("rtp_course.instructor.manifest", "cli_seal"))

    _term_commands(sub)

    r = sub.add_parser("release", help="build the student edition into OUT (instructor edition)")
    r.add_argument("out", metavar="OUT")
    r.add_argument("--force", action="store_true", help="replace OUT if it exists")
    r.set_defaults(func=_delegate("rtp_course.instructor.release", "cli_release"))
    return p



def _check_command(sub) -> None:
    """`rtp-course check`: the student's command."""
    c = sub.add_parser("check", help="check exercise implementations against the serial model")
    c.add_argument("exercises", nargs="*", metavar="EXERCISE",
                   help=f"one or more of: {', '.join(EXERCISES)} (default: all)")
    c.add_argument("--impl", default="rtp_course", metavar="PATH",
                   help="directory holding the exercise modules (default: rtp_course, your work; "
                        "'solutions' in the instructor edition)")
    c.add_argument("--world-size", type=int, nargs="+", metavar="N",
                   help="world sizes to run (default: 1 2 3 4)")
    c.add_argument("--json", metavar="FILE", help="also write a machine-readable report")
    c.add_argument("--hidden", action="store_true", help="add the hidden checks (instructor edition)")
    c.add_argument("--only", nargs="+", metavar="CHECK", help="run only these checks (by name)")
    c.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl if enough GPUs, else gloo")
    c.add_argument("--timeout", type=float, metavar="S",
                   help="let every check use S CPU-seconds and lift the exercise and run budgets "
                        "(to debug; default: each check's own budget)")
    c.add_argument("--timeout-scale", type=float, default=1.0,
                   help="multiply every CPU budget and the time that makes a hang (a slow "
                        "machine; a busy one needs nothing: budgets are CPU time)")
    c.add_argument("-v", "--verbose", action="store_true", help="show stacks of deadlocked ranks")
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(func=cmd_check)


def _grade_command(sub) -> None:
    """`rtp-course grade` (instructor edition): the code's points, on this machine or Slurm."""
    g = sub.add_parser("grade", help="score the collected submissions' code into nbgrader's gradebook "
                                     "(instructor edition; after nbgrader autograde)")
    g.add_argument("assignments", nargs="+", metavar="ASSIGNMENT")
    g.add_argument("--student", nargs="+", metavar="ID", help="only these students (default: all)")
    g.add_argument("--jobs", type=int, metavar="N",
                   help="submissions graded at once on this machine, each on cores of its own "
                        "(default: one per two cores)")
    g.add_argument("--world-size", type=int, nargs="+", metavar="N",
                   help="default: 1 2 3 4 (with --slurm --gpus G: those G GPUs hold)")
    cl = g.add_argument_group("a class on Slurm: one array task per student")
    cl.add_argument("--slurm", action="store_true", help="grade as a Slurm job array, then write the gradebook")
    cl.add_argument("--no-wait", action="store_true", help="submit the array and return")
    cl.add_argument("--merge", action="store_true", help="write what a finished array left into the gradebook")
    from rtp_course.cluster.slurm import gpu_count
    cl.add_argument("--gpus", type=gpu_count, default=0, metavar="G",
                    help="GPUs per task: G > 0 grades on them with NCCL, at the course's world "
                         "sizes that G GPUs hold (4: 1-4); default 0: CPU and gloo under NCCL's "
                         "rules, which gives the same grade")
    _array_options(cl, "00:20:00")
    g.add_argument("--array-task", type=int, help=argparse.SUPPRESS)     # set by instructor/grade.sbatch
    g.add_argument("--students-file", help=argparse.SUPPRESS)
    g.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                   help="multiply every CPU budget, the time that makes a hang and the wall-clock "
                        "guard of a submission, as for `check` (a slow machine)")
    g.set_defaults(func=_delegate("rtp_course.instructor.term", "cli_grade"))


def _array_options(group, time: str) -> None:
    """What `grade --slurm` and `autograde --slurm` pass to sbatch."""
    group.add_argument("--max-running", type=int, metavar="K", help="at most K tasks at once")
    group.add_argument("--time", default=time, help=f"time limit per task (default {time})")
    group.add_argument("--partition")
    group.add_argument("--account")
    group.add_argument("--qos")
    group.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                       help="extra sbatch option")
    group.add_argument("--setup", help="shell code each task runs first (module load ...; source ...)")


def _term_commands(sub) -> None:
    """The instructor's term beside `grade` (instructor edition): autograde, regrade, points,
    export (docs/INSTRUCTORS.md)."""
    a = sub.add_parser("autograde", help="nbgrader autograde of the notebooks, several students at "
                                         "once (instructor edition; then `grade`)")
    a.add_argument("assignments", nargs="+", metavar="ASSIGNMENT")
    a.add_argument("--student", nargs="+", metavar="ID", help="only these students (default: all)")
    a.add_argument("--jobs", type=int, metavar="N", help="students at once (default: one per core)")
    a.add_argument("--force", action="store_true", help="autograde again students already autograded")
    cl = a.add_argument_group("a class on Slurm: one array task per student")
    cl.add_argument("--slurm", action="store_true", help="autograde as a Slurm job array, then merge")
    _array_options(cl, "00:30:00")
    a.set_defaults(func=_delegate("rtp_course.instructor.term", "cli_autograde"))

    rg = sub.add_parser("regrade", help="grade these students again, notebooks and code together "
                                        "(instructor edition)")
    rg.add_argument("assignment", metavar="ASSIGNMENT")
    rg.add_argument("--student", nargs="+", metavar="ID", required=True)
    rg.add_argument("--jobs", type=int, metavar="N", help="default: one per two cores")
    rg.add_argument("--world-size", type=int, nargs="+", metavar="N", help="default: 1 2 3 4")
    rg.add_argument("--timeout-scale", type=float, default=1.0, metavar="X", help="as for `grade`")
    rg.set_defaults(func=_delegate("rtp_course.instructor.term", "cli_regrade"))

    pt = sub.add_parser("points", help="the course table's points and check weights, and what "
                                       "depends on them (instructor edition)")
    pt.add_argument("--write", action="store_true",
                    help="regenerate the notebooks' grading cells, the nbgrader source and the "
                         "gradebook from the table, then seal")
    pt.set_defaults(func=_delegate("rtp_course.instructor.points", "cli_points"))

    e = sub.add_parser("export", help="nbgrader export, refused while code points are missing "
                                      "(instructor edition)")
    e.add_argument("--to", metavar="FILE", help="default: grades.csv in the grading directory")
    e.add_argument("--force", action="store_true", help="export even with code points missing")
    e.add_argument("--provisional", action="store_true",
                   help="export provisional grades too, marked in the CSV's 'provisional' column")
    e.set_defaults(func=_delegate("rtp_course.instructor.term", "cli_export"))


def _slurm_args(s):
    try:
        from rtp_course.cluster.slurm import add_submit_arguments
    except ImportError:
        return
    add_submit_arguments(s)


def _bench_args(b):
    try:
        from rtp_course.training.bench import add_bench_arguments
    except ImportError:
        return
    add_bench_arguments(b)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _honour_ctrl_c()
    if argv[:1] == ["check"] and not {"-h", "--help"} & set(argv):
        from rtp_course.cli import warm
        if warm.wanted():
            try:
                code = warm.run_check(argv)
            except KeyboardInterrupt:   # the server's run ends with this command
                print("\nrtp-course check: interrupted; every process it started was stopped",
                      file=sys.stderr)
                return 130
            if code is not None:
                return code
            warm.start_after_this_command()
    args = build_parser(argv).parse_args(argv)
    from rtp_course.runtime import quiet
    quiet.torch_warnings()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\nrtp-course {args.command}: interrupted; every process it started was stopped",
              file=sys.stderr)
        return 130


def _honour_ctrl_c() -> None:
    """A script's background job (bash without job control) starts with SIGINT ignored, and
    Python then keeps ignoring it: Ctrl-C would leave the checks running to their time limits.
    A command that a person may interrupt takes SIGINT back."""
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader that went away (`| head`), a closed stream
            pass


def entry() -> None:
    """The console command. After a check it leaves without the interpreter's teardown of
    torch's modules (0.4 s, with nothing left to do): exit handlers run, then os._exit."""
    code = main()
    if sys.argv[1:2] == ["check"]:
        import atexit
        import os
        _flush()
        atexit._run_exitfuncs()   # multiprocessing's clean-up, the forkserver's stop
        _flush()
        os._exit(code if isinstance(code, int) else 1)
    sys.exit(code)

