"""`rtp-course`: check, info, doctor, submit, bench, release, seal, grade."""
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
                             hidden=args.hidden, dtype=args.dtype, timeout_scale=args.timeout_scale,
                             timeout=args.timeout,
                             backend=args.backend, only=args.only,
                             progress=None if args.quiet else bar)
    except (ImplError, LaunchError, ValueError, FileNotFoundError) as e:
        print(f"\rrtp-course check: {e}", file=sys.stderr)
        return 2
    finally:
        bar.clear()
    print(report.text(results, verbose=args.verbose))
    print(f"\n  ({time.perf_counter() - start:.1f} s)")
    if args.json:
        report.write_json(results, args.json)
    return 0 if results and all(r.passed for r in results) else 1


def cmd_info(args) -> int:
    import torch
    import torch.distributed as dist
    from rtp_course.runtime.devices import gpu_count
    from rtp_course.runtime.launcher import default_backend
    gpus = gpu_count()
    rows = [("rtp-course", __version__), ("python", sys.version.split()[0]),
            ("torch", torch.__version__),
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
    c.add_argument("--dtype", choices=["float64", "float32"],
                   help="override the checks' dtype (to explore; grades use each check's own: in "
                        "float32 a ReLU input within rounding of 0 can flip a model check's "
                        "gradient on a rare draw of the data)")
    c.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl if enough GPUs, else gloo")
    c.add_argument("--timeout", type=float, metavar="S",
                   help="stop a check (as a deadlock) after S seconds (default: each check's own)")
    c.add_argument("--timeout-scale", type=float, default=1.0,
                   help="multiply every check's deadlock timeout (slow machines)")
    c.add_argument("-v", "--verbose", action="store_true", help="show stacks of deadlocked ranks")
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(func=cmd_check)

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
    b.set_defaults(func=_delegate("rtp_course.training.bench", "cli_bench"))

    g = sub.add_parser("grade", help="score the collected submissions' code into nbgrader's gradebook "
                                     "(instructor edition; after nbgrader autograde)")
    g.add_argument("assignments", nargs="+", metavar="ASSIGNMENT")
    g.add_argument("--student", nargs="+", metavar="ID", help="only these students (default: all)")
    g.add_argument("--jobs", type=int, metavar="N",
                   help="submissions graded at once on this machine, each on cores of its own "
                        "(default: one per two cores)")
    g.add_argument("--world-size", type=int, nargs="+", metavar="N", help="default: 1 2 3 4")
    cl = g.add_argument_group("a class on Slurm: one array task per student")
    cl.add_argument("--slurm", action="store_true", help="grade as a Slurm job array, then write the gradebook")
    cl.add_argument("--no-wait", action="store_true", help="submit the array and return")
    cl.add_argument("--merge", action="store_true", help="write what a finished array left into the gradebook")
    from rtp_course.cluster.slurm import gpu_count
    cl.add_argument("--gpus", type=gpu_count, default=0, help="GPUs per task (4: NCCL at world sizes 1-4; default 0, CPU)")
    cl.add_argument("--max-running", type=int, metavar="K", help="at most K tasks at once")
    cl.add_argument("--time", default="00:20:00", help="time limit per task (default 00:20:00)")
    cl.add_argument("--partition")
    cl.add_argument("--account")
    cl.add_argument("--qos")
    cl.add_argument("--sbatch", action="append", default=[], metavar="OPTION", help="extra sbatch option")
    cl.add_argument("--setup", help="shell code each task runs first (module load ...; source ...)")
    g.add_argument("--array-task", type=int, help=argparse.SUPPRESS)     # set by instructor/grade.sbatch
    g.add_argument("--students-file", help=argparse.SUPPRESS)
    g.set_defaults(func=_delegate("rtp_course.instructor.grade_code", "cli_grade"))

    sl = sub.add_parser("seal", help="record the grader's files, which `grade` then verifies "
                                     "(instructor edition; release does it too)")
    sl.set_defaults(func=_delegate("rtp_course.instructor.manifest", "cli_seal"))

    r = sub.add_parser("release", help="build the student edition into OUT (instructor edition)")
    r.add_argument("out", metavar="OUT")
    r.add_argument("--force", action="store_true", help="replace OUT if it exists")
    r.set_defaults(func=_delegate("rtp_course.instructor.release", "cli_release"))
    return p


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

