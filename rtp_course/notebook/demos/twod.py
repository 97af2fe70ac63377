"""Notebook 08: 2D parallelism (the student's `groups` module, E6) at work.

Workers (run with `launch` / `run_demo`):
* ``layout``: the TP and DP groups build_groups gave this rank (as global ranks).
* ``replicas_start_equal``: each replica builds its model from another seed; after
  parallelize_2d, a shard is the same on every rank of its DP group.
* ``train``: the BERT-like classifier trained 2D-parallel (TP inside a replica, DP across
  replicas); with parallel=False, serially on the same global batches in the caller.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from rtp_course.training.data import classification_tokens, rank_batch
from rtp_course.course.todo import needs_exercises
from rtp_course.course.impl import current
from rtp_course.models import build_model
from rtp_course.runtime.launcher import rank_device

CONFIG = dict(num_classes=2)        # on top of the tiny BERT: width 48, 12 heads, 2 blocks


def _device():
    """This rank's device: its GPU under NCCL (mapped onto the visible ones), else the CPU."""
    return rank_device()


@needs_exercises
def layout(rank, world_size, tp_size):
    """{"tp_rank", "dp_rank", "tp_group": [global ranks], "dp_group": [global ranks]}."""
    g = current("groups").build_groups(tp_size)
    return {"tp_rank": g.tp_rank, "dp_rank": g.dp_rank,
            "tp_group": dist.get_process_group_ranks(g.tp_group),
            "dp_group": dist.get_process_group_ranks(g.dp_group)}


@needs_exercises
def replicas_start_equal(rank, world_size, tp_size):
    """A checksum (sum of the first shard's values) before and after parallelize_2d.

    Every rank of one TP group uses the same seed (TP needs one serial model per
    replica); each replica uses its own seed, so replicas start different on purpose.
    """
    groups = current("groups")
    g = groups.build_groups(tp_size)
    model = build_model("bert", seed=100 + g.dp_rank, tiny=True, **CONFIG).to(_device())
    before = model.blocks[0].mlp.fc1.weight.detach().sum().item()   # serial weight, whole
    groups.parallelize_2d(model, g)
    shard = model.blocks[0].mlp.fc1.weight.detach()
    return {"tp_rank": g.tp_rank, "dp_rank": g.dp_rank, "serial checksum": before,
            "shard shape": list(shard.shape), "shard checksum": shard.sum().item()}


def global_batches(steps, batch, seed=0):
    """The global batches of every step: (tokens [steps, batch, S], labels [steps, batch])."""
    cfg = build_model("bert", tiny=True, **CONFIG).config
    tokens, labels = classification_tokens(steps * batch, cfg["max_seq_len"], cfg["vocab_size"],
                                           seed=seed, num_classes=cfg["num_classes"])
    return tokens.view(steps, batch, -1), labels.view(steps, batch)


@needs_exercises
def train(rank, world_size, tp_size=2, steps=25, batch=32, lr=2e-3, seed=0, parallel=True):
    """Adam on the tiny BertClassifier. `batch` is the GLOBAL batch: replica d trains on
    its piece d (rank_batch), the ranks of one replica on the same piece.

    Returns {"losses": this replica's loss per step, "dp_rank"}; parallel=False trains
    the serial model on the whole global batch in the calling process: train(0, 1, ...,
    parallel=False).
    """
    tokens, labels = global_batches(steps, batch, seed)
    if parallel:
        groups = current("groups")
        g = groups.build_groups(tp_size)
        dev = _device()
        model = groups.parallelize_2d(build_model("bert", seed=seed, tiny=True, **CONFIG).to(dev), g)
    else:
        g, dev = None, torch.device("cpu")
        model = build_model("bert", seed=seed, tiny=True, **CONFIG)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = tokens[step].to(dev), labels[step].to(dev)
        if parallel:
            x, y = rank_batch((x, y), g.dp_rank, g.dp_size)
            loss = groups.train_step_2d(model, optimizer, F.cross_entropy, x, y, g)
        else:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        losses.append(loss.detach().item())
    return {"losses": losses, "dp_rank": g.dp_rank if parallel else 0}
