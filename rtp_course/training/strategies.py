"""The parallel strategies that training and the benchmark share: how each one wraps a
serial model, which batch each rank feeds it, and how a loss is read back.

    model = build_model("lm", seed=0)                   # the same serial weights on every rank
    model = wrap(model, "rtp")                          # or "ddp", "fsdp", "tp", "dp"
    x, y = local_batch("rtp", global_batch)             # this rank's share of the step's batch
    loss = loss_fn(model(x), y); loss.backward(); optimizer.step()
    global_loss("rtp", loss)                            # the loss of the whole global batch

Strategies:
    ddp   torch DistributedDataParallel                     each rank: its own slice of the batch
    fsdp  torch FSDP2 (`fully_shard`, one unit per block)   each rank: its own slice
    tp    your tensor_parallel.parallelize_transformer      every rank: the WHOLE global batch
    rtp   your flyweight.RotatedTensorParallel              each rank: its own slice
    dp    your data_parallel.DataParallel (mini-DDP)        each rank: its own slice
    zero1 your sharding.ShardedOptimizer (ZeRO-1)           each rank: its own slice
          (the model as it is; `optimizer(...)` makes the sharded optimizer, which averages)
    fsdp_yours  your sharding.FullyShardedDataParallel      each rank: its own slice

Communication buffers (`CommunicationProbe`, `COMMUNICATION`): the memory a strategy needs
for communicating besides the parameters, gradients, optimizer states and activations.

Why TP differs: its ranks split the weights of one computation, so they must all see
the same inputs. Feeding TP the whole global batch (N slices' worth) makes one step of
every strategy compute the gradient of the same mean loss: started from the same
weights, they train the same model (up to float rounding).

The exercise strategies (tp, rtp, dp, zero1, fsdp_yours) come from `rtp_course.course.impl.current`: your own
`rtp_course` unless $RTP_COURSE_IMPL names another implementation (e.g. solutions).
"""
from __future__ import annotations

import re
import warnings
import weakref

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn

from rtp_course.course import impl, todo
try:
    from torch.distributed.tensor import DTensor
except ImportError:                                     # torch < 2.5
    from torch.distributed._tensor import DTensor

STRATEGIES = ("ddp", "fsdp", "tp", "rtp", "dp", "zero1", "fsdp_yours")
LABELS = {"ddp": "DDP", "fsdp": "FSDP", "tp": "TP", "rtp": "RTP", "dp": "mini-DDP",
          "zero1": "ZeRO-1 (yours)", "fsdp_yours": "FSDP (yours)",
          # the bench's rows with models of their own (training/pipeline_rows.py, expert_rows.py)
          "pp_gpipe": "PP GPipe", "pp_1f1b": "PP 1F1B", "ep": "EP (MoE)", "ep_ddp": "MoE DDP"}
SAME_BATCH = ("tp",)                      # strategies whose ranks all feed the global batch
EXERCISE_OF = {"tp": "tensor_parallel", "rtp": "flyweight", "dp": "data_parallel",
               "zero1": "sharding", "fsdp_yours": "sharding", "pp_gpipe": "pipeline",
               "pp_1f1b": "pipeline", "ep": "experts"}


def _check(strategy):
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")


def exercise_guard(strategy: str):
    """A stub's NotImplementedError raised inside names what to implement for `strategy`."""
    return todo.guard(EXERCISE_OF.get(strategy))


def default_device() -> torch.device:
    """cuda:<current> under NCCL, else the CPU."""
    if dist.is_initialized() and "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def wrap(model: nn.Module, strategy: str, group=None, device=None, dtype=None) -> nn.Module:
    """`model` (serial, the same weights on every rank) moved to `device` (and `dtype`, its
    parameters and buffers, every strategy alike) and wrapped for `strategy` over `group`
    (default: the world). Returns the module to train."""
    _check(strategy)
    device = torch.device(device) if device is not None else default_device()
    model = model.to(device) if dtype is None else model.to(device=device, dtype=dtype)
    with exercise_guard(strategy):
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            ids = [device.index] if device.type == "cuda" else None
            return DistributedDataParallel(model, device_ids=ids, process_group=group)
        if strategy == "fsdp":
            return _fully_shard(model, group, device)
        if strategy == "tp":
            return impl.current("tensor_parallel").parallelize_transformer(model, group=group)
        if strategy == "rtp":
            return impl.current("flyweight").RotatedTensorParallel(model, group=group)
        if strategy == "fsdp_yours":
            return impl.current("sharding").FullyShardedDataParallel(model, group=group)
        if strategy == "zero1":
            return model          # ShardedOptimizer (optimizer()) broadcasts and averages
        return impl.current("data_parallel").DataParallel(model, group=group)


