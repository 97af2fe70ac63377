"""`rtp-course bench`: every strategy runs on 2 ranks, the outputs hold every category,
the sharded strategies really hold about 1/N of DDP's states, and all train the same model.
No timing assertions: the machine is shared."""
import csv
import datetime

import pytest
import torch.distributed as dist

from rtp_course.training import bench, strategies
from rtp_course import cli
from rtp_course.course import todo
from rtp_course.models import build_model

STRATEGIES = bench.DEFAULT_STRATEGIES        # ddp fsdp tp rtp fsdp_yours


@pytest.fixture(scope="session")  # one build per test process (conftest: SHARED_FIXTURES)
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = cli.main(["bench", "--world-size", "2", "--tiny", "--warmup", "1", "--steps", "2",
                     "--impl", "solutions", "--timeout", "300", "--out", str(out),
                     "--json", str(out / "bench.json")])
    with open(out / "bench.csv") as fh:
        rows = list(csv.DictReader(fh))
    return code, out, {(r["strategy"], int(r["rank"])): r for r in rows}


def _bytes(row, *categories):
    return sum(int(row[c]) for c in categories)


def test_every_strategy_runs_and_writes_csv_png_and_table(run, capsys):
    code, out, rows = run
    assert code == 0
    assert set(rows) == {(s, r) for s in STRATEGIES for r in (0, 1)}
    for row in rows.values():
        assert row["status"] == "ok"
        for c in bench.CATEGORIES:
            assert row[c] != "" and int(row[c]) >= 0, c
        assert int(row["parameters"]) > 0 and int(row["activations"]) > 0
        assert float(row["step_time_s"]) > 0
    for s in ("ddp", "fsdp", "rtp", "fsdp_yours"):  # buckets, gathered units, in-flight shards
        assert int(rows[s, 0]["communication"]) > 0, s
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "bench.txt").read_text()
    assert "46.3 GB" in text and "NOT measured here" in text
    for label in ("DDP", "FSDP", "TP", "RTP", "FSDP (yours)"):
        assert f"\n{label} " in text


def test_step_times_are_interleaved_and_paired_against_ddp(run):
    import json
    _, out, _ = run
    doc = json.loads((out / "bench.json").read_text())
    assert doc["interleaved"] is True and doc["world_size"] == 2
    times = doc["step_time"]
    assert set(times) == set(STRATEGIES)
    for s, t in times.items():
        assert len(t["steps_s"]) == 2 and t["median_s"] > 0
        assert t["ratio_low"] <= t["ratio"] <= t["ratio_high"]
    assert times["ddp"]["ratio"] == 1.0
    assert {r["strategy"] for r in doc["rows"]} == set(STRATEGIES)
    assert "vs DDP (range)" in (out / "bench.txt").read_text()


def test_paired_ratios_come_from_the_slowest_rank_of_each_step():
    from rtp_course.training import timing
    per_rank = [{"ddp": [1.0, 2.0, 1.0], "rtp": [1.5, 2.4, 1.2]},
                {"ddp": [1.2, 1.0, 1.0], "rtp": [1.2, 3.0, 1.3]}]
    t = timing.paired(per_rank)
    assert t["ddp"]["steps_s"] == [1.2, 2.0, 1.0] and t["ddp"]["ratio"] == 1.0
    assert t["rtp"]["steps_s"] == [1.5, 3.0, 1.3]
    assert t["rtp"]["ratio"] == 1.3 and t["rtp"]["ratio_low"] == 1.25 and t["rtp"]["ratio_high"] == 1.5


def test_rtp_and_fsdp_hold_about_a_half_of_ddp_states_on_two_ranks(run):
    _, _, rows = run
    states = ("parameters", "gradients", "optimizer")
    for rank in (0, 1):
        ddp = _bytes(rows["ddp", rank], *states)
        assert _bytes(rows["rtp", rank], *states) < 0.6 * ddp
        assert _bytes(rows["fsdp", rank], *states) < 0.6 * ddp
        assert _bytes(rows["fsdp_yours", rank], *states) < 0.6 * ddp
        for s in ("fsdp", "fsdp_yours"):
            assert int(rows[s, rank]["parameters"]) < 0.6 * int(rows["ddp", rank]["parameters"])


def test_every_strategy_trains_the_same_model(run):
    _, _, rows = run
    start = [float(r["loss_start"]) for r in rows.values()]
    end = [float(r["loss_end"]) for r in rows.values()]
    assert max(start) - min(start) < 1e-5
    assert max(end) - min(end) < 1e-4
    assert max(end) < min(start)            # and it learned something in two steps


