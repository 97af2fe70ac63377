"""What the notebooks show on a GPU, proven on CPU by emulation: 05's asynchronous probe, the
overlap timelines of 05 and 06, 06's comparison with DDP (TF32), and what a check cell runs."""
import shutil
import time
from pathlib import Path

import pytest
import torch

from rtp_course.runtime.launcher import launch

ROOT = Path(__file__).resolve().parents[1]

# rotate_async as NCCL behaves: a pair's first transfer connects it, and the host blocks until
# the peer takes part (here: until the transfer is done); later ones only post.
NCCL_LIKE = '''
_connected = []
_posting = rotate_async


def rotate_async(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    handle = _posting(tensor, direction, group, recv_shape, recv_dtype)
    if not _connected:
        _connected.append(True)
        for w in handle._works:
            w.wait()
    return handle
'''


@pytest.fixture
def nccl_like_rotation(tmp_path):
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    with open(impl / "rotation.py", "a") as fh:
        fh.write(NCCL_LIKE)
    return impl


def test_the_async_probe_tells_a_correct_nccl_rotation_it_did_not_wait(nccl_like_rotation):
    """On a GPU the probe's first rotate_async paid NCCL's connection setup (and an NVLink copy
    is done within microseconds): a correct student read 'completed then: True', which the
    notebook calls a call that waited. The probe now connects the ring first, untimed, and
    holds rank 0 back: rank 1's handle cannot be complete when its call returns."""
    from rtp_course.notebook.demos import rotation as demo
    out = launch(demo.async_probe, 2, args=(1.0, 0.3), timeout=60, results="objects",
                 env={"RTP_COURSE_IMPL": str(nccl_like_rotation)})
    rank1 = out[1]
    assert rank1["done_when_returned"] is False and rank1["returned_after_ms"] < 150, rank1
    assert rank1["arrived_after_ms"] >= 250 and rank1["received_from"] == 0, rank1
    assert out[0]["late_ms"] == 300 and rank1["source"] == 0


def test_a_gpu_timeline_region_lasts_until_the_device_is_done(monkeypatch):
    """NCCL's wait() returns at once and kernels run after the host moved on: a timeline that
    closed its regions on the host showed no wait and launch-sized compute on a GPU. Where the
    rank uses CUDA, each region now ends by synchronizing the stream (here a fake GPU that
    takes 80 ms to drain)."""
    from rtp_course.notebook import trace

    class InstantWait:                        # NCCL: wait() only orders the streams
        def wait(self):
            return torch.zeros(1)

        def is_completed(self):
            return False
    monkeypatch.setattr(trace, "_synchronize", lambda: time.sleep(0.08))
    with trace.Trace(synchronize=True) as tr:
        tr.restart()
        with tr.span("compute", "shard 0"):
            pass                              # kernels queued: the host is done at once
        tr.wait(InstantWait(), "shard 0")
    spans = {i.kind: i.end - i.start for i in tr.intervals()}
    assert spans["compute"] >= 0.07 and spans["wait"] >= 0.07, spans


def test_the_cnn_comparison_with_ddp_runs_without_tf32():
    """TF32 (cuDNN's default for fp32 convolutions on recent GPUs) put RTP and DDP about 1e-3
    apart where notebook 06 says 1e-5. The comparison now runs with TF32 off, and says so."""
    from rtp_course.notebook.demos import rtp as demo
    out = launch(demo.train_against_ddp, 1, args=("cnn", 1), timeout=120, results="objects",
                 env={"RTP_COURSE_IMPL": "solutions"})[0]
    assert out["tf32"] == {"matmul": False, "cudnn": False}
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        with demo.without_tf32():
            assert not torch.backends.cudnn.allow_tf32
        assert torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("gpus, says", [(0, "CPU processes with gloo"), (2, "this machine has 2"),
                                        (4, "GPUs with NCCL, one GPU per rank (4 visible)")])
def test_a_check_cell_says_what_runs(monkeypatch, gpus, says):
    """Check cells said 'local CPU run', and ran on NCCL on a node with 4 GPUs or more."""
    from rtp_course.notebook import where_checks_run
    from rtp_course.runtime import devices
    monkeypatch.delenv(devices.SHARE, raising=False)
    monkeypatch.setattr(devices, "_count", lambda visible: gpus)
    assert says in where_checks_run()
    sources = (ROOT / "scripts" / "notebook_src").glob("*.py")
    assert not [p.name for p in sources if "local CPU run" in p.read_text()]
