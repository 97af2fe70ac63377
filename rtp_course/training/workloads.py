"""What one benchmark row trains, in each rank: its model under its strategy, its batches, its
step, and how its memory is read. `rtp_course.training.bench` measures every row alike through
this interface:

    w = bench_rows.workload(strategy, opts, device)  # opts: the bench's (task, optimizer, ...)
    state = w.build()                               # the wrapped model and its optimizer
    w.step(state, w.batch(k))                       # training step k (what is timed)
    w.evaluate(state)                               # the global loss on the evaluation batch
    w.instrumented_step(state, batch)               # a step measuring activations, buffers
    w.held(state)                                   # parameters, gradients, optimizer, buffers
    w.timed(state, steps)                           # the last `steps` steps' figures (PP: bubble)

`Workload` is the course model (`opts["task"]`) under a strategy of
rtp_course.training.strategies; `OwnModel`, a row that trains a model of its own: the
pipeline rows (E9, training/pipeline_rows.py) and the expert-parallel rows (E10,
training/expert_rows.py). training/bench_rows.py says which row trains which.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist

from rtp_course.training import strategies
from rtp_course.training.data import rank_batch
from rtp_course.training.strategies import DTensor
from rtp_course.training.train import make_optimizer, to_device, train_step


def dtype_of(opts):
    return getattr(torch, opts["dtype"]) if opts.get("dtype") else None


def feed(batch, device, dtype):
    """A batch on `device`, its floating tensors (the CNN's images) in the parameters' dtype."""
    return tuple(t.to(dtype) if dtype is not None and t.is_floating_point() else t
                 for t in to_device(batch, device))


def local_bytes(t) -> int:
    if t is None:
        return 0
    t = t.to_local() if isinstance(t, DTensor) else t
    return t.numel() * t.element_size()


def held_bytes(model, optimizer) -> dict:
    params = {id(p): p for p in model.parameters()}.values()
    optim = sum(local_bytes(t) for t in strategies.optimizer_tensors(optimizer))
    return {"parameters": sum(local_bytes(p) for p in params),
            "gradients": sum(local_bytes(p.grad) for p in params), "optimizer": optim,
            "buffers": sum(local_bytes(b) for b in model.buffers())}


class SavedBytes:
    """saved_tensors_hooks that sum the bytes autograd saves for backward (each storage once,
    parameters excluded) and call `sample` at every save and use."""

    def __init__(self, sample=lambda: None):
        self.saved, self.sample = {}, sample

    def pack(self, t):
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            s = t.untyped_storage()
            self.saved[(t.device, s.data_ptr())] = s.nbytes()
        self.sample()
        return t

    def unpack(self, t):
        self.sample()
        return t

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)

    def total(self) -> int:
        return sum(self.saved.values())


class Workload:
    """The course model (opts["task"]) under `strategy`: each rank feeds its share of the
    global batch (strategies.local_batch) and trains with train.train_step."""
    model_name = None          # None: the task's model; else the row's own model, described
    baseline = "ddp"           # the row "vs DDP" compares with (None: none)

    def __init__(self, strategy, opts, device):
        self.strategy, self.opts, self.device = strategy, opts, device
        self.dtype = dtype_of(opts)

    def optimizer(self, params):
        return make_optimizer(params, self.opts["optimizer"], self.opts["lr"], self.strategy)

    def build(self):
        model = strategies.wrap(self.opts["task"].build(), self.strategy, device=self.device,
                                dtype=self.dtype)
        return SimpleNamespace(model=model, optimizer=self.optimizer(model.parameters()))

    def _feed(self, batch):
        return feed(strategies.local_batch(self.strategy, batch), self.device, self.dtype)

    def batch(self, step):
        return self._feed(self.opts["task"].batch(step))

    def loss(self, model, batch):
        return self.opts["task"].loss(model, batch)

    def step(self, state, batch):
        train_step(state.model, state.optimizer, self.opts["task"], batch)

    @torch.no_grad()
    def evaluate(self, state) -> float:
        batch = self._feed(self.opts["task"].eval_batch())
        return strategies.global_loss(self.strategy, self.loss(state.model, batch))

    def instrumented_step(self, state, batch) -> dict:
        """A training step that also measures activations and communication buffers."""
        model, optimizer = state.model, state.optimizer
        probe = strategies.CommunicationProbe(self.strategy, model, optimizer)
        optimizer.zero_grad(set_to_none=True)
        with probe:
            with SavedBytes(probe.sample) as saved:
                # forward only: backward's recomputations are not activations
                loss = self.loss(model, batch)
            self.backward_and_step(state, loss)
        return {"activations": saved.total(), "communication": probe.peak_bytes()}

    def backward_and_step(self, state, loss):
        loss.backward()
        state.optimizer.step()

    def describe(self) -> str | None:
        """The row's own model in words (None: the task's model)."""
        return None

    def held(self, state) -> dict:
        return held_bytes(state.model, state.optimizer)

    def timed(self, state, steps) -> dict:
        return {}


class OwnModel(Workload):
    """A row that trains a model of its own on regression data: tokens of width ninp (the
    task's batch x seq_len of them per step), targets sin(x). Sizes come from the LM's flags."""
    every_rank_feeds_all = False       # True: each rank feeds the whole global batch

    def __init__(self, strategy, opts, device):
        super().__init__(strategy, opts, device)
        task = opts["task"]
        if task.model != "lm":
            raise ValueError(f"{strategy} takes its sizes from the transformer LM's flags: "
                             f"leave --model out")
        self.config = task.config
        self.rows = task.global_batch * task.config["seq_len"]      # tokens of the global batch

    def _data(self, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(self.rows, self.config["ninp"], generator=g)
        batch = (x, torch.sin(x))
        if not self.every_rank_feeds_all:
            batch = rank_batch(batch, dist.get_rank(), dist.get_world_size())
        return feed(batch, self.device, self.dtype)

    def batch(self, step):
        task = self.opts["task"]
        return self._data(task.seed * 100_003 + step + 1)      # Task.batch's seeds

    def eval_batch(self):
        task = self.opts["task"]
        return self._data(task.eval_seed + task.seed)

