"""`rtp-course bench`: DDP, FSDP, TP and RTP side by side on the same model, config and ranks.

    rtp-course bench                                  # TransformerLM, 2 CPU ranks (gloo)
    rtp-course bench --world-size 4 --ninp 512 --nhid 2048 --strategies ddp rtp
    sbatch slurm/bench.sbatch                         # N GPUs of one node (NCCL)

One launch of N ranks runs every strategy in turn. Each starts from the same serial
weights (seeded), trains on the same global batches (rtp_course.training.strategies says who
feeds what) for warm-up steps, then timed steps, and reports per rank:
  * memory by category (how each is measured: MEASURED_HOW and strategies.COMMUNICATION,
    printed in the footer);
  * on GPUs, torch.cuda.max_memory_allocated over the timed steps, and the device's memory
    in use as the device sees it (torch.cuda.mem_get_info: the CUDA context, NCCL's buffers
    and the allocator's reserve included), at the strategy's start and after its steps;
  * step time: then every strategy's model is built again and their timed steps are
    interleaved (rtp_course.training.timing), so that the load of a shared machine falls
    on all of them alike: the median step, and the median of the step-by-step ratios to
    DDP with their range (--sequential: each timed alone, as above);
  * the global-batch loss on a fixed evaluation batch before and after training:
    equal across strategies (up to rounding), since they train the same model.
Rows with models of their own (training/bench_rows.py says what each row trains):
  * pp_gpipe, pp_1f1b: your pipeline.py (E9) over the N ranks as stages, on E9's blocks at
    the LM's width; besides the above, each stage's measured bubble against (N-1)/(M+N-1) and
    the micro-batches whose activations the first stage held at once, against M (GPipe) and
    min(N, M) (1F1B) (training/pipeline_rows.py);
  * ep: your experts.py (E10) on the given MoE layer, against ep_ddp, the same layer under
    DDP, which it is paired with for "vs DDP" (training/expert_rows.py).
Output (written by the command, cli/bench.py): a table (stdout and bench.txt), bench.csv
(every rank) and bench.png under --out; --json FILE: every figure, for scripts.

`--preset gpu` is a model that keeps a data-centre GPU busy for a step (PRESETS: the
transformer LM of the RTP benchmarks at hidden size 1024, sequence 512, bf16, ~370M
parameters); the default model is a few million fp32 parameters, which on a GPU measures
kernel-launch latency. Flags given with a preset override its values.
"""
from __future__ import annotations

import csv
import gc
import os
import statistics
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from rtp_course.course import todo
from rtp_course.runtime import launcher
from rtp_course.training import bench_rows, pipeline_rows, strategies, timing
from rtp_course.training.expert_rows import DEFAULT_EXPERTS
from rtp_course.training.memory import device_used_bytes, human_bytes
from rtp_course.training.train import Task, add_model_arguments, model_config

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "buffers", "communication")
DEFAULT_STRATEGIES = ("ddp", "fsdp", "tp", "rtp", "fsdp_yours")
COLUMNS = ("strategy", "rank", "world_size", "model", "device", "dtype", *CATEGORIES, "total",
           "cuda_max_allocated", "device_base", "device_used", "step_time_s", "loss_start",
           "loss_end", "status", "bubble", "bubble_ideal", "microbatches", "microbatches_held",
           "held_expected")
MEASURED_HOW = {
    "parameters": "this rank's parameter tensors (its local shard for FSDP's DTensors)",
    "gradients": "this rank's .grad tensors after the last step",
    "optimizer": "this rank's optimizer state tensors (Adam: exp_avg, exp_avg_sq); ZeRO-1: its "
                 "shards' state, the shards themselves (a copy of 1/N of the parameters) and "
                 "their gradients",
    "activations": "bytes saved for backward during one forward (saved_tensors_hooks; each "
                   "storage once, parameters excluded)",
    "buffers": "registered buffers (positional tables)",
}
DEVICE_HOW = ("device: memory in use on the GPU as the device sees it (torch.cuda.mem_get_info: "
              "total - free) after the timed steps: the CUDA context, NCCL's buffers and the "
              "allocator's reserve included, which the categories and cuda_max_allocated leave "
              "out; at the strategy's start it was {base}. The whole device: ranks that share "
              "a GPU count together")