def optimizer(strategy: str | None, params, name: str = "adam", lr: float = 1e-3, group=None):
    """The optimizer `strategy` trains with: Adam or SGD, or for zero1 your ShardedOptimizer
    around it (each rank keeps 1/N of its state)."""
    cls = torch.optim.Adam if name == "adam" else torch.optim.SGD
    if strategy == "zero1":
        with exercise_guard(strategy):
            return impl.current("sharding").ShardedOptimizer(params, cls, group=group, lr=lr)
    return cls(params, lr=lr)


def optimizer_tensors(opt) -> list:
    """The tensors an optimizer keeps besides the model's parameters and gradients: its state
    (Adam's moments; 0-dim step counters left out); for a ShardedOptimizer, its inner
    optimizer's state, and that optimizer's parameters (this rank's shards: a copy of 1/N of
    the parameters, the fp32 master copy of mixed precision) and their gradients."""
    inner = getattr(opt, "optimizer", None)
    own = inner if isinstance(inner, torch.optim.Optimizer) else opt
    tensors = [v for state in own.state.values() for v in state.values()
               if torch.is_tensor(v) and v.dim() > 0]
    if own is not opt:
        shards = [p for g in own.param_groups for p in g["params"]]
        tensors += shards + [p.grad for p in shards if p.grad is not None]
    return tensors


def _fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP gathers one at a time: the transformer blocks, or, for a model
    without blocks (the CNN), each child that holds parameters. The root gets the rest."""
    for name in ("layers", "blocks"):
        blocks = getattr(model, name, None)
        if isinstance(blocks, nn.ModuleList):
            return list(blocks)
    return [m for m in model.children() if any(True for _ in m.parameters())]


def _fully_shard(model, group, device):
    """FSDP2: every parameter becomes a DTensor sharded along dim 0 over the group's ranks.
    (FSDP1, FullyShardedDataParallel, refuses to run without an accelerator.)"""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:                                   # torch 2.4 / 2.5
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import DeviceMesh
    # Our models return a view (the logits); we never modify it in place.
    warnings.filterwarnings("ignore", message=".*returned a view tensor.*")
    mesh = DeviceMesh.from_group(group if group is not None else dist.group.WORLD, device.type)
    for unit in _fsdp_units(model):
        fully_shard(unit, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def local_batch(strategy: str, batch, group=None):
    """What this rank feeds: the whole global batch under TP, else its contiguous slice
    (`rtp_course.training.data.rank_batch`). `batch`: a tensor or a tuple of tensors."""
    _check(strategy)
    if strategy in SAME_BATCH:
        return batch
    from rtp_course.training.data import rank_batch
    return rank_batch(batch, dist.get_rank(group), dist.get_world_size(group))


def global_loss(strategy: str, loss: torch.Tensor, group=None) -> float:
    """The loss of the global batch: the mean of the ranks' losses (each rank saw an equal
    slice), or, under TP, any rank's loss (every rank computed the same one)."""
    _check(strategy)
    value = loss.detach().float().reshape(1).clone()
    if strategy not in SAME_BATCH:
        dist.all_reduce(value, group=group)
        value /= dist.get_world_size(group)
    return value.item()


# ------------------------------------------------------------------ communication buffers
COMMUNICATION = {   # what each strategy's buffers are, and how CommunicationProbe measures them
    "ddp": "gradient buckets: DDP's flat copies of the gradients that it all-reduces "
           "(bucket sizes from DDP's logging data)",
    "fsdp": "gathered parameters and their unsharded gradients held at once, sampled at every "
            "tensor saved or used by autograd during one step (the flat all-gather buffer, "
            "freed after its copy-out, is not seen)",
    "rtp": "receive buffers of torch.distributed.recv/irecv alive at once during one step: "
           "the in-flight weight shards, and in backward the gradient accumulators",
    "tp": "none apart from activations: TP all-reduces and gathers activations",
    "dp": "none: gradients are all-reduced in place",
    "zero1": "the buffers of step() alive at once: padded gradients it reduce-scatters and "
             "shards it all-gathers (tensors given to those calls, less the parameters, "
             "gradients and what the optimizer keeps), sampled at each call",
    "fsdp_yours": "gathered units and full gradients alive at once (tensors given to your "
                  "all-gathers and reduce-scatters, while their storage exists), sampled at "
                  "each of those calls and at every tensor saved or used by autograd",
    "pp_gpipe": "none apart from activations: what a stage receives is a micro-batch's "
                "activation (held until its backward: activations) or its gradient (one at a time)",
    "pp_1f1b": "none apart from activations, as GPipe",
    "ep": "not measured: the all-to-alls' dispatched and combined tokens (about top-k x the "
          "rank's tokens each way) live during forward; the experts' copies of them are "
          "saved for backward (activations)",
    "ep_ddp": "gradient buckets, as DDP's",
}