@pytest.fixture
def one_rank_group():
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    yield
    dist.destroy_process_group()


def test_a_stub_is_skipped_with_the_notebook_to_do(one_rank_group, monkeypatch):
    monkeypatch.setenv("RTP_COURSE_IMPL", "rtp_course")    # the worker sets it: restore it after
    from rtp_course.training.train import DEFAULT_CONFIGS, Task
    task = Task("lm", dict(DEFAULT_CONFIGS["lm"], vocab_size=32, ninp=16, nhid=32, nhead=2,
                           num_decoder_layers=1, seq_len=4), global_batch=2)
    opts = dict(task=task, strategies=["rtp"], steps=1, warmup=1, optimizer="adam", lr=1e-3,
                impl="rtp_course")        # the student edition: flyweight is a stub
    row = bench._worker(0, 1, opts)[0]
    assert row["status"].startswith("skipped: implement flyweight.RotatedTensorParallel in "
                                    "rtp_course/flyweight.py first (task E5.2, notebook 06 section 3)")
    info = dict(task=task, backend="gloo", world_size=1, steps=1, warmup=1, batch_size=2,
                optimizer="adam", num_params=1, wall_s=0.0)
    assert "implement flyweight.RotatedTensorParallel" in bench.report([row], info)


@pytest.mark.parametrize("strategy, exercise, notebook", [
    ("rtp", "flyweight", "06"), ("tp", "tensor_parallel", "04"), ("dp", "data_parallel", "02"),
    ("fsdp_yours", "sharding", "09")])
def test_wrap_says_which_exercise_to_implement(monkeypatch, strategy, exercise, notebook):
    monkeypatch.setenv("RTP_COURSE_IMPL", "rtp_course")     # stubs raise before communicating
    with pytest.raises(todo.ExerciseNotImplemented,
                       match=f"implement {exercise}\\.\\w+ in rtp_course/{exercise}.py first "
                             f"\\(task E\\d\\.\\d, notebook {notebook} section"):
        strategies.wrap(build_model("lm", seed=0, tiny=True), strategy)


def test_zero1_is_ddps_training_with_the_optimizer_sharded(tmp_path, monkeypatch):
    """ZeRO-1 (your ShardedOptimizer around Adam) trains DDP's model; on 4 ranks it keeps
    DDP's parameters and gradients and, for the optimizer, 1/4 of Adam's state plus the
    shards and their gradients: half of DDP's optimizer bytes. A stub says what to do."""
    code = cli.main(["bench", "--world-size", "4", "--tiny", "--warmup", "1", "--steps", "1",
                     "--strategies", "ddp", "zero1", "--sequential", "--impl", "solutions",
                     "--timeout", "300", "--out", str(tmp_path)])
    with open(tmp_path / "bench.csv") as fh:
        rows = {(r["strategy"], int(r["rank"])): r for r in csv.DictReader(fh)}
    assert code == 0 and rows["zero1", 0]["status"] == "ok"
    ddp, zero = rows["ddp", 0], rows["zero1", 0]
    assert (ddp["parameters"], ddp["gradients"]) == (zero["parameters"], zero["gradients"])
    assert int(zero["optimizer"]) < 0.6 * int(ddp["optimizer"])
    assert abs(float(zero["loss_end"]) - float(ddp["loss_end"])) < 1e-4
    monkeypatch.setenv("RTP_COURSE_IMPL", "rtp_course")
    with pytest.raises(todo.ExerciseNotImplemented, match=r"implement sharding\.ShardedOptimizer "
                       r"in rtp_course/sharding.py first \(task E7\.1, notebook 09 section 2\)"):
        strategies.optimizer("zero1", build_model("lm", seed=0, tiny=True).parameters())


def test_sequential_timing_still_pairs_step_k_with_ddp(tmp_path):
    import json
    code = cli.main(["bench", "--world-size", "2", "--tiny", "--warmup", "1", "--steps", "2",
                     "--strategies", "ddp", "rtp", "--sequential", "--impl", "solutions",
                     "--timeout", "300", "--out", str(tmp_path), "--json", str(tmp_path / "b.json")])
    doc = json.loads((tmp_path / "b.json").read_text())
    assert code == 0 and doc["interleaved"] is False
    assert set(doc["step_time"]) == {"ddp", "rtp"} and doc["step_time"]["ddp"]["ratio"] == 1.0
    assert "(--sequential)" in (tmp_path / "bench.txt").read_text()


