"""The launcher: results from every rank, failures named by rank, hangs bounded, nothing left behind."""
import os
import threading
import time

import psutil
import pytest

import launch_targets as t
from rtp_course.runtime.launcher import LaunchError, RankFailed, RankHung, launch
from rtp_course.runtime.torchrun import env_rank_info


HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker", "rtp_course.runtime.reaper")


def children():
    """Live descendants, except the long-lived helpers (forkserver, resource tracker, the
    launcher's guardian): they end with us."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and not any(h in " ".join(c.cmdline()) for h in HELPERS):
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def test_every_rank_returns_its_result():
    out = launch(t.rank_and_sum, 3)
    assert [o["rank"] for o in out] == [0, 1, 2]
    assert all(o["world"] == 3 and o["sum"] == 3.0 for o in out)
    assert len({o["pid"] for o in out}) == 3


@pytest.mark.parametrize("bad", [0, 2])
def test_exception_names_its_rank_and_ends_the_others(bad):
    with pytest.raises(RankFailed) as info:
        launch(t.raise_on_rank, 3, args=(bad,), timeout=60)
    assert info.value.rank == bad
    assert f"boom on rank {bad}" in info.value.traceback
    assert "launch_targets.py" in info.value.traceback
    assert children() == []


def test_hung_rank_is_stopped_with_its_stack(tmp_path):
    start = time.monotonic()
    with pytest.raises(RankHung) as info:
        launch(t.skip_collective, 2, args=(str(tmp_path),), timeout=4)
    assert time.monotonic() - start < 60
    assert info.value.stuck == [0, 1]
    assert "all_reduce" in info.value.stacks[1]          # rank 1 waits in the collective
    assert "skip_collective" in info.value.stacks[0]
    for r in (0, 1):
        pid = int((tmp_path / f"{r}.pid").read_text())
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert children() == []


def test_a_rank_that_finished_waits_for_its_peers_before_it_exits():
    assert launch(t.first_done_waits, 2) == [True, True], "rank 0 exited while rank 1 ran"


def test_a_hang_names_only_the_ranks_that_had_not_finished():
    with pytest.raises(RankHung) as info:
        launch(t.done_while_a_peer_hangs, 2, timeout=4)
    assert info.value.stuck == [1]
    assert children() == []


def test_two_launches_at_once_do_not_collide():
    results, errors = [], []

    def go():
        try:
            results.append(launch(t.rank_and_sum, 2))
        except Exception as e:  # pragma: no cover - shown by the assert below
            errors.append(e)
    threads = [threading.Thread(target=go) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and len(results) == 2
    assert all(r[0]["sum"] == 1.0 for r in results)


@pytest.mark.parametrize("kwargs, words", [
    ({"world_size": 0}, "positive integer"),
    ({"world_size": 2, "backend": "mpi"}, "unknown backend"),
    ({"world_size": 2, "backend": "nccl"}, "one GPU per rank"),
])
def test_bad_requests_get_clear_errors(kwargs, words):
    with pytest.raises(LaunchError, match=words):
        launch(t.rank_and_sum, **kwargs)


def test_env_rank_info_reads_torchrun_and_slurm():
    assert env_rank_info({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == (3, 8, 1)
    assert env_rank_info({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2"}) == (5, 6, 2)
    with pytest.raises(LaunchError, match="torchrun"):
        env_rank_info({})


def test_same_code_runs_under_torchrun(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).with_name("launch_targets.py")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "3", str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1",
                            "TMPDIR": str(tmp_path)})   # torchrun's log folder stays there
    assert p.returncode == 0, p.stderr[-2000:]
    import re  # the ranks share one pipe: their lines may interleave
    found = sorted(re.findall(r"rank \d/3 on cpu: sum \d+", p.stdout))
    assert found == [f"rank {r}/3 on cpu: sum 6" for r in range(3)]
