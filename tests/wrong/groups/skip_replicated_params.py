"""sync_gradients averages only the tensor-parallel layers' parameters and forgets the replicated ones (LayerNorms, classifier head / LM decoder).

Replicated parameters are equal inside a TP group, but each DP replica saw another batch,
so they must be averaged over the DP group too.

WORLD_SIZES: 4
EXPECT: train_2d_bert.*sync/grad blocks\.0\.ln1\.weight.*hint:.*replicated LayerNorms
ONLY: train_2d_bert
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


def build_groups(tp_size, group=None):
    """Create every TP and DP group; return this rank's as a ParallelGroups.

    dist.new_group is collective over the whole job: every process calls
    build_groups, and each call creates all groups in the same order (TP groups
    d = 0..D-1, then DP groups t = 0..T-1), keeping only its own.
    """
    ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
    world, me = len(ranks), dist.get_rank(group)
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
    tp_layers = (tensor_parallel.ColumnParallelLinear, tensor_parallel.RowParallelLinear,
                 tensor_parallel.ParallelEmbedding)
    for module in model.modules():
        if isinstance(module, tp_layers):   # replicated params are already equal
            for p in module.parameters():
                dist.all_reduce(p.grad, group=groups.dp_group)
                p.grad /= groups.dp_size


def train_step_2d(model, optimizer, loss_fn, inputs, targets, groups):
    """One step: forward on this replica's batch, backward, sync_gradients, step. Returns the loss."""
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    sync_gradients(model, groups)
    optimizer.step()
    return loss.detach()