def test_the_gpu_preset_keeps_a_data_centre_gpu_busy():
    """The benchmark's only model was a few million fp32 parameters at batch 8: on a GPU it
    measures kernel launches. `--preset gpu`: bf16, hidden size 1024, sequence 512, ~370M
    parameters; a flag given with it wins."""
    import torch
    from rtp_course.training.train import model_config
    args = bench.add_bench_arguments(__import__("argparse").ArgumentParser()).parse_args(
        ["--preset", "gpu"])
    bench.apply_preset(args)
    config = model_config(args)
    assert (args.model, args.dtype) == ("lm", "bfloat16")
    assert config["ninp"] >= 1024 and config["seq_len"] >= 512
    with torch.device("meta"):
        params = sum(p.numel() for p in build_model("lm", seed=0, **config).parameters())
    assert params > 300e6
    args = bench.add_bench_arguments(__import__("argparse").ArgumentParser()).parse_args(
        ["--preset", "gpu", "--num-decoder-layers", "2", "--batch-size", "2"])
    bench.apply_preset(args)
    assert (model_config(args)["num_decoder_layers"], args.batch_size) == (2, 2)
    plain = bench.add_bench_arguments(__import__("argparse").ArgumentParser()).parse_args([])
    bench.apply_preset(plain)
    assert (plain.model, plain.batch_size, plain.dtype) == ("lm", 8, "float32")


def test_bf16_parameters_hold_half_the_bytes(run, tmp_path):
    code = cli.main(["bench", "--world-size", "2", "--tiny", "--warmup", "1", "--steps", "1",
                     "--strategies", "ddp", "rtp", "--dtype", "bfloat16", "--sequential",
                     "--impl", "solutions", "--timeout", "300", "--out", str(tmp_path)])
    with open(tmp_path / "bench.csv") as fh:
        rows = {(r["strategy"], int(r["rank"])): r for r in csv.DictReader(fh)}
    assert code == 0 and rows["ddp", 0]["dtype"] == "bfloat16"
    for s in ("ddp", "rtp"):
        assert 2 * int(rows[s, 0]["parameters"]) == int(run[2][s, 0]["parameters"]), s


def test_memory_as_the_device_sees_it_is_reported_beside_the_categories(monkeypatch):
    """cuda_max_allocated leaves out the CUDA context and NCCL's buffers: the device's own
    count (mem_get_info: total - free) goes in the table, with what it includes."""
    import torch
    from rtp_course.training import memory
    from rtp_course.training.train import Task
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (30 << 30, 80 << 30))
    assert memory.device_used_bytes(torch.device("cuda", 0)) == 50 << 30
    assert memory.device_used_bytes("cpu") is None
    row = dict(strategy="ddp", rank=0, status="ok", step_time_s=0.1, loss_start=1.0,
               loss_end=0.9, cuda_max_allocated=20 << 30, device_base=2 << 30,
               device_used=50 << 30, **{c: 1 << 20 for c in bench.CATEGORIES})
    row["total"] = sum(row[c] for c in bench.CATEGORIES)
    info = dict(task=Task("lm", {}, 16), backend="nccl", world_size=2, steps=1, warmup=1,
                batch_size=8, optimizer="adam", num_params=1, wall_s=0.0, dtype="bfloat16",
                preset="gpu")
    text = bench.report([row], info)
    head = next(line for line in text.splitlines() if line.startswith("strategy"))
    assert "cuda peak" in head and "device" in head.split("cuda peak")[1]
    assert "53.7 GB" in text and "CUDA context, NCCL's buffers" in text and "preset gpu" in text


# ------------------------------------------------------------------ E9's and E10's rows
M = 4                                      # micro-batches: more than the 2 stages


@pytest.fixture(scope="module")
def own_rows(tmp_path_factory):
    """GPipe, 1F1B and EP (its DDP baseline added by the bench) at 2 ranks, the reference."""
    import json
    out = tmp_path_factory.mktemp("bench_own")
    code = cli.main(["bench", "--world-size", "2", "--tiny", "--warmup", "1", "--steps", "2",
                     "--strategies", "pp_gpipe", "pp_1f1b", "ep", "--microbatches", str(M),
                     "--impl", "solutions", "--timeout", "300", "--out", str(out),
                     "--json", str(out / "bench.json")])
    with open(out / "bench.csv") as fh:
        rows = {(r["strategy"], int(r["rank"])): r for r in csv.DictReader(fh)}
    return code, rows, json.loads((out / "bench.json").read_text()), (out / "bench.txt").read_text()


