"""Reference: 2D parallelism, tensor parallel inside a group and data parallel across groups.

Rank layout for the W ranks of the job and tp_size T (D = W / T data-parallel replicas):

    rank = dp_rank * T + tp_rank
    TP group d: ranks [d*T, d*T + T)           consecutive, so it fits on one node
    DP group t: ranks [t, t + T, t + 2T, ...]  the same shard in every replica

Example W=4, T=2: TP groups {0,1} {2,3}; DP groups {0,2} {1,3}.
"""
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import data_parallel, tensor_parallel


@dataclass
class ParallelGroups:
    """This rank's two groups and its coordinates; `tp_group, dp_group = groups` unpacks."""
    tp_group: dist.ProcessGroup
    dp_group: dist.ProcessGroup
    tp_size: int
    dp_size: int
    tp_rank: int
    dp_rank: int

    def __iter__(self):
        return iter((self.tp_group, self.dp_group))


def build_groups(tp_size):
    """Create every TP and DP group; return this rank's as a ParallelGroups.

    dist.new_group is collective over the whole job: every process calls
    build_groups, and each call creates all groups in the same order (TP groups
    d = 0..D-1, then DP groups t = 0..T-1), keeping only its own.
    """
    world, me = dist.get_world_size(), dist.get_rank()
    ranks = list(range(world))
    if tp_size < 1 or world % tp_size:
        raise ValueError(f"build_groups: the world size {world} is not divisible by "
                         f"tp_size={tp_size}; pick a tp_size that divides {world}")
    dp_size = world // tp_size
    tp_rank, dp_rank = me % tp_size, me // tp_size
    tp_group = dp_group = None
    for d in range(dp_size):
        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])
        if d == dp_rank:
            tp_group = created
    for t in range(tp_size):
        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])
        if t == tp_rank:
            dp_group = created
    return ParallelGroups(tp_group, dp_group, tp_size, dp_size, tp_rank, dp_rank)


def parallelize_2d(model, groups):
    """Tensor-parallelize `model` (a course transformer) over groups.tp_group, in place.

    Then broadcast every parameter and buffer from the first rank of groups.dp_group,
    so the D replicas start equal (like DataParallel). Returns the model.
    """
    tensor_parallel.parallelize_transformer(model, groups.tp_group)
    src = dist.get_global_rank(groups.dp_group, 0)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t, src=src, group=groups.dp_group)
    return model


def sync_gradients(model, groups):
    """After backward: average every parameter's gradient over groups.dp_group.

    Each replica's loss is the mean over its own batch, so the average equals the
    gradient of the mean loss over the concatenated batch (equal batch sizes).
    Shards and replicated parameters alike: each DP group holds the same shard.
    """
    data_parallel.average_gradients(model, group=groups.dp_group)


def train_step_2d(model, optimizer, loss_fn, inputs, targets, groups):
    """One step: forward on this replica's batch, backward, sync_gradients, step. Returns the loss."""
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    sync_gradients(model, groups)
    optimizer.step()
    return loss.detach()
