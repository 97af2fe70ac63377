# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Benchmark: DDP, FSDP, TP and RTP side by side
#
# You have built (or used) four ways to train one model on $N$ ranks. This notebook measures them
# on the same model, the same batches and the same ranks, with the course's benchmark,
# `rtp-course bench`, and sets the numbers next to those of the RTP paper.
#
# 1. the four strategies in one table;
# 2. running the benchmark;
# 3. memory by category, and what it becomes on more ranks;
# 4. step time;
# 5. the same benchmark on GPUs through Slurm;
# 6. questions to think about.
#
# Nothing to implement here: TP and RTP run your `tensor_parallel` (notebook 04) and `flyweight`
# (notebook 06) modules; a strategy whose exercise is still a stub is skipped, with a message.

# %%
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import Image, display

from rtp_course.notebook import plots
from rtp_course.training.bench import CATEGORIES, PAPER
from rtp_course.notebook.demos import bench_view as view
from rtp_course.course.impl import default_impl
from rtp_course.training.memory import human_bytes
from rtp_course.training.strategies import LABELS

print("exercise code under test:", default_impl())

# %% [markdown]
# ## 1. The four strategies
#
# | | each rank feeds | each rank stores | communication per step |
# |---|---|---|---|
# | **DDP** | its own slice of the batch | everything | all-reduce every gradient (in buckets, overlapped with backward) |
# | **FSDP** (ZeRO-3) | its own slice | $1/N$ of parameters, gradients, optimizer state | all-gather each unit's parameters before its forward and its backward; reduce-scatter its gradients |
# | **TP** (Megatron) | the **whole** batch | $1/N$ of each layer | all-reduce of activations, twice per block forward and twice backward |
# | **RTP** | its own slice | $1/N$ of each layer | rotate weight shards ($N-1$ times per layer forward); rotate shards and gradient accumulators in backward |
#
# All four train **the same model**: from the same weights, one step of each computes the gradient
# of the same mean loss over the same global batch. (TP's ranks all see the global batch, the
# others a slice each: `rtp_course/training/strategies.py` says who feeds what.) The benchmark prints each
# strategy's loss before and after training to show it.
#
# ## 2. Running the benchmark
#
# `rtp-course bench` launches $N$ ranks once and runs every strategy in turn on the course's
# transformer LM (the model of the RTP benchmarks): a few warm-up steps (the last one measures
# activations and communication buffers), then timed steps. It prints a table and writes
# `bench.csv` (every rank), `bench.png` and `bench.txt`. The defaults here are small: a 4-million
# parameter LM, 2 CPU ranks, 8 sequences per rank. `rtp-course bench --help` lists the knobs
# (`--ninp`, `--nhid`, `--nhead`, `--num-decoder-layers`, `--seq-len`, `--world-size`, ...).

# %%
OUT = Path("bench-results")      # next to this notebook; any folder you like
command = [sys.executable, "-m", "rtp_course.cli", "bench", "--world-size", "2",
           "--strategies", "ddp", "fsdp", "tp", "rtp", "--warmup", "1", "--steps", "2",
           "--out", str(OUT)]
print("$ rtp-course " + " ".join(command[3:]))
done = subprocess.run(command, capture_output=True, text=True)
print(done.stdout + done.stderr)

# %% [markdown]
# The footer says how each category is measured. The figure the command wrote (in `OUT`, with
# the CSV and the table):

# %%
if (OUT / "bench.png").exists():
    display(Image(filename=str(OUT / "bench.png")))

# %% [markdown]
# ## 3. Memory by category
#
# Read the CSV back (rank 0; every rank holds about the same):

# %%
rows = view.read_rows(OUT / "bench.csv") if (OUT / "bench.csv").exists() else []
ours = view.rank0(rows)
for strategy, row in ours.items():
    print(f"{LABELS[strategy]:>5}: " + ", ".join(f"{c} {human_bytes(row[c])}" for c in CATEGORIES)
          + f"  -> total {human_bytes(row['total'])}")
skipped = [f"{LABELS[r['strategy']]}: {r['status']}" for r in rows if r["rank"] == 0 and r["status"] != "ok"]
print("\n".join(skipped))

# %% [markdown]
# What to look for, category by category:
#
# * **parameters, gradients, optimizer**: FSDP and RTP hold half of DDP's on 2 ranks. TP holds a
#   bit more: our TP keeps the LM's decoder (vocabulary x width, a tenth of this model) and the
#   LayerNorms replicated on every rank;
# * **activations**: DDP, FSDP and RTP each run their own slice of the batch; TP's ranks run the
#   *whole* global batch (2 slices' worth), but split inside attention and the MLP. RTP saves only
#   each wrapped layer's input and recomputes the rest in backward;
# * **communication**: DDP's gradient buckets (a full copy of the gradients), FSDP's gathered unit
#   (a decoder layer and its gradient), RTP's shards in flight, TP none beyond activations.
#
# ### What happens on more ranks
#
# The paper's setting is 8 GPUs. From the categories measured on 2 ranks, each strategy's rule
# gives what one rank would hold on $N$ with the same batch per rank: sharded states shrink as
# $2/N$, RTP's in-flight shards too, FSDP's gathered unit does not, activations (one rank's own
# batch) do not. TP is left out: its ranks all run the global batch, which grows with $N$.

