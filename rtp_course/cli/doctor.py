"""`rtp-course doctor`: does this node run the course? One line per part of the stack.

Run it once on a new machine or cluster node (`sbatch slurm/doctor.sbatch` on a GPU
node). It tries, in order, what the course needs, and for each part prints `ok` with what
it found, or `FAIL` with one sentence saying what to do:

    torch           the version, and whether it is in the course's range (2.11 to 2.13)
    GPUs            how many this process sees (counted without initialising CUDA)
    confined ranks  ranks start in the checker's namespaces, confine themselves through
                    the checker's own entry point (confinement.rank.confine, as a
                    grading rank), and (on GPUs) initialise CUDA on their own device
    collectives     all_reduce, point-to-point around the ring, and a subgroup, in those ranks
    reference       one check per exercise and every rotation check on the reference
                    (instructor edition), at 2 ranks and at the node's GPU count
    benchmark       one training step of DDP (and of RTP with the reference)

Exit status 0 only if every part works.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

# pyproject.toml admits these (torch>=2.11,<2.14): the releases the course has run on (the
# whole suite on 2.13, the one-GPU proof run on 2.11: docs/PERFORMANCE.md) and 2.12 between
# them; NCCL's eager point-to-point on one stream per group, which runtime/nccl/order.py
# models, is theirs.
TORCH_RANGE = ((2, 11), (2, 13))
TESTED_TORCH = ("2.11", "2.13")  # the releases the course has run on


class Failed(Exception):
    """A part that does not work; the message says what to do, in one sentence."""


def torch_outside_range(version: str) -> str | None:
    """What to do, in one sentence, when torch `version` is outside the course's range; None
    inside it."""
    version = version.split("+")[0]
    try:
        major_minor = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return None                                  # a build we cannot read: say nothing
    (lo, hi) = TORCH_RANGE
    if lo <= major_minor <= hi:
        return None
    return (f"torch {version} is outside the course's range, {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}: "
            f"install one of those (pip install 'torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1] + 1}', "
            f"or your cluster's module)")


def _torch() -> str:
    import torch
    outside = torch_outside_range(torch.__version__)
    if outside:
        raise Failed(outside)
    minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    return f"{torch.__version__}" + ("" if minor in TESTED_TORCH else
                                     f" (in range; the course has run on "
                                     f"{', '.join(TESTED_TORCH)})")


def _gpus() -> tuple[int, int]:
    """(GPUs visible, ranks they may hold: more under RTP_COURSE_SHARE_GPU=1)."""
    from rtp_course.runtime import devices
    return devices.physical_gpu_count(), devices.gpu_count()


def _confine_as_checker(rank: int, backend: str, impl_dir: str) -> str:
    """Confine this rank through the checker's own entry point, with the job a grading rank
    gets (worker.run_checks calls it when job["confine"] is true); the report's line."""
    from rtp_course.confinement import rank as confinement
    from rtp_course.course import material
    env = os.environ.get
    job = dict(rundir=str(Path(tempfile.gettempdir()).parent), impl=impl_dir, modules=[],
               backend=backend, check_ids=[], dtype=None, confine=True,
               closed=material.closed_to_code_under_test(),
               file_cap_mb=int(env("RTP_COURSE_RANK_FILE_MB", 0)) or None,
               memory_cap_mb=int(env("RTP_COURSE_RANK_MEMORY_MB", 0)) or None,
               disk_cap_mb=int(env("RTP_COURSE_RANK_DISK_MB", 0)) or None)
    return confinement.confine(rank, job, impl_dir)


def _probe(rank: int, world_size: int, backend: str, impl_dir: str) -> dict:
    """In a launched rank: confine as a checker rank is confined, then use the device and talk."""
    out = {"confinement": _confine_as_checker(rank, backend, impl_dir)}
    import torch
    import torch.distributed as dist

    from rtp_course.runtime import launcher
    device = launcher.rank_device()
    x = torch.full((4,), float(rank + 1), device=device)
    if device.type == "cuda":
        out["device"] = f"{device} ({torch.cuda.get_device_name(device)})"
    dist.all_reduce(x)
    out["all_reduce"] = x[0].item() == world_size * (world_size + 1) / 2
    received = torch.empty_like(x)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % world_size),
                                    dist.P2POp(dist.irecv, received, (rank - 1) % world_size)])
    for w in works:
        w.wait()
    out["p2p"] = bool(torch.equal(received, x))
    first = dist.new_group([0, 1]) if world_size > 1 else None
    if first is not None and rank < 2:
        y = torch.ones(2, device=device)
        dist.all_reduce(y, group=first)
        out["subgroup"] = y[0].item() == 2
    else:
        out["subgroup"] = True
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


def _isolation():
    """The launch's namespaces, as the checker's group.py makes them for a confined run."""
    from rtp_course.confinement import Isolation
    return Isolation()


