"""Train a course model with one parallel strategy: the same loop on a laptop and a cluster.

    python -m rtp_course.training.train --strategy rtp --model lm --steps 20 --nproc 2    # 2 local CPU ranks
    torchrun --nproc_per_node 4 -m rtp_course.training.train --strategy fsdp --steps 100  # already launched
    sbatch --nodes=2 slurm/train_multinode.sbatch --strategy rtp --steps 100     # srun + torchrun

With --nproc N the program starts N local processes itself (rtp_course.runtime.launcher.launch);
without it, under torchrun or srun, each process joins the job's group
(launcher.init_from_env); otherwise it runs on one local process. Rank 0 prints the
loss of every step: the loss of the whole global batch, comparable across strategies
and world sizes (see rtp_course.training.strategies for who feeds what).

The pieces (`Task`, `model_config`, `make_optimizer`, `train_step`) are shared with the
benchmark (rtp_course.training.bench), so both train the same model on the same data.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from rtp_course.course import todo
from rtp_course.training import data, strategies
from rtp_course.runtime import launcher
from rtp_course.models import TINY_CONFIGS, build_model, lm_loss

# Small defaults: a few million parameters, a fraction of a second per step on a CPU core.
DEFAULT_CONFIGS = {
    "lm": dict(vocab_size=2048, ninp=256, nhid=1024, nhead=8, num_decoder_layers=4, seq_len=64),
    "bert": dict(vocab_size=2048, hidden_dim=256, ffn_mult=4, num_heads=8, num_layers=4,
                 max_seq_len=64, num_classes=2),
    "cnn": dict(dropout1=0.0, dropout2=0.0),   # dropout off: every strategy sees the same masks
}
# The RTP benchmarks' flags (transformer LM names) -> the BERT classifier's arguments.
BERT_NAMES = {"vocab_size": "vocab_size", "ninp": "hidden_dim", "nhead": "num_heads",
              "num_decoder_layers": "num_layers", "seq_len": "max_seq_len"}
FLAGS = ("vocab_size", "ninp", "nhid", "nhead", "num_decoder_layers", "seq_len")


def add_model_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Model, data and optimizer flags (shared by `rtp-course bench`)."""
    p.add_argument("--model", choices=("lm", "bert", "cnn"), default="lm",
                   help="course model: transformer LM (default), BERT classifier, MNIST CNN")
    for flag in FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), type=int, metavar="N",
                       help=f"(lm, bert) default {DEFAULT_CONFIGS['lm'][flag]}")
    p.add_argument("--tiny", action="store_true", help="the checkers' tiny shapes (fast tests)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="samples per rank and step; TP ranks all feed N times this (default 8)")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0, help="weights and data (default 0)")
    p.add_argument("--impl", default=None, metavar="PATH",
                   help="exercise modules for tp/rtp/dp (default $RTP_COURSE_IMPL or rtp_course)")
    p.add_argument("--backend", choices=launcher.BACKENDS,
                   help="default: nccl with one GPU per rank, else gloo")
    return p


def model_config(args) -> dict:
    """build_model overrides from the flags: defaults (or --tiny), then the flags given."""
    config = dict((TINY_CONFIGS if args.tiny else DEFAULT_CONFIGS)[args.model])
    given = {f: getattr(args, f) for f in FLAGS if getattr(args, f, None) is not None}
    if args.model == "lm":
        config.update(given)
    elif args.model == "bert":
        config.update({BERT_NAMES[f]: v for f, v in given.items() if f in BERT_NAMES})
        if "nhid" in given:
            if given["nhid"] % config["hidden_dim"]:
                raise ValueError("bert: --nhid must be a multiple of --ninp (the MLP is ffn_mult x ninp)")
            config["ffn_mult"] = given["nhid"] // config["hidden_dim"]
    elif given:
        raise ValueError(f"the CNN has fixed shapes: {', '.join('--' + f for f in given)} do not apply")
    return config


@dataclass
class Task:
    """A model name, its config and the synthetic data it trains on. Every step's global
    batch (N x batch_size samples) is a function of (seed, step) only."""
    model: str
    config: dict
    global_batch: int
    seed: int = 0
    eval_seed: int = field(default=10 ** 6)

    def build(self):
        return build_model(self.model, seed=self.seed, **self.config)

    def _data(self, n, seed):
        c = self.config
        if self.model == "lm":
            return data.lm_tokens(n, c["seq_len"], c["vocab_size"], seed=seed)
        if self.model == "bert":
            return data.classification_tokens(n, c["max_seq_len"], c["vocab_size"], seed=seed,
                                              num_classes=c["num_classes"])
        return data.synthetic_digits(n, seed=seed)

    def batch(self, step: int):
        return self._data(self.global_batch, seed=self.seed * 100_003 + step + 1)

    def eval_batch(self):
        return self._data(self.global_batch, seed=self.eval_seed + self.seed)

    def loss(self, model, batch):
        x, y = batch
        out = model(x)
        if self.model == "lm":
            return lm_loss(out, y)
        return F.nll_loss(out, y) if self.model == "cnn" else F.cross_entropy(out, y)


def make_optimizer(params, name="adam", lr=1e-3, strategy=None):
    """Adam or SGD; for the zero1 strategy, your ShardedOptimizer around it."""
    return strategies.optimizer(strategy, params, name, lr)


def to_device(batch, device):
    return tuple(t.to(device) for t in batch)


def train_step(model, optimizer, task, batch):
    """One step on this rank's batch; returns the (local) loss, detached."""
    optimizer.zero_grad(set_to_none=True)
    loss = task.loss(model, batch)
    loss.backward()
    optimizer.step()
    return loss.detach()


def options(args, world_size: int) -> dict:
    """Everything a worker needs, picklable. The impl path is resolved here: forkserver
    workers do not see environment changes made after their server started."""
    from rtp_course.course.impl import default_impl
    return dict(strategy=args.strategy, steps=args.steps, optimizer=args.optimizer, lr=args.lr,
                impl=args.impl or default_impl(),
                task=Task(args.model, model_config(args), args.batch_size * world_size, args.seed))


def run(rank: int, world_size: int, opts: dict, device=None) -> list[float]:
    """Train on an initialised process group; rank 0 prints each step's global loss."""
    os.environ["RTP_COURSE_IMPL"] = str(opts["impl"])
    strategy, task = opts["strategy"], opts["task"]
    device = device or strategies.default_device()
    model = strategies.wrap(task.build(), strategy, device=device)
    optimizer = make_optimizer(model.parameters(), opts["optimizer"], opts["lr"], strategy)
    losses, start = [], time.perf_counter()
    with strategies.exercise_guard(strategy):
        for step in range(opts["steps"]):
            batch = to_device(strategies.local_batch(strategy, task.batch(step)), device)
            losses.append(strategies.global_loss(strategy, train_step(model, optimizer, task, batch)))
            if rank == 0:
                print(f"step {step + 1:>4}/{opts['steps']}  loss {losses[-1]:.4f}", flush=True)
    if rank == 0:
        print(f"{strategy} on {world_size} rank(s), {device.type}: {opts['steps']} steps in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    return losses


def _spawned(rank, world_size, opts):
    return run(rank, world_size, opts)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rtp_course.training.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", choices=strategies.STRATEGIES, default="ddp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--nproc", type=int, help="start this many local processes (default: join "
                                            "torchrun/srun's job, else 1)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before a local run is stopped")
    return add_model_arguments(p)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    under_job = "RANK" in os.environ or "SLURM_PROCID" in os.environ
    try:
        if args.nproc is None and under_job:
            rank, world_size, device = launcher.init_from_env(args.backend)
            try:
                run(rank, world_size, options(args, world_size), device)
            finally:
                torch.distributed.destroy_process_group()
        else:
            nproc = args.nproc or 1
            launcher.launch(_spawned, nproc, (options(args, nproc),), backend=args.backend,
                            timeout=args.timeout)
    except todo.ExerciseNotImplemented as e:
        print(f"rtp_course.training.train: {e}", file=sys.stderr)
        return 2
    except launcher.RankFailed as e:
        print(f"rtp_course.training.train: {todo.from_traceback(e.traceback) or e}", file=sys.stderr)
        return 2 if todo.from_traceback(e.traceback) else 1
    except (launcher.LaunchError, ValueError) as e:
        print(f"rtp_course.training.train: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