# Flags the presets set, by their argparse names; a flag given on the command line wins.
PRESETS = {"gpu": dict(model="lm", dtype="bfloat16", vocab_size=32768, ninp=1024, nhid=4096,
                       nhead=16, num_decoder_layers=24, seq_len=512, batch_size=8)}
PAPER = ("Reference, NOT measured here -- the RTP repository reports peak memory per GPU on 8 "
         "GPUs for a 340M-parameter model: DDP 46.3 GB, FSDP 26.1 GB, RTP 5.9 GB")
PAPER_GB = {"ddp": 46.3, "fsdp": 26.1, "rtp": 5.9}


def add_bench_arguments(p):
    p.add_argument("--world-size", type=int, default=2, metavar="N", help="ranks (default 2)")
    p.add_argument("--strategies", nargs="+", choices=strategies.STRATEGIES + bench_rows.NAMES,
                   default=list(DEFAULT_STRATEGIES),
                   help=f"default: {' '.join(DEFAULT_STRATEGIES)} (fsdp: PyTorch's FSDP2; "
                        f"fsdp_yours and zero1: your sharding.py; pp_gpipe, pp_1f1b: your "
                        f"pipeline.py on a stack of blocks, the ranks its stages; ep: your "
                        f"experts.py on a MoE layer, with ep_ddp, the layer under DDP)")
    p.add_argument("--microbatches", type=int, default=pipeline_rows.DEFAULT_MICROBATCHES,
                   metavar="M", help=f"pp rows: micro-batches a step (default "
                                     f"{pipeline_rows.DEFAULT_MICROBATCHES})")
    p.add_argument("--experts", type=int, default=DEFAULT_EXPERTS, metavar="E",
                   help=f"ep rows: experts of the MoE layer, a multiple of N (default "
                        f"{DEFAULT_EXPERTS})")
    p.add_argument("--steps", type=int, default=10,
                   help="timed steps (default 10: on a shared machine the median of 10 paired "
                        "ratios holds, that of 5 did not)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps, at least 1; the last one "
                                                          "measures activations and buffers (default 2)")
    p.add_argument("--out", default="bench-results", metavar="DIR",
                   help="where bench.csv, bench.png, bench.txt go (default ./bench-results)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is stopped")
    p.add_argument("--sequential", action="store_true",
                   help="time each strategy alone, one after the other (default: their steps "
                        "interleaved, every model alive at once; use this where they do not fit together)")
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="gpu: the transformer LM at hidden size 1024 (nhid 4096, 16 heads, 24 "
                        "layers), sequence 512, vocabulary 32768, bf16, batch 8 per rank: ~370M "
                        "parameters, a step that keeps a data-centre GPU busy; flags given "
                        "override it")
    p.add_argument("--dtype", choices=("float32", "bfloat16"),
                   help="parameters' dtype, every strategy alike (default float32; the gpu "
                        "preset: bfloat16)")
    add_model_arguments(p)
    p.set_defaults(model=None, batch_size=None)    # "not given": a preset may fill them
    return p


def apply_preset(args) -> None:
    """Fill what the command line left out: the preset's values, then the defaults."""
    for key, value in PRESETS.get(getattr(args, "preset", None) or "", {}).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    for key, value in (("model", "lm"), ("batch_size", 8), ("dtype", "float32")):
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if getattr(args, "preset", None) == "gpu" and args.model != "lm":
        raise ValueError("--preset gpu is the transformer LM: leave --model out")


# ------------------------------------------------------------------ measuring, in each rank
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _measure(w, state, device, opts) -> dict:
    """Losses, warm-up (the last step instrumented), timed steps, then what the rank holds."""
    row = {"device_base": device_used_bytes(device), "loss_start": w.evaluate(state)}
    for step in range(opts["warmup"] - 1):
        w.step(state, w.batch(step))
    row.update(w.instrumented_step(state, w.batch(opts["warmup"] - 1)))
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for step in range(opts["warmup"], opts["warmup"] + opts["steps"]):
        batch = w.batch(step)
        dist.barrier()
        _sync(device)
        start = time.perf_counter()
        w.step(state, batch)
        _sync(device)
        times.append(time.perf_counter() - start)
    if device.type == "cuda":
        row["cuda_max_allocated"] = torch.cuda.max_memory_allocated(device)
        row["device_used"] = device_used_bytes(device)
    row.update(w.timed(state, opts["steps"]))
    row.update(w.held(state))
    row["loss_end"] = w.evaluate(state)
    row["step_time_s"] = statistics.median(times)
    row["step_times_s"] = times   # --sequential: paired with DDP's step k; else replaced below
    row["total"] = sum(row[c] for c in CATEGORIES)
    return row


