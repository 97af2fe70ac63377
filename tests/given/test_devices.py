"""GPUs counted without initialising CUDA, no CUDA in a process that forks ranks, and a rank's
GPU under srun/torchrun: the first GPU run must work, so these are proven on CPU."""
import datetime
import subprocess
import sys
import textwrap

import pytest
import torch

from rtp_course.runtime import devices, launcher


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


def test_a_process_that_forks_ranks_cannot_initialise_cuda():
    out = run_python("""
        import torch
        from rtp_course.runtime import devices
        devices.forbid_cuda("the test's forking process")
        print("available", torch.cuda.is_available(), torch.cuda.device_count())  # from NVML
        for call in (torch.cuda.init, lambda: torch.cuda.set_device(0),
                     lambda: torch.zeros(1, device="cuda"), torch.cuda.synchronize):
            try:
                call()
            except devices.CudaInForkingProcess as e:
                print("refused:", e)
            except (RuntimeError, AssertionError) as e:   # the CPU build's own refusal
                print("cpu build:", type(e).__name__)
        print("count", devices.gpu_count())
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "available False 0", out.stdout
    assert sum(line.startswith("refused:") for line in lines) >= 3, out.stdout
    assert "the test's forking process, which forks the ranks" in out.stdout
    assert "gpu_count()" in out.stdout
    assert lines[-1] == "count 0"


def test_the_warm_servers_work_touches_no_cuda():
    """The warm server computes every public check's expectations (serial torch, seeded), then
    forks the ranks' forkserver: a CUDA call there kills every rank on a GPU node."""
    out = run_python("""
        import torch
        from rtp_course.runtime import devices
        devices.forbid_cuda("the warm check server")
        from rtp_course.checker import common, judging
        common.manual_seed(3)
        judging.precompute_expectations()
        print("ok", len(judging.PRECOMPUTED))
    """)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-3000:]


def test_gpu_count_on_a_cpu_build_is_zero_without_touching_cuda():
    assert devices.gpu_count() == 0
    assert not torch.cuda.is_initialized()


@pytest.mark.parametrize("visible, local_rank, on_node, expected", [
    (1, 0, None, 0), (1, 3, None, 0),          # srun --gpus-per-task=1: every task sees one GPU
    (4, 3, 4, 3), (4, 0, None, 0),             # the node's GPUs: the local rank's own
])
def test_a_local_rank_maps_onto_the_visible_gpus(monkeypatch, visible, local_rank, on_node,
                                                 expected):
    monkeypatch.setattr(devices, "gpu_count", lambda: visible)
    assert devices.local_device(local_rank, on_node) == torch.device("cuda", expected)


def test_a_rank_without_a_gpu_of_its_own_is_told_what_to_ask_slurm_for(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    with pytest.raises(RuntimeError, match=r"local rank 3 has no GPU of its own: this process "
                                           r"sees 2 GPU\(s\).*--gpus-per-task=1"):
        devices.local_device(3)


@pytest.mark.parametrize("tasks_per_node, node, local_rank", [
    ({"SLURM_TASKS_PER_NODE": "4"}, "0", 2), ({"SLURM_TASKS_PER_NODE": "4(x2)"}, "1", 3),
    ({"SLURM_NTASKS_PER_NODE": "4"}, "0", 1), ({"SLURM_STEP_TASKS_PER_NODE": "2,4"}, "1", 3)])
def test_srun_tasks_with_two_gpus_each_take_their_first(monkeypatch, tasks_per_node, node,
                                                       local_rank):
    """srun --gpus-per-task=2 binds two GPUs to each task (CUDA_VISIBLE_DEVICES holds its own
    two): every task's rank takes the first. The old mapping raised 'local rank 2 has no GPU
    of its own' from local rank 2 on, and gave local rank 1 its task's second GPU."""
    for k in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
              "SLURM_TASKS_PER_NODE", devices.SHARE):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_GPUS_PER_TASK", "2")
    monkeypatch.setenv("SLURM_NODEID", node)
    for k, v in tasks_per_node.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    assert devices.local_device(local_rank) == torch.device("cuda", 0)


