"""Reference solution for E9 `pipeline`: stages, GPipe and 1F1B (instructor edition only)."""
import torch
import torch.distributed as dist
from torch import nn


def stage_layers(num_layers, group=None):
    """(start, stop): the layers stage r of N holds, model[start:stop]."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if num_layers < world:
        raise ValueError(f"stage_layers: {num_layers} layers cannot fill {world} stages: each "
                         f"stage needs at least one layer")
    return rank * num_layers // world, (rank + 1) * num_layers // world


class PipelineStage(nn.Module):
    """This rank's stage: the model's own layers model[start:stop], and its neighbours."""

    def __init__(self, model, group=None):
        super().__init__()
        start, stop = stage_layers(len(model), group)
        self.layers = model[start:stop]
        self.group = group
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        self.is_first, self.is_last = rank == 0, rank == world - 1
        self.prev = None if self.is_first else dist.get_global_rank(group, rank - 1) \
            if group is not None else rank - 1
        self.next = None if self.is_last else dist.get_global_rank(group, rank + 1) \
            if group is not None else rank + 1

    def forward(self, x):
        return self.layers(x)


def _exchange(stage, send=(), recv=()):
    """Post the sends [(tensor, peer)] and the receives [(buffer, peer)] together, wait on all."""
    ops = [dist.P2POp(dist.isend, t.contiguous(), peer, stage.group) for t, peer in send] + \
          [dist.P2POp(dist.irecv, buf, peer, stage.group) for buf, peer in recv]
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()


def _micro_batches(inputs, targets, m):
    if inputs.shape[0] % m:
        raise ValueError(f"{m} micro-batches do not divide a batch of {inputs.shape[0]}")
    return inputs.chunk(m), targets.chunk(m)


def _forward(stage, x, target, loss_fn, m):
    """One micro-batch's forward; on the last stage its loss, scaled by 1/M."""
    out = stage(x)
    return loss_fn(out, target) / m if stage.is_last else out


def _input(stage, xs, i):
    """Micro-batch i's input to this stage: the data on the first stage, else a buffer to
    receive into (the activation, which backward needs the gradient of)."""
    if stage.is_first:
        return xs[i]
    return torch.empty_like(xs[i])


def _backward(stage, x, out, grad):
    """Backward of one micro-batch; the gradient to send to the previous stage (or None)."""
    if stage.is_last:
        out.backward()
    else:
        out.backward(grad)
    return None if stage.is_first else x.grad


def gpipe(stage, inputs, targets, loss_fn, num_microbatches, group=None):
    """All forwards, then all backwards; the batch's loss on the last stage, else None."""
    xs, ys = _micro_batches(inputs, targets, num_microbatches)
    kept, loss = [], None
    for i in range(num_microbatches):
        x = _input(stage, xs, i)
        _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])
        x.requires_grad_(not stage.is_first)
        out = _forward(stage, x, ys[i], loss_fn, num_microbatches)
        if stage.is_last:
            loss = out.detach() if loss is None else loss + out.detach()
        else:
            _exchange(stage, send=[(out.detach(), stage.next)])
        kept.append((x, out))
    for x, out in kept:
        grad = None if stage.is_last else torch.empty_like(out)
        if grad is not None:
            _exchange(stage, recv=[(grad, stage.next)])
        dx = _backward(stage, x, out, grad)
        if dx is not None:
            _exchange(stage, send=[(dx, stage.prev)])
    return loss


def one_f_one_b(stage, inputs, targets, loss_fn, num_microbatches, group=None):
    """1F1B: warm-up forwards, then one forward one backward, then the last backwards."""
    m = num_microbatches
    xs, ys = _micro_batches(inputs, targets, m)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    warmup = min(world - rank - 1, m)
    kept, loss = [], None

    def forward(i, x):
        nonlocal loss
        x.requires_grad_(not stage.is_first)
        out = _forward(stage, x, ys[i], loss_fn, m)
        if stage.is_last:
            loss = out.detach() if loss is None else loss + out.detach()
        kept.append((x, out))
        return out

    def received(i):
        x = _input(stage, xs, i)
        _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])
        return x

    for i in range(warmup):
        out = forward(i, received(i))
        _exchange(stage, send=[(out.detach(), stage.next)])
    x = received(warmup) if warmup < m else None
    for i in range(warmup, m):
        out = forward(i, x)
        grad = None if stage.is_last else torch.empty_like(out)
        # this forward's send and the oldest micro-batch's gradient progress together
        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)],
                  recv=[] if stage.is_last else [(grad, stage.next)])
        old_x, old_out = kept.pop(0)
        dx = _backward(stage, old_x, old_out, grad)
        if i == m - 1:
            if dx is not None:
                _exchange(stage, send=[(dx, stage.prev)])
        else:
            x = _input(stage, xs, i + 1)
            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)],
                      recv=[] if stage.is_first else [(x, stage.prev)])
    for _ in range(warmup):
        old_x, old_out = kept.pop(0)
        grad = torch.empty_like(old_out)
        _exchange(stage, recv=[(grad, stage.next)])
        dx = _backward(stage, old_x, old_out, grad)
        if dx is not None:
            _exchange(stage, send=[(dx, stage.prev)])
    return loss


def data_parallel_pipeline(stage, inputs, targets, loss_fn, num_microbatches, dp_group=None):
    """DP x PP: this pipeline replica runs 1F1B on its own shard of the batch, then each
    stage's gradients are averaged over the replicas of that stage (dp_group)."""
    replica, replicas = dist.get_rank(dp_group), dist.get_world_size(dp_group)
    loss = one_f_one_b(stage, inputs.chunk(replicas)[replica], targets.chunk(replicas)[replica],
                       loss_fn, num_microbatches, stage.group)
    for p in stage.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= replicas
    return loss