# %%
if "ddp" in ours:
    world_sizes = [2, 4, 8, 16]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for strategy, row in ours.items():
        if strategy == "tp":            # its activations grow with N (the whole global batch): not comparable
            continue
        totals = [view.at_world_size(row, 2, n)["total"] for n in world_sizes]
        style = {"marker": "o", **plots.STRATEGY_STYLES.get(strategy, {})}
        ax.plot(world_sizes, totals, label=LABELS[strategy], **style)
    ax.set_xscale("log", base=2)
    ax.set_xticks(world_sizes)
    ax.set_xticklabels(map(str, world_sizes))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: human_bytes(v)))
    ax.set_xlabel("ranks N")
    ax.set_ylabel("bytes per rank")
    ax.set_title("per-rank memory, extrapolated from the 2-rank measurement")
    ax.grid(True, alpha=0.3)
    ax.legend()
    plt.show()

# %% [markdown]
# ### Against the paper
#
# The RTP repository reports, on 8 GPUs, for a 340-million-parameter model, the peak memory per
# GPU: **DDP 46.3 GB, FSDP 26.1 GB, RTP 5.9 GB**. As fractions of DDP:

# %%
print(PAPER)
if "ddp" in ours:
    paper = view.paper_relative()
    ours_ = {s: r for s, r in ours.items() if s != "tp"}
    here = view.relative_to_ddp({s: r["total"] for s, r in ours_.items()})
    at8 = view.relative_to_ddp({s: view.at_world_size(r, 2, 8)["total"] for s, r in ours_.items()})
    print(f"\n{'':>6}{'paper, 8 GPUs':>16}{'here, 2 ranks':>16}{'here, rescaled to 8':>22}")
    for s in ours_:
        print(f"{LABELS[s]:>6}{paper.get(s, float('nan')):16.2f}{here[s]:16.2f}{at8[s]:22.2f}")

# %% [markdown]
# Do not expect the columns to agree; expect the **order** and the mechanism to.
#
# * **Scale.** The paper's model has 80 times more parameters; its states (16 bytes per
#   parameter with mixed-precision Adam, about 5.4 GB) and its activations (long sequences, large
#   batches) are both large, and their proportions decide the ratios. Ours is a 4-million-parameter
#   model on short sequences.
# * **What "peak" means.** On GPUs the paper reads the allocator's peak, which includes temporary
#   buffers (an all-gathered layer, a gradient being reduced, the workspace of a kernel). Our
#   categories add up what is held at the moments we measure; they are a breakdown, not a peak.
#   On GPUs, `rtp-course bench` also reports `torch.cuda.max_memory_allocated` (the "cuda peak"
#   column), the paper's measure.
# * **Activations.** RTP saves less for backward (it recomputes each layer's output), and DDP's
#   and FSDP's peaks also hold full-size communication buffers. With 8 ranks, the states RTP keeps
#   are $1/8$ of DDP's and no layer is ever materialized whole: that is where a ratio like
#   $5.9 / 46.3 \approx 0.13$ comes from.
#
# ## 4. Step time
#
# The right-hand panel of the figure shows the median step time of the slowest rank. On a CPU
# with gloo these numbers say little about GPUs: computation is slow relative to communication,
# the ranks share a few cores with the transfers (notebook 05, section 6), and everything else the
# machine runs adds noise. Expect RTP to pay for its recomputation and its $N$ smaller products,
# FSDP for its gathers, TP for its per-layer all-reduces on a batch $N$ times larger. On GPUs the
# paper finds RTP's throughput comparable to DDP's and FSDP's; measure it yourself in section 5.
#
# ## 5. On GPUs, through Slurm
#
# `slurm/bench.sbatch` runs the same command on the GPUs of one node (NCCL); from here,
# `rtp_course.cluster.slurm.submit_bench` submits it and `job.wait()` follows it. The arguments after
# `bench_args` are those of `rtp-course bench`: a bigger model makes the comparison meaningful
# (here about 100 million parameters).

# %%
USE_SLURM, GPUS = False, 4
if USE_SLURM:
    from rtp_course.cluster.slurm import submit_bench
    job = submit_bench(gpus=GPUS, bench_args=["--ninp", "1024", "--nhid", "4096", "--nhead", "16",
                                              "--num-decoder-layers", "8", "--seq-len", "256"])
    job.wait()
    print(job.summary())
    if (job.bench_dir / "bench.png").exists():
        display(Image(filename=str(job.bench_dir / "bench.png")))

# %% [markdown]
# ## 6. Questions to think about
#
# 1. On $N$ ranks, FSDP's per-rank states are $P/N$, like RTP's. Why is FSDP's peak still much
#    higher than RTP's in the paper? Which of our categories shows it, and how does it scale with
#    $N$?
# 2. TP stores $1/N$ of the model too, but feeds every rank the whole batch. When would you pick
#    TP over RTP, and when RTP over TP? (Think about activations, about the size of the messages,
#    and about where the ranks are: one node or several.)
# 3. RTP recomputes each wrapped layer in backward. What would it cost in memory to keep the
#    outputs of every shard instead? In time?
# 4. Our CNN (notebook 06) has 96% of its weights in one layer. Which strategy suffers most from
#    such a model, and why?