def _where(exc) -> str:
    """'Type: message (at file.py:LINE)', the innermost line outside torch."""
    frames = traceback.extract_tb(exc.__traceback__)
    frame = ([f for f in frames if "/torch/" not in f.filename.replace("\\", "/")] or frames)[-1]
    return f"{type(exc).__name__}: {exc} (at {Path(frame.filename).name}:{frame.lineno})"


def bench_strategy(strategy, rank, world_size, device, opts) -> dict:
    """Benchmark one strategy on this rank (every rank calls it): one CSV row.

    A strategy that cannot be built (a stub, shapes TP cannot split, a model it does not
    handle) is skipped; one that raises while training is reported as failed. Both go on
    with the next strategy: that assumes every rank raised alike (a deterministic error);
    a rank left waiting in a collective is stopped by the launch's timeout."""
    row = dict(strategy=strategy, rank=rank, world_size=world_size, model=opts["task"].model,
               device=str(device), dtype=opts.get("dtype") or "float32", status="ok")
    try:
        w = bench_rows.workload(strategy, opts, device)
        row.update(model=w.model_name or row["model"], about=w.describe())
        state = w.build()
    except (todo.ExerciseNotImplemented, ValueError, TypeError) as e:
        return {**row, "status": f"skipped: {e}"}
    try:
        with strategies.exercise_guard(strategy):
            row.update(_measure(w, state, device, opts))
    except todo.ExerciseNotImplemented as e:
        row["status"] = f"skipped: {e}"
    except Exception as e:  # noqa: BLE001 -- reported in the table, the other strategies still run
        row["status"] = f"failed: {_where(e)}"
    del state
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _interleave(rows, device, opts):
    """Step times again, every ok row's steps interleaved; their timed figures (the bubble)
    replace the sequential ones."""
    ok = [r["strategy"] for r in rows if r["status"] == "ok"]
    if not ok:
        return
    built = {s: bench_rows.workload(s, opts, device) for s in ok}
    states = {}

    def build(s):
        states[s] = built[s].build()
        return states[s]

    times = timing.interleaved(ok, build, lambda s, st, b: built[s].step(st, b),
                               lambda s, k: built[s].batch(k), opts["warmup"], opts["steps"],
                               device)
    for r in rows:
        if r["strategy"] in times:
            r.update(built[r["strategy"]].timed(states[r["strategy"]], opts["steps"]))
            r["step_times_s"] = times[r["strategy"]]
            r["step_time_s"] = statistics.median(times[r["strategy"]])


def _worker(rank, world_size, opts):
    """Memory, losses (and step times) one strategy at a time; then, unless
    opts["interleave"] is False, step times again with every strategy's steps interleaved."""
    os.environ["RTP_COURSE_IMPL"] = str(opts["impl"])
    device = strategies.default_device()
    rows = []
    for strategy in opts["strategies"]:
        rows.append(bench_strategy(strategy, rank, world_size, device, opts))
        dist.barrier()
    if opts.get("interleave", True):
        _interleave(rows, device, opts)
    return rows


