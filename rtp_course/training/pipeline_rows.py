"""The benchmark's pipeline-parallel rows (E9): GPipe and 1F1B over the world's ranks as stages.

The model is E9's (rtp_course/models/stages.py): L = --num-decoder-layers blocks
Linear(ninp, ninp) + Tanh, cut by depth as the checks cut it, stage r of N on rank r (your
pipeline.PipelineStage). Every rank is given the whole global batch (the first stage reads
the inputs, the last the targets): batch x seq_len tokens of width ninp, targets sin(x), MSE,
in M = --microbatches micro-batches. A step is your gpipe / one_f_one_b, then the optimizer.

Besides the bench's figures each rank reports:
  * bubble: the share of the schedule's span (from the barrier to the end of the slowest
    rank's schedule call) this stage spends outside its forwards and backwards, median over
    the timed steps. Equal stages that only compute idle (N-1)/(M+N-1) of it (ideal_bubble);
    the transfers, and ranks that share cores, add to it. A forward is the time from the
    stage's first block's call to its last block's return; a backward, a call of
    torch.autograd.backward (Tensor.backward calls it).
  * microbatches_held: the most micro-batches whose activations (what autograd saved for
    backward) were alive at once during one step (models.stages.StageTrace, as E9's checks
    count them), against held_expected: M for GPipe, min(N - r, M) for 1F1B; activations:
    the most bytes of them alive at once (each storage once, parameters excluded).
"""
from __future__ import annotations

import statistics
import time
import weakref
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from rtp_course.course import impl
from rtp_course.models import stages
from rtp_course.training import strategies
from rtp_course.training.workloads import OwnModel

SCHEDULES = {"pp_gpipe": "gpipe", "pp_1f1b": "one_f_one_b"}
DEFAULT_MICROBATCHES = 4


def ideal_bubble(stages_: int, microbatches: int) -> float:
    """(N-1)/(M+N-1): the idle share of a step for N equal stages and M micro-batches."""
    return (stages_ - 1) / (microbatches + stages_ - 1)


def held_expected(strategy: str, rank: int, stages_: int, microbatches: int) -> int:
    """Micro-batches' activations stage `rank` holds at most: GPipe M, 1F1B min(N - r, M)."""
    return microbatches if strategy == "pp_gpipe" else min(stages_ - rank, microbatches)


class HeldTrace(stages.StageTrace):
    """StageTrace (micro-batches alive at once), which also keeps the peak bytes alive."""

    def __init__(self, model, start, stop):
        super().__init__(model, start, stop)
        self.storages, self.bytes_now, self.peak_bytes = {}, 0, 0

    def pack(self, t):
        holder = super().pack(t)
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            storage = t.untyped_storage()
            key = (t.device, storage.data_ptr())
            count, size = self.storages.get(key, (0, storage.nbytes()))
            self.storages[key] = (count + 1, size)
            self.bytes_now += size if count == 0 else 0
            self.peak_bytes = max(self.peak_bytes, self.bytes_now)
            weakref.finalize(holder, self._released, key)
        return holder

    def _released(self, key):
        count, size = self.storages[key]
        if count == 1:
            del self.storages[key]
            self.bytes_now -= size
        else:
            self.storages[key] = (count - 1, size)


class StageClock:
    """Time one stage spends computing during a schedule call, and the call's wall time. On a
    GPU each time is read after a synchronize: kernels run after their launch returns."""

    def __init__(self, model, start, stop, device):
        self.busy, self.began, self.records, self.device = 0.0, None, [], device
        self.handles = [model[start].register_forward_pre_hook(self._forward_starts),
                        model[stop - 1].register_forward_hook(self._forward_ends)]
        self.timing = False

    def _now(self):
        if self.timing and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _forward_starts(self, module, args):
        self.began = self._now()

    def _forward_ends(self, module, args, out):
        if self.timing and self.began is not None:
            self.busy += self._now() - self.began
        self.began = None

    def __call__(self, schedule, *args):
        """schedule(*args), recording (compute seconds, wall seconds)."""
        original = torch.autograd.backward

        def backward(*a, **k):
            began = self._now()
            try:
                return original(*a, **k)
            finally:
                self.busy += self._now() - began

        self.busy, self.timing = 0.0, True
        torch.autograd.backward = backward
        began = self._now()
        try:
            return schedule(*args)
        finally:
            wall = self._now() - began
            torch.autograd.backward, self.timing = original, False
            self.records.append((self.busy, wall))