def test_pipeline_rows_hold_what_their_schedule_allows(own_rows):
    """Stage r holds M micro-batches' activations under GPipe, min(N - r, M) under 1F1B: a
    count, exact. A 1F1B that held M would fail here (M = 4 > N = 2)."""
    code, rows, _, _ = own_rows
    assert code == 0
    n = 2
    for r in range(n):
        gpipe, one = rows["pp_gpipe", r], rows["pp_1f1b", r]
        assert gpipe["status"] == one["status"] == "ok"
        assert int(gpipe["microbatches_held"]) == M
        assert int(one["microbatches_held"]) == min(n - r, M)
        assert int(gpipe["held_expected"]) == M and int(one["held_expected"]) == min(n - r, M)
        assert int(one["activations"]) < int(gpipe["activations"])      # bytes follow the count
        assert int(gpipe["parameters"]) > 0 and int(gpipe["optimizer"]) > 0


def test_pipeline_rows_measure_a_bubble_against_the_formula(own_rows):
    _, rows, doc, text = own_rows
    for s in ("pp_gpipe", "pp_1f1b"):
        for r in (0, 1):
            assert 0 <= float(rows[s, r]["bubble"]) <= 1          # a timeline: not exact
            assert float(rows[s, r]["bubble_ideal"]) == pytest.approx((2 - 1) / (M + 2 - 1))
        assert "ratio" not in doc["step_time"][s]                # no DDP of the blocks here
        assert doc["step_time"][s]["median_s"] > 0
    assert "the first stage held 4 micro-batch(es) at once (expected M = 4)" in text
    assert "the first stage held 2 micro-batch(es) at once (expected min(N, M) = 2)" in text
    assert "ideal (N-1)/(M+N-1) = 0.20" in text
    # both schedules train the same model on the same data
    for k in ("loss_start", "loss_end"):
        assert abs(float(rows["pp_gpipe", 0][k]) - float(rows["pp_1f1b", 0][k])) < 1e-6
    assert float(rows["pp_1f1b", 0]["loss_end"]) < float(rows["pp_1f1b", 0]["loss_start"])


def test_expert_parallelism_against_the_moe_layer_under_ddp(own_rows):
    """EP keeps E/N experts a rank (the router replicated), DDP all of them; both train the
    same layer, and EP's step time is paired with that DDP's, not the LM's."""
    _, rows, doc, text = own_rows
    states = ("parameters", "gradients", "optimizer")
    for r in (0, 1):
        ep, ddp = rows["ep", r], rows["ep_ddp", r]
        assert ep["status"] == ddp["status"] == "ok" and ep["model"] == "moe"
        assert _bytes(ep, *states) < 0.6 * _bytes(ddp, *states)
        assert int(ddp["communication"]) > 0                     # DDP's buckets
        assert abs(float(ep["loss_start"]) - float(ddp["loss_start"])) < 1e-5
        assert abs(float(ep["loss_end"]) - float(ddp["loss_end"])) < 1e-4
    assert float(rows["ep", 0]["loss_end"]) < float(rows["ep", 0]["loss_start"])
    assert doc["step_time"]["ep_ddp"]["ratio"] == 1.0 and "ratio" in doc["step_time"]["ep"]
    assert [r["strategy"] for r in doc["rows"] if r["rank"] == 0] == ["pp_gpipe", "pp_1f1b",
                                                                      "ep_ddp", "ep"]
    assert "\nEP (MoE) " in text and "\nMoE DDP " in text and "8 experts, top-2" in text


def test_paired_ratios_take_each_rows_own_base():
    from rtp_course.training import timing
    t = timing.paired([{"ddp": [1.0], "ep_ddp": [2.0], "ep": [3.0], "pp_gpipe": [4.0]}],
                      bases={"ep": "ep_ddp", "ep_ddp": "ep_ddp", "pp_gpipe": None})
    assert t["ep"]["ratio"] == 1.5 and t["ep_ddp"]["ratio"] == 1.0
    assert "ratio" not in t["pp_gpipe"] and t["ddp"]["ratio"] == 1.0