# ------------------------------------------------------------------ the parent: run and report
def run_bench(args) -> tuple[list[dict], dict]:
    """Launch the ranks, run every strategy; returns (CSV rows, run info)."""
    from rtp_course.course.impl import default_impl
    apply_preset(args)
    if args.warmup < 1 or args.steps < 1:
        raise ValueError("--warmup and --steps must be at least 1")
    task = Task(args.model, model_config(args), args.batch_size * args.world_size, args.seed)
    names = bench_rows.with_baselines(args.strategies)
    opts = dict(task=task, strategies=names, steps=args.steps,
                warmup=args.warmup, optimizer=args.optimizer, lr=args.lr, dtype=args.dtype,
                impl=args.impl or default_impl(), interleave=not getattr(args, "sequential", False),
                microbatches=getattr(args, "microbatches", None),
                experts=getattr(args, "experts", None))
    backend = args.backend or launcher.default_backend(args.world_size)
    start = time.perf_counter()
    per_rank = launcher.launch(_worker, args.world_size, (opts,), backend=backend,
                               timeout=args.timeout, results="objects",
                               nccl_rules=False)   # gloo measured as it is
    info = dict(task=task, backend=backend, world_size=args.world_size, steps=args.steps,
                warmup=args.warmup, batch_size=args.batch_size, optimizer=args.optimizer,
                dtype=args.dtype, preset=getattr(args, "preset", None),
                num_params=sum(p.numel() for p in task.build().parameters()),
                wall_s=time.perf_counter() - start, interleaved=opts["interleave"])
    timed = [{r["strategy"]: r["step_times_s"] for r in rows if r.get("step_times_s")}
             for rows in per_rank]
    info["timing"] = timing.paired(timed, bases=bench_rows.baselines(names)) \
        if timed and timed[0] else {}
    return [row for rows in zip(*per_rank) for row in rows], info


def rank0(rows):
    """Rank 0's rows: the tables and the figure show rank 0's memory."""
    return [r for r in rows if r["rank"] == 0]


def slowest_step(rows, strategy):
    """A strategy's step time on its slowest rank (None: not timed)."""
    times = [r["step_time_s"] for r in rows if r["strategy"] == strategy and r.get("step_time_s")]
    return max(times) if times else None


def report(rows, info) -> str:
    """The printed table with its footer."""
    task, gpu = info["task"], any(r.get("cuda_max_allocated") for r in rows)
    device_seen = any(r.get("device_used") for r in rows)
    config = " ".join(f"{k}={v}" for k, v in task.config.items())
    preset = f", preset {info['preset']}" if info.get("preset") else ""
    lines = [f"rtp-course bench: {task.model} ({config}), {info['num_params'] / 1e6:.2f} M parameters, "
             f"{info.get('dtype') or 'float32'}{preset}",
             f"  {info['world_size']} ranks, {info['backend']}, batch {info['batch_size']} per rank "
             f"(TP: {task.global_batch} on every rank), {info['optimizer']}, {info['warmup']} "
             f"warm-up + {info['steps']} timed steps",
             "", "per-rank memory of rank 0 (every rank: bench.csv); step time: median over the timed "
                 "steps of the slowest rank's",
             ("  steps of every strategy interleaved (round k: each strategy once, order rotated); "
              "vs DDP: the median of the step-by-step ratios, and their range"
              if info.get("interleaved") else "  each strategy timed alone, one after the other"
              " (--sequential); vs DDP: the ratios of step k of each"), ""]
    head = ["strategy", "params", "grads", "optim", "activ", "buffers", "comm", "total"]
    head += (["cuda peak"] if gpu else []) + (["device"] if device_seen else [])
    head += ["step ms", "vs DDP (range)", "loss start", "loss end"]
    paired = info.get("timing") or {}
    table = [head]
    for r in rank0(rows):
        if r["status"] != "ok":
            table.append([strategies.LABELS[r["strategy"]], r["status"]])
            continue
        cells = [strategies.LABELS[r["strategy"]]] + [human_bytes(r[c]) for c in CATEGORIES]
        cells += [human_bytes(r["total"])]
        cells += [human_bytes(r["cuda_max_allocated"])] if gpu else []
        cells += [human_bytes(r.get("device_used") or 0)] if device_seen else []
        t = paired.get(r["strategy"], {})
        ms = 1000 * t["median_s"] if t else 1000 * slowest_step(rows, r["strategy"])
        ratio = (f"{t['ratio']:.2f} ({t['ratio_low']:.2f}-{t['ratio_high']:.2f})"
                 if "ratio" in t else "-")
        cells += [f"{ms:.1f}", ratio, f"{r['loss_start']:.4f}", f"{r['loss_end']:.4f}"]
        table.append(cells)
    widths = [max(len(row[i]) for row in table if len(row) == len(head)) for i in range(len(head))]
    for row in table:
        if len(row) != len(head):
            lines.append(f"{row[0]:<{widths[0]}}  {row[1]}")
        else:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(row, widths))))
    lines += _own_rows(rows)
    lines += ["", "how each category is measured:"]
    lines += [f"  {c}: {MEASURED_HOW[c]}" for c in CATEGORIES if c != "communication"]
    lines += [f"  communication, {strategies.LABELS[s]}: {strategies.COMMUNICATION[s]}"
              for s in dict.fromkeys(r["strategy"] for r in rows)]
    if device_seen:
        bases = ", ".join(f"{strategies.LABELS[r['strategy']]} {human_bytes(r['device_base'])}"
                          for r in rank0(rows) if r.get("device_base") is not None)
        lines.append("  " + DEVICE_HOW.format(base=bases or "not measured"))
    lines += ["loss: global-batch loss on a fixed evaluation batch before and after training. "
              "DDP, FSDP, RTP, mini-DDP: each rank feeds its own slice (the loss is the mean over "
              "ranks); TP: every rank feeds the whole global batch. Same weights, same samples "
              "per step: the same model, up to float rounding.", "", PAPER]
    ours = {r["strategy"]: r["total"] for r in rank0(rows)   # the task's model only
            if r["status"] == "ok" and not r.get("about")}
    if "ddp" in ours:
        ratio = lambda s, v: f"{strategies.LABELS[s]} {v:.2f}"
        lines.append("  per-rank total relative to DDP -- paper (8 GPUs): "
                     + ", ".join(ratio(s, g / PAPER_GB["ddp"]) for s, g in PAPER_GB.items())
                     + "; here (rank 0, " + f"{info['world_size']} ranks): "
                     + ", ".join(ratio(s, v / ours["ddp"]) for s, v in ours.items()))
    lines.append(f"\nbench wall time: {info['wall_s']:.1f} s")
    return "\n".join(lines)


