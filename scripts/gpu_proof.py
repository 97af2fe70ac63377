"""The one-GPU proof run (scripts/gpu_proof.sh says what it runs): each step in a process of
its own within a time cap, so that a hang or a crash costs its step only; one log (every
step's output) and one summary (summary.md, the figures docs/PERFORMANCE.md quotes).

    python scripts/gpu_proof.py [--dry-run] [--out DIR] [--budget S] [--only STEP ...]

The steps' bodies are in gpu_proof_steps.py; each writes DIR/steps/<step>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUDGET_S = 560.0        # every step included: within one 10-minute command on a lent GPU
ENDING_S = 15.0         # what an interrupted step gets to stop its ranks


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    gpu_cap: float          # seconds on the GPU machine (the budget may cut it shorter)
    dry_cap: float          # seconds in a dry run on CPU
    shared: bool = False    # several ranks on the one GPU (RTP_COURSE_SHARE_GPU=1)


STEPS = (
    Step("environment", "environment", 15, 60),
    Step("doctor", "doctor, 2 and 4 ranks", 70, 150, shared=True),
    Step("checks_w1", "reference checks, public and hidden, 1 rank", 110, 150),
    Step("checks_shared", "rotation and point-to-point checks, 2-4 ranks", 140, 180,
         shared=True),
    Step("semantics", "NCCL semantics corpus (tests/helpers/nccl_patterns.py)", 105, 240, shared=True),
    Step("bench", "benchmark, one step per strategy", 50, 150, shared=True),
    Step("demos", "notebook demos", 55, 240, shared=True),
)


def default_out() -> Path:
    return Path(os.environ["OUT"]) / "gpu-proof" if os.environ.get("OUT") else Path("gpu-proof")


def step_environment(step: Step, dry: bool) -> dict:
    env = dict(os.environ, RTP_COURSE_WARM="0", PYTHONUNBUFFERED="1")
    if dry:
        env["CUDA_VISIBLE_DEVICES"] = ""        # nothing of a dry run touches a GPU
    elif step.shared:
        env["RTP_COURSE_SHARE_GPU"] = "1"
    return env


def run_step(step: Step, out: Path, dry: bool, cap: float, log) -> dict:
    """Run one step in a session of its own; stopped (SIGINT, then SIGKILL) past `cap`."""
    cmd = [sys.executable, str(HERE / "gpu_proof_steps.py"), step.name, "--out", str(out)]
    cmd += ["--dry-run"] if dry else []
    log.write(f"\n===== {step.title} ({step.name}; cap {cap:.0f} s)\n$ {' '.join(cmd)}\n")
    log.flush()
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=step_environment(step, dry), cwd=out)
    try:
        code, stopped = proc.wait(timeout=max(1.0, cap)), False
    except subprocess.TimeoutExpired:
        code, stopped = _stop(proc), True
    seconds = time.monotonic() - start
    result = _read_result(out, step)
    if stopped:
        result.update(status="STOPPED", reason=f"stopped at its time cap, {cap:.0f} s")
    elif code != 0 and result.get("status") == "ok":
        result.update(status="FAIL", reason=f"exit status {code}")
    elif not result:
        result = {"status": "FAIL", "reason": f"exit status {code}, no result written"}
    result["seconds"] = round(seconds, 1)
    log.write(f"===== {step.name}: {result['status']} in {seconds:.1f} s\n")
    log.flush()
    return result


def _stop(proc) -> int:
    for sig, wait in ((signal.SIGINT, ENDING_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _read_result(out: Path, step: Step) -> dict:
    try:
        return json.loads((out / "steps" / f"{step.name}.json").read_text())
    except (OSError, ValueError):
        return {}


def summary(results: dict, dry: bool, wall: float) -> str:
    """summary.md: the machine, then one row per step, then each step's figures."""
    env = results.get("environment", {}).get("figures", {})
    mode = "DRY RUN on CPU (gloo, tiny shapes): no GPU figure here" if dry else \
        "one GPU, NCCL; several ranks share it (RTP_COURSE_SHARE_GPU=1) where a step says 2-4"
    lines = ["# GPU proof run", "",
             f"- mode: {mode}",
             f"- GPU: {env.get('gpu', '?')}" + (f", {env['gpu_memory']}" if env.get("gpu_memory") else ""),
             f"- host: {env.get('host', '?')}; driver {env.get('driver', '-')}; torch "
             f"{env.get('torch', '?')}, CUDA {env.get('cuda', '-')}, NCCL {env.get('nccl', '-')}; "
             f"python {env.get('python', '?')}",
             f"- started {time.strftime('%Y-%m-%d %H:%M %Z')}, {wall:.0f} s in all", "",
             "| step | status | seconds | figures |", "| --- | --- | --- | --- |"]
    for step in STEPS:
        r = results.get(step.name)
        if r is None:
            continue
        figures = "; ".join(f"{k}: {v}" for k, v in r.get("figures", {}).items()
                            if not isinstance(v, (dict, list)))
        status = r["status"] + (f" ({r['reason']})" if r.get("reason") else "")
        lines.append(f"| {step.title} | {status} | {r.get('seconds', '')} | {figures} |")
    for step in STEPS:
        r = results.get(step.name)
        if r and r.get("lines"):
            lines += ["", f"## {step.title}", "", *(f"    {line}" for line in r["lines"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="the same steps on CPU (gloo, tiny)")
    p.add_argument("--out", type=Path, default=None, help="default $OUT/gpu-proof or ./gpu-proof")
    p.add_argument("--budget", type=float, default=None,
                   help=f"seconds for every step together (default {BUDGET_S:.0f} on a GPU)")
    p.add_argument("--only", nargs="+", choices=[s.name for s in STEPS], metavar="STEP",
                   help="run these steps only (a rerun of what failed)")
    args = p.parse_args(argv)
    if not args.dry_run and not _gpu_visible():
        print("gpu_proof: no GPU is visible to this process: run it on a machine with a GPU "
              "and a CUDA build of torch, or with --dry-run on CPU", file=sys.stderr)
        return 2
    out = (args.out or default_out()).resolve()
    (out / "steps").mkdir(parents=True, exist_ok=True)
    budget = args.budget or (BUDGET_S if not args.dry_run else sum(s.dry_cap for s in STEPS))
    start, results = time.monotonic(), {}
    with open(out / "gpu-proof.log", "w") as log:
        for step in STEPS:
            if args.only and step.name not in args.only:
                continue
            left = budget - (time.monotonic() - start)
            cap = min(step.dry_cap if args.dry_run else step.gpu_cap, left - ENDING_S)
            if cap < 5:
                results[step.name] = {"status": "NOT RUN", "reason": "no time left in the budget"}
                continue
            results[step.name] = run_step(step, out, args.dry_run, cap, log)
            print(f"  {results[step.name]['status']:<8} {step.title}  "
                  f"({results[step.name]['seconds']} s)", flush=True)
    text = summary(results, args.dry_run, time.monotonic() - start)
    (out / "summary.md").write_text(text)
    print(f"gpu_proof: wrote {out / 'summary.md'} and {out / 'gpu-proof.log'}")
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


def _gpu_visible() -> bool:
    """Counted without initialising CUDA here (the steps' launches fork ranks)."""
    try:
        from rtp_course.runtime import devices
    except ImportError:
        return False
    return devices.physical_gpu_count() > 0


if __name__ == "__main__":
    sys.exit(main())
