"""The steps of the one-GPU proof run (gpu_proof.py runs each in a process of its own):

    python scripts/gpu_proof_steps.py STEP --out DIR [--dry-run]

prints what it does (the run's log) and writes DIR/steps/STEP.json:
{"status": "ok" | "FAIL", "figures": {...}, "lines": [...]}. On the GPU machine the backend
is NCCL; in a dry run gloo, with NCCL's rules where the checker applies them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))   # nccl_patterns, before any rank starts
HANG_S = 12.0           # a pattern still running then hangs (NCCL starts in a few seconds)


class Run:
    def __init__(self, out: Path, dry: bool):
        self.out, self.dry = out, dry
        self.backend = "gloo" if dry else "nccl"


def result(ok: bool, figures: dict, lines=()) -> dict:
    return {"status": "ok" if ok else "FAIL", "figures": figures, "lines": list(lines)}


def course(*args) -> subprocess.CompletedProcess:
    """The course CLI in a process of its own; its output goes to the log."""
    cmd = [sys.executable, "-m", "rtp_course.cli", *args]
    print("$ rtp-course " + " ".join(args), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout + r.stderr, flush=True)
    return r


# ------------------------------------------------------------------ the steps

def environment(run: Run) -> dict:
    import platform
    import socket

    import torch

    from rtp_course.cli.doctor import torch_outside_range
    fig = {"host": socket.gethostname(), "python": platform.python_version(),
           "torch": torch.__version__}
    if run.dry:
        fig["gpu"] = "none (dry run)"
    else:
        props, nccl = torch.cuda.get_device_properties(0), torch.cuda.nccl.version()
        fig.update(gpu=props.name, gpu_memory=f"{props.total_memory / 2 ** 30:.0f} GiB",
                   gpus=torch.cuda.device_count(), cuda=torch.version.cuda, driver=_driver(),
                   nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl))
    for module in ("matplotlib", "numpy"):
        fig[module] = "yes" if _importable(module) else "no"
    outside = torch_outside_range(torch.__version__)
    return result(outside is None, fig, [outside] if outside else [])


def _driver() -> str:
    if shutil.which("nvidia-smi") is None:
        return "?"
    r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "?"


def _importable(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


def doctor(run: Run) -> dict:
    r = course("doctor", "--backend", run.backend)
    parts = {}
    for line in r.stdout.splitlines():
        if line.startswith(("  ok  ", "  FAIL")):
            parts[line[8:23].strip()] = line[2:6].strip()
    return result(r.returncode == 0, parts, [ln for ln in r.stdout.splitlines() if ln.strip()])


def _checks(run: Run, name: str, *args) -> tuple[bool, dict, list]:
    report = run.out / f"{name}.json"
    r = course("check", "--impl", "solutions", "--backend", run.backend, "--json", str(report),
               "-q", *args)
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return False, {name: f"no report (exit status {r.returncode})"}, []
    checks = [c for ex in doc["exercises"].values() for c in ex["checks"]]
    failed = [f"{c['name']} at {c['world_size']}: {c['status']} {c['message'][:200]}"
              for c in checks if not c["passed"]]
    figures = {name: f"{len(checks) - len(failed)}/{len(checks)} passed"}
    return r.returncode == 0, figures, failed


def checks_w1(run: Run) -> dict:
    ok, figures, failed = _checks(run, "checks at 1 rank", "--hidden", "--world-size", "1")
    return result(ok, figures, failed)


def checks_shared(run: Run) -> dict:
    ok1, fig1, failed1 = _checks(run, "rotation at 2-4", "rotation", "--hidden",
                                 "--world-size", "2", "3", "4")
    ok2, fig2, failed2 = _checks(run, "flyweight at 2", "flyweight", "--world-size", "2")
    ok3, fig3, failed3 = _checks(run, "experts at 2", "experts", "--hidden", "--world-size", "2")
    # E9's stages talk by send/recv only: NCCL's own p2p ordering judges its schedules
    ok4, fig4, failed4 = _checks(run, "pipeline at 2", "pipeline", "--hidden", "--world-size", "2")
    return result(ok1 and ok2 and ok3 and ok4, {**fig1, **fig2, **fig3, **fig4},
                  failed1 + failed2 + failed3 + failed4)


def semantics(run: Run) -> dict:
    import nccl_patterns
    cases = [(name, n) for name, p in nccl_patterns.PATTERNS.items() for n in p.sizes]
    if run.dry:   # the plumbing, once per outcome: tests/test_nccl_semantics.py runs them all on CPU
        cases = list({nccl_patterns.PATTERNS[name].label: (name, n)
                      for name, n in reversed(cases)}.values())
    lines, agree = [], 0
    for name, n in cases:
        pattern = nccl_patterns.PATTERNS[name]
        got = _pattern_outcome(run, name, n)
        seen = got == pattern.label or got in pattern.also
        agree += seen
        lines.append(f"{name} at {n} ranks: NCCL's label {pattern.label}, got {got}"
                     + ("" if got == pattern.label else
                        " (an outcome NCCL has shown before)" if seen else "   <-- DIFFERS"))
        print(lines[-1], flush=True)
    differs = [ln.split(":")[0] for ln in lines if "DIFFERS" in ln]
    figures = {"agree": f"{agree}/{len(cases)}", "differ": ", ".join(differs) or "none"}
    return result(agree == len(cases), figures, lines)


def _pattern_outcome(run: Run, name: str, n: int) -> str:
    """ok | error | hang on NCCL (a hang: still running after HANG_S), or, in a dry run, on
    gloo under the checker's NCCL rules with the replay of NCCL's stream order
    (as tests/test_nccl_semantics.py judges it)."""
    import nccl_patterns

    from rtp_course.runtime import nccl
    from rtp_course.runtime.launcher import RankFailed, RankHung, launch
    env = {} if run.dry else {"TORCH_NCCL_BLOCKING_WAIT": "1"}
    try:
        results = launch(nccl_patterns.run, n, args=(name,), backend=run.backend,
                         timeout=8.0 if run.dry else HANG_S, env=env)
    except RankHung:
        return "hang"
    except RankFailed as e:
        return f"error (rank {e.rank} died: {str(e).splitlines()[-1][:120]})"
    errors = [f"rank {i}: {r['value']}" for i, r in enumerate(results) if r["outcome"] == "error"]
    if errors:
        print("    " + "; ".join(errors)[:300], flush=True)
        return "error"
    if run.dry:
        programs = {r: ([tuple(s) for s in res["program"]["steps"]],
                        {op["id"]: op for op in res["program"]["ops"]})
                    for r, res in enumerate(results)}
        if nccl.simulate(programs) is not None:
            return "hang"
    expected = nccl_patterns.EXPECTED_VALUES.get(name)
    if expected and [r["value"] for r in results] != [expected(r, n) for r in range(n)]:
        return "ok, other values"
    return "ok"


def bench(run: Run) -> dict:
    import argparse as ap

    from rtp_course.training import bench as b
    from rtp_course.training.memory import human_bytes
    size = ["--tiny", "--dtype", "bfloat16"] if run.dry else ["--preset", "gpu",
                                                               "--num-decoder-layers", "4"]
    argv = ["--world-size", "2", "--steps", "1", "--warmup", "1", "--sequential", "--impl",
            "solutions", "--backend", run.backend, "--timeout", "300", *size]
    print("$ rtp-course bench " + " ".join(argv), flush=True)
    args = b.add_bench_arguments(ap.ArgumentParser()).parse_args(argv)
    rows, info = b.run_bench(args)
    text = b.report(rows, info)
    print(text, flush=True)
    b.write_json(rows, info, run.out / "bench.json")
    figures = {"model": f"{info['num_params'] / 1e6:.2f} M parameters, {info['dtype']}"}
    for r in (r for r in rows if r["rank"] == 0):
        said = r["status"] if r["status"] != "ok" else \
            f"{1000 * r['step_time_s']:.0f} ms/step, accounted {human_bytes(r['total'])}"
        if r.get("device_used"):
            said += f", device {human_bytes(r['device_used'])} (start {human_bytes(r['device_base'])})"
        figures[r["strategy"]] = said
    return result(all(r["status"] == "ok" for r in rows), figures, text.splitlines())


def demos(run: Run) -> dict:
    from rtp_course.notebook.demos import collectives, data_parallel, hello, rotation, rtp, tp, \
        tp_comm, twod
    os.environ["RTP_COURSE_IMPL"] = "solutions"         # what CI runs the notebooks with
    todo = [("01 hello", hello.hello, 2, ()), ("01 collectives", collectives.run_all, 2, ()),
            ("02 DataParallel", data_parallel.wrap_demo, 2, ()),
            ("03 column/row MLP", tp_comm.tp_mlp, 2, ()), ("04 TP MLP", tp.layer_demo, 2, ("mlp",)),
            ("05 async probe", rotation.async_probe, 2, ()),
            ("05 overlap", rotation.overlap_run, 2, ()),
            ("06 RTP timeline", rtp.layer_timeline, 2, ()),
            ("06 RTP vs DDP, CNN", rtp.train_against_ddp, 2, ("cnn", 8)),
            ("08 2D training", twod.train, 4, (2, 5))]
    figures, lines = {}, []
    for title, fn, n, args in todo:
        said = _demo(fn, n, args)
        figures[title] = said
        lines.append(f"{title} ({n} ranks): {said}")
        print(lines[-1], flush=True)
    return result(all(not s.startswith("FAILED") for s in figures.values()), figures, lines)


def _demo(fn, n: int, args: tuple) -> str:
    from rtp_course.runtime.launcher import LaunchError, launch
    try:
        out = launch(fn, n, args=args, timeout=120, results="objects")
    except LaunchError as e:
        return f"FAILED: {str(e).strip().splitlines()[-1][:200]}"
    return _figures_of(fn.__name__, out)


def _figures_of(name: str, out: list) -> str:
    from rtp_course.notebook import timeline
    if name == "async_probe":
        r = out[1]
        return (f"rank 1 returned after {r['returned_after_ms']:.2f} ms, completed then "
                f"{r['done_when_returned']}, tensor there after {r['arrived_after_ms']:.0f} ms")
    if name == "overlap_run":
        t = {w: timeline.summary([res[w]["intervals"] for res in out])
             for w in ("sequential", "overlapped")}
        return (f"sequential {1e3 * t['sequential']['total']:.1f} ms, overlapped "
                f"{1e3 * t['overlapped']['total']:.1f} ms, {100 * t['overlapped']['hidden']:.0f}% "
                f"of the transfers under compute ({out[0]['repeats']} products per shard)")
    if name == "layer_timeline":
        t = {p: timeline.summary([res[p] for res in out]) for p in ("forward", "backward")}
        return ", ".join(f"{p} {1e3 * s['total']:.1f} ms ({100 * s['hidden']:.0f}% hidden)"
                         for p, s in t.items())
    if name == "train_against_ddp":
        r = out[0]
        losses = max(abs(a - b) for a, b in zip(r["ddp"]["losses"], r["rtp"]["losses"]))
        return (f"weights vs DDP {r['max weight difference']:.1e}, losses {losses:.1e}, "
                f"TF32 {r['tf32']}")
    return "ok"


STEPS = {f.__name__: f for f in (environment, doctor, checks_w1, checks_shared, semantics,
                                 bench, demos)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("step", choices=sorted(STEPS))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    run = Run(args.out, args.dry_run)
    try:
        done = STEPS[args.step](run)
    except Exception as e:  # noqa: BLE001 - the step's failure is its result
        import traceback
        traceback.print_exc()
        said = str(e).splitlines()[0][:200] if str(e) else ""
        done = result(False, {"error": f"{type(e).__name__}: {said}"})
    (args.out / "steps" / f"{args.step}.json").write_text(json.dumps(done, indent=1, default=str))
    return 0 if done["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