def _wrong_pipeline(tmp_path):
    """The reference, but its 1F1B is GPipe: right gradients, M micro-batches held."""
    import shutil
    from rtp_course.course.material import solutions_dir
    impl = tmp_path / "impl"
    shutil.copytree(solutions_dir(), impl)
    with open(impl / "pipeline.py", "a") as fh:
        fh.write("\n\ndef one_f_one_b(stage, inputs, targets, loss_fn, num_microbatches, "
                 "group=None):\n    return gpipe(stage, inputs, targets, loss_fn, "
                 "num_microbatches, group)\n")
    return impl


@pytest.mark.parametrize("impl, held", [("solutions", 1), ("wrong", M)])
def test_a_one_f_one_b_that_holds_m_micro_batches_is_seen(one_rank_group, monkeypatch, tmp_path,
                                                         impl, held):
    """One stage (N = 1): 1F1B holds min(N, M) = 1 micro-batch; one that runs GPipe's order
    holds M, and the row says so beside what it should hold."""
    import torch
    from rtp_course.models import TINY_CONFIGS
    from rtp_course.training import bench_rows
    from rtp_course.training.train import Task
    monkeypatch.setenv("RTP_COURSE_IMPL", str(_wrong_pipeline(tmp_path)) if impl == "wrong"
                       else impl)
    opts = dict(task=Task("lm", dict(TINY_CONFIGS["lm"]), global_batch=2), optimizer="adam",
                lr=1e-3, microbatches=M)
    w = bench_rows.workload("pp_1f1b", opts, torch.device("cpu"))
    state = w.build()
    row = w.instrumented_step(state, w.batch(0))
    assert (row["microbatches_held"], row["held_expected"]) == (held, 1)
    for k in range(2):
        w.step(state, w.batch(k))
    row.update(w.timed(state, 2), strategy="pp_1f1b", rank=0, status="ok", about=w.describe())
    assert 0 <= row["bubble"] <= 1 and row["bubble_ideal"] == 0
    said = "\n".join(bench._own_rows([row]))
    assert f"held {held} micro-batch(es) at once (expected min(N, M) = 1" in said
    assert ("MORE than the schedule allows" in said) == (impl == "wrong")


@pytest.mark.parametrize("strategy, exercise, task", [
    ("pp_gpipe", "pipeline.PipelineStage", "E9.1, notebook 11"),
    ("ep", "experts.ExpertParallelMoE", "E10.2, notebook 12")])
def test_own_rows_say_which_exercise_to_implement(one_rank_group, monkeypatch, strategy,
                                                  exercise, task):
    import torch
    from rtp_course.models import TINY_CONFIGS
    from rtp_course.training import bench_rows
    from rtp_course.training.train import Task
    monkeypatch.setenv("RTP_COURSE_IMPL", "rtp_course")
    opts = dict(task=Task("lm", dict(TINY_CONFIGS["lm"]), global_batch=2), optimizer="adam",
                lr=1e-3)
    with pytest.raises(todo.ExerciseNotImplemented, match=f"implement {exercise} in "
                       f"rtp_course/.*py first \\(task {task}"):
        bench_rows.workload(strategy, opts, torch.device("cpu")).build()


@pytest.mark.extended
def test_at_four_stages_each_holds_what_its_schedule_allows(tmp_path):
    """Four stages, eight micro-batches: GPipe's stages each hold 8, 1F1B's stage r holds
    min(4 - r, 8) = 4, 3, 2, 1; EP keeps a quarter of the experts a rank."""
    m, n = 8, 4
    code = cli.main(["bench", "--world-size", str(n), "--tiny", "--num-decoder-layers", str(n),
                     "--warmup", "1", "--steps", "1", "--sequential", "--microbatches", str(m),
                     "--strategies", "pp_gpipe", "pp_1f1b", "ep", "--impl", "solutions",
                     "--timeout", "300", "--out", str(tmp_path)])
    with open(tmp_path / "bench.csv") as fh:
        rows = {(r["strategy"], int(r["rank"])): r for r in csv.DictReader(fh)}
    assert code == 0
    for r in range(n):
        assert int(rows["pp_gpipe", r]["microbatches_held"]) == m
        assert int(rows["pp_1f1b", r]["microbatches_held"]) == min(n - r, m)
        assert 0 <= float(rows["pp_1f1b", r]["bubble"]) <= 1
        assert float(rows["pp_1f1b", r]["bubble_ideal"]) == pytest.approx((n - 1) / (m + n - 1))
        experts = ("parameters", "gradients", "optimizer")
        assert _bytes(rows["ep", r], *experts) < 0.3 * _bytes(rows["ep_ddp", r], *experts)