def test_ranks_that_see_every_gpu_of_the_node_keep_their_own(monkeypatch):
    """torchrun on a node of 4 GPUs (LOCAL_WORLD_SIZE=4): local rank r takes GPU r (as before:
    the new per-task rule must not catch the batch step's SLURM_GPUS_PER_TASK)."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("SLURM_GPUS_PER_TASK", "1")       # the batch step's, seen by torchrun
    monkeypatch.delenv("RTP_COURSE_SHARE_GPU", raising=False)
    monkeypatch.setattr(devices, "gpu_count", lambda: 4)
    assert [devices.local_device(r).index for r in range(4)] == [0, 1, 2, 3]


def test_sharing_one_gpu_is_an_explicit_opt_in_with_a_host_id_per_rank(monkeypatch):
    """RTP_COURSE_SHARE_GPU=1 (scripts/gpu_proof.sh): 4 ranks per GPU pass the launcher's
    count, all map onto the one GPU, and each rank gets its own NCCL host id and loopback
    sockets; without it nothing changes. The old launcher refused a second rank."""
    monkeypatch.setattr(devices, "_count", lambda visible: 1)
    monkeypatch.delenv(devices.SHARE, raising=False)
    assert devices.gpu_count() == 1 and devices.shared_gpu_environment(1, "nccl") == {}
    with pytest.raises(launcher.LaunchError):
        launcher.validate(2, "nccl")
    monkeypatch.setenv(devices.SHARE, "1")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")      # the user's own setting is kept
    launcher.validate(4, "nccl")
    assert devices.physical_gpu_count() == 1
    assert [devices.local_device(r, 4).index for r in range(4)] == [0, 0, 0, 0]
    env = devices.shared_gpu_environment(3, "nccl")
    assert env["NCCL_HOSTID"] == "rank-3" and "NCCL_SOCKET_IFNAME" not in env
    assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1"
    assert devices.shared_gpu_environment(3, "gloo") == {}


def test_nccl_with_fewer_gpus_than_ranks_refuses_in_one_sentence(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    with pytest.raises(launcher.LaunchError) as e:
        launcher.validate(4, "nccl")
    assert "NCCL needs one GPU per rank: 4 rank(s) asked for, 2 GPU(s) visible" in str(e.value)
    assert "--gpus-per-task=1" in str(e.value) and "\n" not in str(e.value)


def test_the_default_backend_is_one_for_the_whole_run(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    assert [launcher.default_backend(n) for n in (1, 2, 3)] == ["nccl", "nccl", "gloo"]
    from rtp_course.checker import engine
    seen = []
    monkeypatch.setattr(engine, "_run_sizes", lambda *a: seen.append(a[5]))
    monkeypatch.setattr(engine, "validate", lambda *a: None)
    engine.run(["comm"], world_sizes=(1, 2, 3, 4))
    assert seen == ["gloo"]        # not NCCL at 1-2 ranks and gloo at 3-4


def test_nccl_communicators_are_created_eagerly_on_the_ranks_gpu(monkeypatch):
    """device_id makes NCCL build the communicator in init_process_group (and in every later
    new_group), not at a group's first operation while the peers already wait in it."""
    calls = {}
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set_device", d))
    monkeypatch.setattr(launcher.dist, "init_process_group",
                        lambda backend, **kw: calls.update(backend=backend, **kw))
    from rtp_course.runtime import rank
    device = rank._init_group("nccl", None, 1, 2, 1, 30.0, ranks_on_node=2)
    assert device == torch.device("cuda", 1) == calls["device_id"] == calls["set_device"]
    assert calls["backend"] == "nccl" and calls["timeout"] == datetime.timedelta(seconds=30)


def test_srun_tasks_that_see_one_gpu_each_take_device_zero(monkeypatch):
    calls = {}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_LOCALID", "3")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set_device", d))
    monkeypatch.setattr(launcher.dist, "init_process_group",
                        lambda backend, **kw: calls.update(backend=backend, **kw))
    rank, world_size, device = launcher.init_from_env()
    assert (rank, world_size, device) == (3, 4, torch.device("cuda", 0))
    assert calls["backend"] == "nccl" and calls["device_id"] == torch.device("cuda", 0)


