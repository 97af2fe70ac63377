"""`rtp-course doctor` on CPU: every part of the stack one line, and a failing part says what
to do in one sentence."""
import io
import re

from rtp_course.cli import doctor
from rtp_course.runtime import devices


def test_every_part_works_on_this_cpu_node():
    out = io.StringIO()
    assert doctor.run(out=out) == 0, out.getvalue()
    text = out.getvalue()
    for part in ("torch", "GPUs", "confined ranks", "reference", "benchmark"):
        assert re.search(rf"^  ok +{part} ", text, re.M), text
    assert "2 gloo ranks" in text and "ddp" in text and text.rstrip().endswith("every part works")


def test_nccl_without_gpus_fails_with_what_to_ask_for(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    out = io.StringIO()
    assert doctor.run(backend="nccl", out=out) == 1
    line = next(l for l in out.getvalue().splitlines() if l.startswith("  FAIL"))
    assert "this process sees 1" in line and "--gpus-per-task=1" in line, line


def test_an_old_torch_is_named_with_the_fix(monkeypatch):
    import torch
    monkeypatch.setattr(torch, "__version__", "2.1.0+cu118")
    try:
        doctor._torch()
    except doctor.Failed as e:
        assert "older than 2.6" in str(e) and "pip install" in str(e)
    else:
        raise AssertionError("torch 2.1 accepted")
