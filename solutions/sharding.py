"""Reference: ZeRO-1 (a sharded optimizer) and FSDP by hand."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def shard_size(numel, world_size):
    """Elements of one shard: ceil(numel / world_size)."""
    return -(-numel // world_size)


def padded(flat, world_size):
    """`flat` (1-D) with zeros appended up to a multiple of `world_size` elements."""
    extra = shard_size(flat.numel(), world_size) * world_size - flat.numel()
    return F.pad(flat, (0, extra)) if extra else flat


def own_chunk(flat, rank, world_size):
    """A copy of chunk `rank` of the padded `flat`."""
    size = shard_size(flat.numel(), world_size)
    return padded(flat, world_size)[rank * size:(rank + 1) * size].clone()


def source(group):
    return dist.get_global_rank(group, 0) if group is not None else 0


class ShardedOptimizer(torch.optim.Optimizer):
    """ZeRO-1: each rank keeps the optimizer state of its chunk of every parameter."""

    def __init__(self, params, optimizer_cls, group=None, **optimizer_kwargs):
        super().__init__(params, optimizer_kwargs)
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.params = [p for g in self.param_groups for p in g["params"]]
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p, src=source(group), group=group)
        self.shards = [own_chunk(p.detach().reshape(-1), self.rank, self.world)
                       .requires_grad_(p.requires_grad) for p in self.params]
        self.optimizer = optimizer_cls(self.shards, **optimizer_kwargs)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for p, shard in zip(self.params, self.shards):
            if p.grad is None:
                shard.grad = None
                continue
            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
            shard.grad = grad.div_(self.world)
        self.optimizer.step()
        for p, shard in zip(self.params, self.shards):
            full = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
            p.copy_(full[:p.numel()].view_as(p))
        return loss


def units_of(module, prefix=""):
    """[(name, submodule)]: the children of `module` that hold parameters, an nn.ModuleList or
    nn.Sequential child replaced by its own units."""
    found = []
    for name, child in module.named_children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            found += units_of(child, f"{prefix}{name}.")
        elif any(True for _ in child.parameters()):
            found.append((prefix + name, child))
    return found


class _Unit:
    """One layer of FSDP: its flat shard, and the full flat tensor whose storage exists only
    while the layer computes."""

    def __init__(self, owner, index, name, module):
        self.owner, self.index, self.name, self.module = owner, index, name, module
        world, rank = owner.world, owner.rank
        named = list(module.named_parameters())
        self.slots = []                      # (name in the unit, submodule, its name there, shape)
        for qualified, p in named:
            path, _, leaf = qualified.rpartition(".")
            self.slots.append((qualified, module.get_submodule(path), leaf, p.shape))
        flat = torch.cat([p.detach().reshape(-1) for _, p in named])
        self.numel = flat.numel()
        self.shard = nn.Parameter(own_chunk(flat, rank, world))
        for _, sub, leaf, _ in self.slots:
            del sub._parameters[leaf]
        self.full = self.shard.new_empty(self.shard.numel() * world)
        self.nbytes = self.full.untyped_storage().nbytes()
        self.full.untyped_storage().resize_(0)          # gathered only while in use
        self.full.requires_grad_(True)
        self.full.register_post_accumulate_grad_hook(self._after_backward)
        self.handle, self.ready = None, False
        module.register_forward_pre_hook(self._before_forward)
        module.register_forward_hook(self._after_forward)
        module.register_full_backward_pre_hook(self._before_backward)

    def _neighbour(self, step):
        units = self.owner.units
        i = self.index + step
        return units[i] if 0 <= i < len(units) else None

    def post_gather(self):
        """Start gathering this unit (nothing if it is gathered or on its way)."""
        if self.ready or self.handle is not None:
            return
        self.full.untyped_storage().resize_(self.nbytes)
        # .data: a write autograd does not see (it saved views of `full` in forward)
        self.handle = dist.all_gather_into_tensor(self.full.data, self.shard.detach(),
                                                  group=self.owner.group, async_op=True)

    def wait_gathered(self):
        self.post_gather()
        if self.handle is not None:
            self.handle.wait()
            self.handle, self.ready = None, True

    def free(self):
        self.full.untyped_storage().resize_(0)
        self.ready = False

    def _before_forward(self, module, args):
        self.wait_gathered()
        nxt = self._neighbour(+1)
        if nxt is not None:
            nxt.post_gather()                            # prefetch: travels while we compute
        for (_, sub, leaf, shape), piece in zip(self.slots, self.pieces(self.full)):
            setattr(sub, leaf, piece.view(shape))

    def pieces(self, full):
        """`full` split into the unit's parameters (flat), then the padding."""
        sizes = [shape.numel() for *_, shape in self.slots]
        return full.split(sizes + [full.numel() - self.numel])

    def _after_forward(self, module, args, output):
        self.free()

    def _before_backward(self, module, grad_output):
        self.wait_gathered()
        prev = self._neighbour(-1)
        if prev is not None:
            prev.post_gather()

    def _after_backward(self, full):
        grad = self.shard.new_empty(self.shard.numel())
        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
        grad.div_(self.owner.world)
        if self.shard.grad is None:
            self.shard.grad = grad
        else:
            self.shard.grad += grad
        full.grad = None
        self.free()


class FullyShardedDataParallel(nn.Module):
    """FSDP by hand: every layer's parameters live as a flat shard per rank, gathered for use."""

    def __init__(self, module, group=None):
        super().__init__()
        self.module, self.group = module, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=source(group), group=group)
        self.shards = nn.ParameterList()
        self.units = []
        for name, unit in units_of(module):
            self.units.append(_Unit(self, len(self.units), name, unit))
            self.shards.append(self.units[-1].shard)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def full_state_dict(self):
        state = {}
        for unit in self.units:
            full = unit.shard.new_empty(unit.shard.numel() * self.world)
            dist.all_gather_into_tensor(full, unit.shard.detach(), group=self.group)
            for (qualified, _, _, shape), piece in zip(unit.slots, unit.pieces(full)):
                state[f"{unit.name}.{qualified}"] = piece.view(shape).clone()
        for name, buffer in self.module.named_buffers():
            state[name] = buffer.detach().clone()
        return state
