"""Notebook 11: pipeline stages and schedules (the student's `pipeline` module, E9) at work.

Workers (run with `launch` / `run_demo`):
* ``stage_demo``: which blocks this rank's stage holds, and a forward pass through the stages,
  the activation sent along, against the serial model.
* ``schedule_demo``: gpipe or one_f_one_b on a model of 8 blocks and a batch of 24 rows, every
  rank with the same data: the loss and gradients against serial training, the order of this
  stage's forwards and backwards, the most micro-batches whose activations it held at once, its
  point-to-point calls, and each forward and backward's start and end (time.time(), the
  node's clock).
"""
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from rtp_course.course.impl import current
from rtp_course.course.todo import needs_exercises
from rtp_course.models.stages import WIDTH, StageTrace, blocks, cut
from rtp_course.runtime import commlog
from rtp_course.runtime.launcher import rank_device

LAYERS, ROWS = 8, 24


def _data(device):
    g = torch.Generator().manual_seed(11)
    return (torch.randn(ROWS, WIDTH, generator=g).to(device),
            torch.randn(ROWS, WIDTH, generator=g).to(device))


@needs_exercises
def stage_demo(rank, world_size):
    """This rank's blocks, and the activation that leaves the last stage against serial."""
    pipe = current("pipeline")
    model = _blocks().to(rank_device())
    stage = pipe.PipelineStage(model, group=None)
    x, _ = _data(rank_device())
    h = x if stage.is_first else torch.empty_like(x)
    if not stage.is_first:
        dist.recv(h, stage.prev)
    with torch.no_grad():
        out = stage(h)
    if not stage.is_last:
        dist.send(out, stage.next)
    mine = {id(p) for p in stage.parameters()}
    held = [i for i, b in enumerate(model) if any(id(p) in mine for p in b.parameters())]
    result = {"blocks": held, "expected": list(range(*cut(rank, world_size, LAYERS)))}
    if stage.is_last:
        with torch.no_grad():
            result["error"] = (out - model(x)).abs().max().item()
    return result


def _blocks() -> torch.nn.Sequential:
    """The same float32 blocks on every rank and in every demo."""
    torch.manual_seed(0)
    return blocks(LAYERS)


class _Clock(StageTrace):
    """StageTrace that also notes when each forward and backward starts and ends."""

    def __init__(self, model, start, stop):
        super().__init__(model, start, stop)
        self.spans = []
        self.handles.append(model[stop - 1].register_forward_hook(self._forward_end))
        self.handles.append(model[start].register_full_backward_hook(self._backward_end))

    @staticmethod
    def _now():
        return time.time()      # one clock for every rank of the node: the timelines line up

    def _forward(self, module, args):
        super()._forward(module, args)
        self.spans.append(["F", self.current, self._now(), None])

    def _forward_end(self, module, args, out):
        self.spans[-1][3] = self._now()
        i = self.current
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda g: self.spans.append(["B", i, self._now(), None]))

    def _backward_end(self, module, grad_in, grad_out):
        for span in reversed(self.spans):
            if span[0] == "B" and span[3] is None:
                span[3] = self._now()
                break


@needs_exercises
def schedule_demo(rank, world_size, schedule="gpipe", microbatches=6):
    """One step of `schedule` ("gpipe" or "one_f_one_b") against serial training."""
    pipe = current("pipeline")
    commlog.install()
    device = rank_device()
    model = _blocks().to(device)
    reference = _blocks().to(device)
    start, stop = cut(rank, world_size, LAYERS)
    clock = _Clock(model, start, stop)
    stage = pipe.PipelineStage(model, group=None)
    x, y = _data(device)
    dist.barrier()
    commlog.reset(schedule)
    with clock.saving():
        loss = getattr(pipe, schedule)(stage, x, y, F.mse_loss, microbatches, group=None)
    calls = {}
    for e in commlog.events():
        calls[e.kind] = calls.get(e.kind, 0) + 1
    serial = F.mse_loss(reference(x), y)
    serial.backward()
    grads = [(p.grad - q.grad).abs().max().item() for p, q in
             zip(model[start:stop].parameters(), reference[start:stop].parameters())]
    return {"order": clock.order(), "held": clock.peak, "calls": calls,
            "loss_error": None if loss is None else abs(loss.item() - serial.item()),
            "grad_error": max(grads), "spans": [tuple(s) for s in clock.spans]}


def describe(results, schedule) -> str:
    """schedule_demo's per-rank results as a few lines."""
    lines = []
    for r, res in enumerate(results):
        loss = "" if res["loss_error"] is None else f", loss error {res['loss_error']:.1e}"
        calls = ", ".join(f"{k} x {n}" for k, n in sorted(res["calls"].items())) or "none"
        lines.append(f"stage {r}: gradient error {res['grad_error']:.1e}{loss}; held at most "
                     f"{res['held']} micro-batches; {calls}\n    {res['order']}")
    return f"{schedule}:\n" + "\n".join(lines)