def _cuda_in_a_rank(rank, world_size):
    return [torch.cuda.is_available(), devices.cuda_forbidden()]


def test_a_rank_may_use_cuda_although_its_forkserver_may_not():
    assert launcher.launch(_cuda_in_a_rank, 1, timeout=60) == [[False, None]]


def _groups_made_then_destroyed(rank, world_size):
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from rtp_course.checker.worker import _destroy_groups_since
    before = set(c10d._world.pg_map)
    dist.new_group([0, 1])                    # the check's, and one the code under test makes
    dist.new_group([0])
    made = len(c10d._world.pg_map) - len(before)
    _destroy_groups_since(before)
    return [made, set(c10d._world.pg_map) == before]


def test_groups_made_during_a_check_are_destroyed_with_it():
    """What a checker rank does after each NCCL check: a communicator holds GPU memory."""
    from rtp_course.checker.group import LAUNCH_ERRORS
    for attempt in (1, 2):   # gloo's pairs can lose a peer on a loaded machine, as the checker knows
        try:
            made = launcher.launch(_groups_made_then_destroyed, 2, timeout=60)
            break
        except launcher.RankFailed as e:
            if attempt == 2 or not any(err in str(e) for err in LAUNCH_ERRORS):
                raise
    # rank 1 is not in [0]: new_group gives it no group to destroy
    assert made == [[2, True], [1, True]]


def test_checker_ranks_on_nccl_block_the_host_in_wait(monkeypatch):
    """TORCH_NCCL_BLOCKING_WAIT=1: a stuck transfer is seen in the wait() the status names."""
    from rtp_course.checker import engine, group
    seen = {}
    monkeypatch.setattr(devices, "gpu_count", lambda: 4)
    monkeypatch.setattr(group, "launch", lambda *a, **kw: seen.update(kw) or [])
    engine.run(["comm"], world_sizes=(2,), backend="nccl", only=["Duplication"])
    assert seen["backend"] == "nccl" and seen["env"]["TORCH_NCCL_BLOCKING_WAIT"] == "1"


def _return_rank(rank, world_size):
    return rank


def test_a_launch_leaves_no_cgroup_behind():
    """Where the machine lets the course make cgroups, each launch's is removed with it."""
    from rtp_course.runtime import cgroup
    probe = cgroup.create("probe")
    if probe is None:
        pytest.skip("no cgroup can be made here: launches fall back to the sweep")
    cgroup.kill(probe)
    own = cgroup._own()
    pattern = f"rtp-launch-{__import__('os').getpid()}-*"
    before = set(own.glob(pattern))
    assert launcher.launch(_return_rank, 2, timeout=60) == [0, 1]
    assert set(own.glob(pattern)) - before == set()
    assert not probe.exists()


def test_a_refused_backend_leaves_no_run_directory(monkeypatch):
    import glob
    import os
    import tempfile
    from rtp_course.checker import engine
    pattern = os.path.join(tempfile.gettempdir(), f"rtp-check-*-o{os.getpid()}-*")
    before = set(glob.glob(pattern))
    monkeypatch.setattr(engine, "validate", lambda *a: None)    # let it reach the launcher
    with pytest.raises(launcher.LaunchError, match="NCCL needs one GPU per rank"):
        engine.run(["comm"], world_sizes=(2,), backend="nccl", only=["Duplication"])
    assert set(glob.glob(pattern)) == before


def _returns_sparse_and_views(rank, world_size):
    return {"sparse": torch.eye(3).to_sparse(), "grad": torch.ones(2, requires_grad=True) * 2}


def test_what_a_rank_returns_comes_back_on_the_cpu_whatever_its_layout():
    out = launcher.launch(_returns_sparse_and_views, 1, timeout=60, results="objects")[0]
    assert out["sparse"].layout == torch.sparse_coo and torch.equal(out["sparse"].to_dense(), torch.eye(3))
    assert not out["grad"].requires_grad and type(out["grad"]) is torch.Tensor