class CommunicationProbe:
    """Peak bytes of `strategy`'s communication buffers during the steps run inside

        with CommunicationProbe(strategy, model) as probe:   # wraps recv/irecv meanwhile
            ...one step, calling probe.sample() often (e.g. from saved_tensors_hooks)...
        probe.peak_bytes()

    recv/irecv are wrapped in torch.distributed AND distributed_c10d: batch_isend_irecv's
    P2POp checks `op in [isend, irecv]` against the latter's names. For your ZeRO-1 and FSDP,
    the all-gathers and reduce-scatters are wrapped the same way."""
    RECEIVES = ("recv", "irecv")
    SHARDING = ("all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor")

    def __init__(self, strategy, model, optimizer=None):
        if strategy not in LABELS:                  # the benchmark's own rows included
            _check(strategy)
        self.strategy, self.model = strategy, model
        self.kept = list(model.parameters()) + (optimizer_tensors(optimizer) if optimizer else [])
        self.live = self.received = self.gathered = 0
        self.slots = [(m, n) for m in model.modules() for n, p in m.named_parameters(recurse=False)
                      if isinstance(p, DTensor)] if strategy == "fsdp" else []
        self.buffers = []          # weak references to what the sharding strategies communicate
        self.wrapped = self.RECEIVES + (self.SHARDING if strategy in EXERCISE_OF and
                                        EXERCISE_OF[strategy] == "sharding" else ())

    def sample(self):
        """FSDP2 swaps a unit's DTensor parameters for gathered plain ones while it computes:
        count those (and their .grad) present now. Your FSDP: the buffers it communicated
        whose storage exists now."""
        if self.buffers:
            self._sample_buffers()
        seen = {}
        for m, n in self.slots:
            p = m._parameters.get(n)
            for t in (p, None if p is None else p.grad):
                if t is not None and not isinstance(t, DTensor):
                    s = t.untyped_storage()
                    seen[s.data_ptr()] = s.nbytes()
        self.gathered = max(self.gathered, sum(seen.values()))

    def __enter__(self):
        self.saved = {n: getattr(c10d, n) for n in self.wrapped}
        for n, fn in self.saved.items():
            setattr(c10d, n, self._track(fn) if n in self.RECEIVES else self._collective(fn))
            setattr(dist, n, getattr(c10d, n))
        return self

    def _collective(self, fn):
        def call(*args, **kwargs):
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            tensors += [t for a in list(args) + list(kwargs.values()) if isinstance(a, list)
                        for t in a if isinstance(t, torch.Tensor)]
            self.buffers.extend(weakref.ref(t) for t in tensors)
            self._sample_buffers()
            return fn(*args, **kwargs)
        return call

    def _sample_buffers(self):
        """Bytes of the communicated tensors' storages that exist now, less what other
        categories count: parameters, gradients, what the optimizer keeps (a reduce-scatter
        may read a gradient in place, or write a shard's)."""
        own = {t.untyped_storage().data_ptr() for p in self.kept for t in (p, p.grad)
               if t is not None}
        live, kept = {}, []
        for ref in self.buffers:
            t = ref()
            if t is None:
                continue
            kept.append(ref)
            storage = t.untyped_storage()
            if storage.data_ptr() and storage.data_ptr() not in own:
                live[storage.data_ptr()] = storage.nbytes()
        self.buffers = kept
        self.gathered = max(self.gathered, sum(live.values()))

    def _track(self, fn):
        def receive(tensor, *args, **kwargs):
            n = tensor.numel() * tensor.element_size()
            self.live += n
            self.received = max(self.received, self.live)
            weakref.finalize(tensor, self._freed, n)
            return fn(tensor, *args, **kwargs)
        return receive

    def _freed(self, n):
        self.live -= n

    def __exit__(self, *exc):
        for n, fn in self.saved.items():
            setattr(c10d, n, fn)
            setattr(dist, n, fn)

    def peak_bytes(self) -> int:
        if hasattr(self.model, "_get_ddp_logging_data"):     # torch's DDP, on any model
            info = self.model._get_ddp_logging_data()
            sizes = info.get("rebuilt_bucket_sizes") or info.get("bucket_sizes") or ""
            return sum(int(n) for n in re.findall(r"\d+", str(sizes)))
        return {"fsdp": self.gathered, "rtp": self.received, "zero1": self.gathered,
                "fsdp_yours": self.gathered}.get(self.strategy, 0)
