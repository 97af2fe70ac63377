"""scripts/gpu_proof.sh, the one-GPU proof run: its dry run (the same steps on CPU, gloo,
tiny) writes one log and one summary with every step passed; on a machine without a GPU the
real run refuses in one sentence."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_proof.sh"


def proof(*args, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RTP_PYTHON": sys.executable,
                                                **(env or {})})


def _module():
    spec = importlib.util.spec_from_file_location("gpu_proof", ROOT / "scripts" / "gpu_proof.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module           # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("proof")
    r = proof("--dry-run", "--out", str(out))
    return r, out


def test_the_dry_run_passes_every_step_and_writes_one_log_and_one_summary(dry_run):
    """There was no proof script: nothing of the course had a way to run on a GPU at once."""
    r, out = dry_run
    assert r.returncode == 0, r.stdout + r.stderr + (out / "gpu-proof.log").read_text()[-4000:]
    summary = (out / "summary.md").read_text()
    assert "DRY RUN on CPU" in summary and "| step | status |" in summary
    for step in _module().STEPS:
        row = next(line for line in summary.splitlines() if line.startswith(f"| {step.title} |"))
        assert row.split("|")[2].strip() == "ok", row
    log = (out / "gpu-proof.log").read_text()
    assert all(f"===== {s.name}: ok" in log for s in _module().STEPS)
    assert "every part works" in log                      # the doctor's own last line


def test_the_dry_run_runs_the_doctor_with_every_part_ok(dry_run):
    _, out = dry_run
    log = (out / "gpu-proof.log").read_text()
    text = log[log.index("rtp-course doctor on"):log.index("every part works") + 16]
    for part in ("torch", "GPUs", "confined ranks", "reference", "benchmark"):
        assert re.search(rf"^ *ok +{part} ", text, re.M), text
    assert "2 gloo ranks" in text and "ddp" in text, text


def test_the_dry_run_covers_what_the_gpu_run_must_show(dry_run):
    _, out = dry_run
    steps = {p.stem: json.loads(p.read_text()) for p in (out / "steps").glob("*.json")}
    figures = {name: s["figures"] for name, s in steps.items()}
    assert figures["checks_w1"]["checks at 1 rank"].endswith("passed")
    assert {"rotation at 2-4", "flyweight at 2", "experts at 2"} <= set(figures["checks_shared"])
    import nccl_patterns     # a dry run tries one case per outcome (ok, error, hang)
    outcomes = len({p.label for p in nccl_patterns.PATTERNS.values()})
    assert figures["semantics"]["agree"] == f"{outcomes}/{outcomes}"
    assert {"ddp", "fsdp", "tp", "rtp"} <= set(figures["bench"])
    assert "bfloat16" in figures["bench"]["model"]
    assert "completed then False" in figures["demos"]["05 async probe"]
    assert "TF32 {'matmul': False, 'cudnn': False}" in figures["demos"]["06 RTP vs DDP, CNN"]


def test_without_a_gpu_the_real_run_refuses_in_one_sentence(tmp_path):
    r = proof("--out", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 2 and "no GPU is visible" in r.stderr and "--dry-run" in r.stderr
    assert not (tmp_path / "summary.md").exists()


def test_gpu_steps_with_several_ranks_share_the_gpu_and_the_budget_is_kept(tmp_path):
    proof_module = _module()
    steps = {s.name: s for s in proof_module.STEPS}
    assert proof_module.step_environment(steps["checks_shared"], dry=False)["RTP_COURSE_SHARE_GPU"] == "1"
    assert "RTP_COURSE_SHARE_GPU" not in proof_module.step_environment(steps["checks_w1"], dry=False)
    assert proof_module.step_environment(steps["demos"], dry=True)["CUDA_VISIBLE_DEVICES"] == ""
    assert sum(s.gpu_cap for s in proof_module.STEPS) <= proof_module.BUDGET_S <= 9.5 * 60
    r = proof("--dry-run", "--out", str(tmp_path), "--budget", "10", timeout=120)
    assert r.returncode == 1
    assert "NOT RUN (no time left in the budget)" in (tmp_path / "summary.md").read_text()
