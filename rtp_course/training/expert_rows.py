"""The benchmark's expert-parallel rows (E10): the mixture-of-experts layer with its experts
spread over the ranks (your experts.ExpertParallelMoE, trained by your experts.train_step),
against the same layer replicated with DDP.

The layer is the given rtp_course.models.moe.MoE: dim ninp, expert hidden size nhid,
E = --experts experts, top-2 routing, capacity factor 1.25. Each rank feeds its own tokens
(batch x seq_len of width ninp, targets sin(x)) in both rows; the loss is MSE + 0.01 x the
load-balancing loss. Both train on the mean of the ranks' losses with each rank's tokens one
routing group, so they train the same layer: their losses agree up to rounding, and the memory
and step time differ by how the experts are placed (EP: E/N experts a rank; DDP: all E).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from rtp_course.course import impl
from rtp_course.models.moe import MoE
from rtp_course.training import strategies
from rtp_course.training.workloads import OwnModel

DEFAULT_EXPERTS = 8
TOP_K, CAPACITY_FACTOR, AUX_WEIGHT = 2, 1.25, 0.01


class Experts(OwnModel):
    """ep (your expert parallelism), ep_ddp (the same layer under torch's DDP)."""
    model_name = "moe"
    baseline = "ep_ddp"

    def __init__(self, strategy, opts, device):
        super().__init__(strategy, opts, device)
        self.experts = opts.get("experts") or DEFAULT_EXPERTS

    def describe(self) -> str:
        return (f"MoE layer dim {self.config['ninp']}, expert hidden {self.config['nhid']}, "
                f"{self.experts} experts, top-{TOP_K}, capacity factor {CAPACITY_FACTOR}, "
                f"{self.rows // torch.distributed.get_world_size()} tokens a rank a step")

    def _experts(self):
        with strategies.exercise_guard(self.strategy):
            return impl.current("experts")

    def build(self):
        torch.manual_seed(self.opts["task"].seed)
        moe = MoE(self.config["ninp"], self.config["nhid"], self.experts, TOP_K,
                  CAPACITY_FACTOR).to(device=self.device, dtype=self.dtype)
        if self.strategy == "ep":
            with strategies.exercise_guard(self.strategy):
                model = self._experts().ExpertParallelMoE(moe)
        else:
            from torch.nn.parallel import DistributedDataParallel
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(moe, device_ids=ids)
        return SimpleNamespace(model=model, optimizer=self.optimizer(model.parameters()))

    def loss(self, model, batch):
        x, y = batch
        out, aux = model(x)
        return F.mse_loss(out, y) + AUX_WEIGHT * aux

    def step(self, state, batch):
        if self.strategy == "ep":
            x, y = batch
            with strategies.exercise_guard(self.strategy):
                self._experts().train_step(state.model, state.optimizer, F.mse_loss, x, y,
                                           aux_weight=AUX_WEIGHT)
            return
        state.optimizer.zero_grad(set_to_none=True)
        self.loss(state.model, batch).backward()
        state.optimizer.step()

    def backward_and_step(self, state, loss):
        loss.backward()
        if self.strategy == "ep":
            with strategies.exercise_guard(self.strategy):
                self._experts().sync_gradients(state.model)
        state.optimizer.step()

    @torch.no_grad()
    def evaluate(self, state) -> float:
        loss = self.loss(state.model, self.eval_batch())
        return strategies.global_loss("ddp", loss)        # the mean of the ranks' losses


ROWS = {"ep": Experts, "ep_ddp": Experts}