class Pipeline(OwnModel):
    """pp_gpipe, pp_1f1b: see the module docstring."""
    every_rank_feeds_all = True
    model_name = "blocks"
    baseline = None           # no DDP of this model among the rows: no "vs DDP"

    def __init__(self, strategy, opts, device):
        super().__init__(strategy, opts, device)
        self.layers, self.width = self.config["num_decoder_layers"], self.config["ninp"]
        self.m = opts.get("microbatches") or DEFAULT_MICROBATCHES
        self.world, self.rank = dist.get_world_size(), dist.get_rank()

    def describe(self) -> str:
        return (f"{self.layers} blocks Linear({self.width}, {self.width}) + Tanh, "
                f"{self.rows} tokens a step in {self.m} micro-batches")

    def _schedule(self):
        with strategies.exercise_guard(self.strategy):
            return getattr(impl.current("pipeline"), SCHEDULES[self.strategy])

    def build(self):
        if self.layers < self.world:
            raise ValueError(f"{self.layers} blocks cannot fill {self.world} stages: give "
                             f"--num-decoder-layers {self.world} or more")
        if self.rows % self.m:
            raise ValueError(f"{self.m} micro-batches do not divide {self.rows} tokens")
        torch.manual_seed(self.opts["task"].seed)
        serial = stages.blocks(self.layers, self.width).to(device=self.device, dtype=self.dtype)
        with strategies.exercise_guard(self.strategy):
            stage = impl.current("pipeline").PipelineStage(serial)
        start, stop = stages.cut(self.rank, self.world, self.layers)
        return SimpleNamespace(model=stage, serial=serial, cut=(start, stop),
                               optimizer=self.optimizer(stage.parameters()),
                               clock=StageClock(serial, start, stop, self.device))

    def _run(self, state, batch):
        x, y = batch
        return self._schedule()(state.model, x, y, F.mse_loss, self.m)

    def step(self, state, batch):
        state.optimizer.zero_grad(set_to_none=True)
        state.clock(self._run, state, batch)
        state.optimizer.step()

    def evaluate(self, state) -> float:
        """The last stage's loss on the evaluation batch (forward and backward: the schedules
        do both; the gradients are dropped), sent to every rank."""
        loss = self._run(state, self.eval_batch())
        state.optimizer.zero_grad(set_to_none=True)
        value = torch.zeros(1, device=self.device) if loss is None else \
            loss.detach().float().reshape(1).to(self.device)
        dist.broadcast(value, src=self.world - 1)
        return value.item()

    def instrumented_step(self, state, batch) -> dict:
        trace = HeldTrace(state.serial, *state.cut)
        state.optimizer.zero_grad(set_to_none=True)
        try:
            with trace.saving():
                self._run(state, batch)
        finally:
            trace.remove()
        state.optimizer.step()
        return {"activations": trace.peak_bytes, "communication": 0,
                "microbatches_held": trace.peak, "microbatches": self.m,
                "held_expected": held_expected(self.strategy, self.rank, self.world, self.m)}

    def timed(self, state, steps) -> dict:
        """The bubble over the last `steps` steps: each step's span is the slowest rank's
        schedule call (one all-gather of the walls, after the timed steps)."""
        records = state.clock.records[-steps:]
        walls = torch.tensor([w for _, w in records], dtype=torch.float64, device=self.device)
        every = [torch.empty_like(walls) for _ in range(self.world)]
        dist.all_gather(every, walls)
        spans = torch.stack(every).max(0).values.tolist()
        bubbles = [1 - busy / span for (busy, _), span in zip(records, spans)]
        return {"bubble": statistics.median(bubbles),
                "bubble_ideal": ideal_bubble(self.world, self.m)}


ROWS = {"pp_gpipe": Pipeline, "pp_1f1b": Pipeline}