def _what(error) -> str:
    """A launch error in one line: its first line and, for a traceback, its last."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} {lines[-1]}"


def _ranks(backend: str, world_size: int) -> str:
    from rtp_course.course.impl import default_impl, resolve
    from rtp_course.runtime.launcher import LaunchError, launch
    impl_dir = str(resolve(default_impl()))
    for attempt in (1, 2):   # a busy node can break one launch's connections; a broken one, both
        try:
            results = launch(_probe, world_size, args=(backend, impl_dir), backend=backend,
                             timeout=120, isolation=_isolation())
            break
        except LaunchError as e:
            if attempt == 2:
                raise Failed(f"{world_size} {backend} ranks did not run, twice ({_what(e)}): "
                             f"`rtp-course info` shows the backends; see docs/INSTRUCTORS.md, "
                             f"'First time on a GPU cluster'") from None
    bad = [k for r in results for k in ("all_reduce", "p2p", "subgroup") if not r.get(k)]
    if bad:
        raise Failed(f"{', '.join(sorted(set(bad)))} gave wrong values on {backend}: the "
                     f"communication library is broken on this node; report it with the output "
                     f"of `rtp-course info`")
    from rtp_course.confinement import netns
    from rtp_course.runtime import cgroup
    what = results[0]["confinement"]
    devices_seen = ", ".join(r["device"] for r in results if "device" in r)
    network = ("a network of their own" if backend == "gloo" and netns.available()
               else "the machine's network (grade one submission at a time per node)")
    group = cgroup.create("doctor")
    ending = "a cgroup each (cgroup.kill)" if group else "no cgroup (ended by the sweep)"
    cgroup.remove(group) if group else None
    return (f"{world_size} {backend} ranks, {what}, {network}, {ending}"
            + (f"; {devices_seen}" if devices_seen else ""))


def _reference(sizes: list[int], backend: str) -> str:
    from rtp_course.checker import engine
    from rtp_course.course import EXERCISES
    from rtp_course.course.impl import resolve
    try:
        resolve("solutions")
    except Exception:  # noqa: BLE001 - the student edition has no reference
        return "skipped: the student edition has no reference (check your own code: rtp-course check)"
    checks = [c for c in engine.load_checks(engine.check_modules(EXERCISES, False))
              if any(c.applies(n) for n in sizes)]
    first = {}
    for c in checks:
        first.setdefault(c.exercise, c.id)
    # Every rotation check: rotate_async's holds a rank back, which a GPU node's NCCL must
    # stand (its pairs connect at their first transfer).
    rotation = [c.id for c in checks if c.exercise == "rotation"]
    only = list(dict.fromkeys([*first.values(), *rotation]))
    results = engine.run(list(first), impl="solutions", world_sizes=sizes, backend=backend,
                         only=only)
    failed = [f"{r.exercise}.{r.check} at {r.world_size}: {r.status}" for r in results if not r.passed]
    if failed:
        raise Failed(f"the reference fails {'; '.join(failed)}: the checker does not work on this "
                     f"node; send the output of `rtp-course check --impl solutions -v` to the "
                     f"course staff")
    return (f"{len(results)} checks ({', '.join(first)}; every rotation check, rotate_async's "
            f"included) at world sizes {sizes}")


def _benchmark(backend: str) -> str:
    from rtp_course.course.impl import resolve
    from rtp_course.training import bench
    strategies = ["ddp"]
    with contextlib.suppress(Exception):
        resolve("solutions")
        strategies.append("rtp")
    args = bench.add_bench_arguments(argparse.ArgumentParser(prog="rtp-course bench")).parse_args(
        ["--world-size", "2", "--steps", "1", "--warmup", "1", "--strategies",
         *strategies, "--backend", backend, "--timeout", "300",
         *(["--impl", "solutions"] if "rtp" in strategies else [])])
    rows, _ = bench.run_bench(args)
    bad = [r["strategy"] for r in rows if r.get("status", "ok") != "ok"]
    if bad:
        raise Failed(f"the benchmark step failed for {', '.join(bad)}: run `rtp-course bench "
                     f"--steps 1` to see why")
    first = {r["strategy"]: r for r in reversed(rows)}        # a row per rank: rank 0's
    return ", ".join(f"{name} {1000 * float(r['step_time_s']):.0f} ms/step"
                     for name, r in reversed(first.items()))


def run(backend: str | None = None, out=sys.stdout) -> int:
    from rtp_course.runtime.launcher import default_backend
    failures = 0

    def part(name, fn, *args):
        nonlocal failures
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()):     # what the part itself prints
                said, mark = fn(*args), "ok"
        except Failed as e:
            said, mark, failures = str(e), "FAIL", failures + 1
        except Exception as e:  # noqa: BLE001 - a doctor reports, it does not crash
            said, mark = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "FAIL"
            failures += 1
        print(f"  {mark:<4}  {name:<15} {said}  ({time.perf_counter() - start:.1f} s)", file=out,
              flush=True)
        return mark == "ok"

    print(f"rtp-course doctor on {os.uname().nodename}", file=out)
    part("torch", _torch)
    visible, gpus = _gpus()
    shared = f" (up to {gpus // visible} ranks on each: RTP_COURSE_SHARE_GPU=1)" \
        if visible and gpus > visible else ""
    part("GPUs", lambda: f"{visible} visible{shared}" + ("" if visible else
                                                          " (the course runs on CPU with gloo)"))
    backend = backend or default_backend(max(2, gpus))
    sizes = sorted({2, gpus}) if backend == "nccl" and gpus >= 2 else [2]
    if backend == "nccl" and gpus < 2:
        part("confined ranks", lambda: (_ for _ in ()).throw(Failed(
            f"NCCL needs a GPU per rank and this process sees {gpus}: ask Slurm for 2 or more "
            f"(--gpus-per-task=1 --ntasks=2), or run the course on CPU with gloo")))
        return 1
    for n in sizes:
        part("confined ranks", _ranks, backend, n)
    part("reference", _reference, sizes, backend)
    part("benchmark", _benchmark, backend)
    print(("every part works" if not failures else f"{failures} part(s) failed: each line says "
           f"what to do"), file=out)
    return 0 if not failures else 1


def cli_doctor(args) -> int:
    return run(args.backend)