def _own_rows(rows) -> list[str]:
    """The rows that train models of their own: what they train, what "vs DDP" means for
    them, and the pipeline's bubble and activations against the schedules' formulas."""
    about = {r["strategy"]: r["about"] for r in rank0(rows) if r.get("about")}
    if not about:
        return []
    lines = ["", "rows with models of their own (their losses are theirs: not the task's):"]
    lines += [f"  {strategies.LABELS[s]}: {text}" for s, text in about.items()]
    lines.append("  vs DDP: EP against MoE DDP (the same layer replicated); the pipeline rows: "
                 "none (no DDP of their model here)")
    for s in pipeline_rows.SCHEDULES:
        ranks = sorted((r for r in rows if r["strategy"] == s and r["status"] == "ok"),
                       key=lambda r: r["rank"])
        if not ranks:
            continue
        first, rule = ranks[0], "M" if s == "pp_gpipe" else "min(N, M)"
        over = first["microbatches_held"] > first["held_expected"]
        lines.append(f"  {strategies.LABELS[s]}: bubble by stage "
                     f"{' '.join(format(r['bubble'], '.2f') for r in ranks)} (ideal (N-1)/(M+N-1) "
                     f"= {first['bubble_ideal']:.2f}, N {len(ranks)}, M {first['microbatches']}); "
                     f"the first stage held {first['microbatches_held']} micro-batch(es) at once "
                     f"(expected {rule} = {first['held_expected']}"
                     f"{': MORE than the schedule allows' if over else ''}), "
                     f"{human_bytes(first['activations'])}")
    lines.append("  bubble: the share of the step's schedule a stage spends outside its forwards "
                 "and backwards (median over the timed steps); transfers, and ranks sharing "
                 "cores, add to the ideal's. activ, pipeline rows: the most bytes saved for "
                 "backward alive at once during a step (stage 0's include the batch's input "
                 "tensor, whose slices it saves)")
    return lines


def write_csv(rows, path):
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k, "") for k in COLUMNS})


def write_json(rows, info, path):
    """Every rank's row and the paired step times, for scripts."""
    import json
    task = info["task"]
    doc = {"model": task.model, "config": task.config, "num_params": info["num_params"],
           "world_size": info["world_size"], "backend": info["backend"],
           "batch_size": info["batch_size"], "optimizer": info["optimizer"],
           "dtype": info.get("dtype"), "preset": info.get("preset"),
           "warmup": info["warmup"], "steps": info["steps"], "interleaved": info.get("interleaved"),
           "step_time": info.get("timing", {}), "rows": rows, "wall_s": info["wall_s"]}
    Path(path).write_text(json.dumps(doc, indent=2, default=str))
