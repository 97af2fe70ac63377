"""NCCL's rules on a call, applied to gloo calls on CPU (commlog's wrappers call `before`).

Where gloo accepts what NCCL refuses, or behaves otherwise, a checker rank on CPU
behaves as NCCL (the table in runtime/nccl/__init__.py says why each holds):

* a non-contiguous tensor handed to a collective or a send is refused;
* ReduceOp.AVG is a sum, then a division by the group's size (gloo before torch 2.8 lacks
  it); the bitwise reductions, which NCCL lacks, are refused;
* a receive from any source (src=None), which NCCL lacks, is refused;
* tags are dropped: NCCL matches a pair's sends and receives by their order alone, gloo by
  tag as well (a send and a receive with different tags would hang on gloo only);
* an all_gather into outputs of different sizes is done as NCCL does it (one broadcast per
  rank), where gloo refuses it; so is an all_to_all of tensors of different sizes (one
  all_to_all_single of them flattened);
* batch_isend_irecv returns ONE handle for the whole batch, and a rank's send to itself in
  a batch is delivered (gloo has no connection to itself): commlog.wrap, `self_ops`;
* a work may be waited again (returns at once), and completes without a wait (commlog.works).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from rtp_course.runtime import asked

RULE = "rule 'Device'"    # the course-wide rules every stub points to (rtp_course/course/rules.py)
CONTIGUITY = "rule 'Contiguity'"

# Calls that take a reduce op: its positional index (keyword "op").
_OP_AT = {"all_reduce": 1, "all_reduce_coalesced": 1, "reduce": 2, "reduce_scatter": 2,
          "reduce_scatter_tensor": 2, "reduce_scatter_single": 2, "_reduce_scatter_base": 2}
_TAG_AT = {"send": 3, "recv": 3, "isend": 3, "irecv": 3}
_SRC_AT = {"recv": 1, "irecv": 1}


class NCCLRuleError(RuntimeError):
    """What NCCL would refuse on a GPU run, refused on CPU too."""


def before(kind: str, position, keyword, args: tuple, kwargs: dict, where: str):
    """(args, kwargs, after, instead): the call as NCCL would take it; `after()` (or None)
    finishes the result once the operation completed (AVG's division); `instead()` (or None)
    does the whole operation in place of gloo's (an uneven all_gather)."""
    _refuse_gloo_only(kind, where)
    _refuse_non_contiguous(kind, position, keyword, args, kwargs, where)
    if kind in _ALSO_SENT:          # the input too: NCCL checks every tensor of the call
        _refuse_non_contiguous(kind, *_ALSO_SENT[kind], args, kwargs, where)
    _splits_with_numbers(kind, args, kwargs, where)
    _refuse_any_source(kind, args, kwargs, where)
    _refuse_bitwise(kind, args, kwargs, where)
    args, kwargs = _without_tag(kind, args, kwargs)
    averaged = _average_by_sum(kind, args, kwargs)
    if averaged is not None:
        return (*averaged, None)
    return args, kwargs, None, (_uneven_all_gather(kind, args, kwargs)
                                or _uneven_all_to_all(kind, args, kwargs))


# NCCL rule 'gloo only' (DESIGN.md)
def _refuse_gloo_only(kind: str, where: str) -> None:
    """monitored_barrier exists for gloo alone: on NCCL torch raises (distributed_c10d's
    monitored_barrier: "only implemented for GLOO backend")."""
    if kind == "monitored_barrier":
        raise NCCLRuleError(
            f"dist.monitored_barrier (at {where}): {RULE} (torch supports it on gloo only and "
            f"raises on a GPU run; dist.barrier() waits on both, and a collective that every "
            f"rank makes needs no barrier before it)")


def before_own_method(name: str, position, args: tuple, where: str) -> None:
    """A process group's own method (`pg.allreduce([t])`) as NCCL would take it: its tensors
    contiguous, and no receive from any source."""
    if name == "recv_anysource":
        raise NCCLRuleError(
            f"ProcessGroup.recv_anysource (at {where}): {RULE} (NCCL has no receive from any "
            f"source, which gloo has: name the rank the tensor comes from, src=...)")
    _refuse_non_contiguous(f"ProcessGroup.{name}", position, None, args, {}, where)


# Calls whose logged argument (commlog's C10D: the output) is not all they send: the
# positional index and keyword of the tensor they send, which NCCL requires contiguous too
# (ProcessGroupNCCL::alltoall_base checks input and output).
_ALSO_SENT = {"all_to_all_single": (1, "input")}


def _splits_with_numbers(kind, args, kwargs, where) -> None:
    """all_to_all_single's split sizes as torch checks them (c10d's checkSplitSizes: one per
    rank of the group, adding up to the tensor's rows; none: rows divisible by the group's
    size), refused with the numbers, where torch says only "Split sizes doesn't match total
    dim 0 size". What torch accepts passes untouched."""
    if kind != "all_to_all_single":
        return
    group = args[4] if len(args) > 4 else kwargs.get("group")
    try:
        size = dist.get_world_size(group)
    except Exception:  # noqa: BLE001 - not a group: torch's own call says so
        return
    for i, name, what in ((3, "input_split_sizes", "input"), (2, "output_split_sizes", "output")):
        t = args[i - 2] if len(args) > i - 2 else kwargs.get(what)
        splits = args[i] if len(args) > i else kwargs.get(name)
        if not asked.is_tensor(t) or asked.dim(t) == 0:
            continue
        rows = asked.shape(t)[0]
        on = (f"the group's {size} ranks" if group is not None else
              f"the world's {size} ranks (no group= given)")
        if splits is None or isinstance(splits, (list, tuple)) and not splits:
            if rows % size:
                raise RuntimeError(
                    f"all_to_all_single without {name} splits the {what}'s {rows} rows "
                    f"equally over {on}, and {size} does not divide {rows} (at {where})")
            continue
        if not isinstance(splits, (list, tuple)) or not all(isinstance(s, int) for s in splits):
            continue                     # torch's own call refuses other types, saying so
        if len(splits) != size or sum(splits) != rows:
            raise RuntimeError(
                f"all_to_all_single's {name} {list(splits)} (at {where}) must give one size "
                f"per rank of {on} and add up to the {what}'s {rows} rows (dim 0); they are "
                f"{len(splits)} sizes adding up to {sum(splits)}")


# NCCL rule 'contiguity' (DESIGN.md)
def _refuse_non_contiguous(kind, position, keyword, args, kwargs, where) -> None:
    arg = args[position] if position is not None and len(args) > position else \
        kwargs.get(keyword) if keyword else None
    for t in arg if isinstance(arg, (list, tuple)) else [arg]:
        if asked.is_tensor(t) and asked.numel(t) > 1 and not _dense_as_nccl_wants(t):
            dtype = str(asked.dtype(t)).replace('torch.', '')
            raise NCCLRuleError(
                f"{kind} was given a non-contiguous {list(asked.shape(t))} "
                f"{dtype} tensor (at {where}): {CONTIGUITY} (NCCL "
                f"refuses a non-contiguous tensor, which gloo takes; communicate x.contiguous())")


def _dense_as_nccl_wants(t: torch.Tensor) -> bool:
    """ProcessGroupNCCL's test: contiguous in the tensor's suggested memory format, so a
    channels_last 4-D tensor (a convolution's weight or gradient) is accepted too. Asked of
    torch (runtime/asked), not of the object: a subclass's is_contiguous() may say True."""
    if asked.is_contiguous(t):
        return True
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(asked.dim(t))
    return fmt is not None and asked.is_contiguous(t, memory_format=fmt)


# NCCL rule 'any-source receive' (DESIGN.md)
def _refuse_any_source(kind, args, kwargs, where) -> None:
    pos = _SRC_AT.get(kind)
    if pos is None:
        return
    given = "src" in kwargs or "group_src" in kwargs or len(args) > pos
    src = kwargs.get("src", kwargs.get("group_src", args[pos] if len(args) > pos else None))
    if not given or src is None:
        raise NCCLRuleError(
            f"{kind} without a source (at {where}): {RULE} (NCCL has no receive from any "
            f"source, which gloo has: name the rank the tensor comes from, src=...)")


# NCCL rule 'bitwise reductions' (DESIGN.md)
def _refuse_bitwise(kind, args, kwargs, where) -> None:
    pos = _OP_AT.get(kind)
    op = (args[pos] if len(args) > pos else kwargs.get("op")) if pos is not None else None
    if op is not None and op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
        raise NCCLRuleError(f"{kind} with {op} (at {where}): {RULE} (NCCL has no bitwise "
                            f"reductions, which gloo has)")


def tag_of(kind, args, kwargs) -> int:
    """The tag a send or receive was given (0 where none): logged, since NCCL ignores it."""
    pos = _TAG_AT.get(kind)
    if pos is None:
        return 0
    tag = args[pos] if len(args) > pos else kwargs.get("tag", 0)
    return tag if isinstance(tag, int) else 0


# NCCL rule 'tags' (DESIGN.md)
def _without_tag(kind, args, kwargs):
    pos = _TAG_AT.get(kind)
    if pos is None:
        return args, kwargs
    if len(args) > pos:
        args = (*args[:pos], 0, *args[pos + 1:])
    if kwargs.get("tag"):
        kwargs = {**kwargs, "tag": 0}
    return args, kwargs


# NCCL rule 'ReduceOp.AVG' (DESIGN.md)
def _average_by_sum(kind, args, kwargs):
    """ReduceOp.AVG on gloo, which lacks it: (args, kwargs) asking for SUM, and the function
    that divides the result by the group's size once it is there; None if not AVG."""
    pos = _OP_AT.get(kind)
    if pos is None:
        return None
    op = args[pos] if len(args) > pos else kwargs.get("op")
    if op is None or op != dist.ReduceOp.AVG:
        return None
    group = kwargs.get("group", args[pos + 1] if len(args) > pos + 1 else None)
    size = dist.get_world_size(group)
    if len(args) > pos:
        args = (*args[:pos], dist.ReduceOp.SUM, *args[pos + 1:])
    else:
        kwargs = {**kwargs, "op": dist.ReduceOp.SUM}
    out = args[0] if args else kwargs.get("tensor", kwargs.get("output", kwargs.get("tensors")))
    outs = out if isinstance(out, (list, tuple)) else [out]

    def divide():
        for t in outs:
            if isinstance(t, torch.Tensor):
                exact = t.is_floating_point() or t.is_complex()
                t.copy_(t / size if exact else torch.div(t, size, rounding_mode="trunc"))
    return args, kwargs, divide


class Done:
    """The work of an operation done at once (NCCL's own way, on CPU)."""

    def wait(self, *a, **k):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        future = torch.futures.Future()
        future.set_result(None)
        return future


# NCCL rule 'uneven all_gather' (DESIGN.md)
def _uneven_all_gather(kind, args, kwargs):
    """An all_gather whose outputs differ in size: NCCL gathers them with one broadcast per
    rank (ProcessGroupNCCL::allgather); gloo refuses. The same broadcasts, on CPU."""
    if kind != "all_gather":
        return None
    outs = args[0] if args else kwargs.get("tensor_list")
    mine = args[1] if len(args) > 1 else kwargs.get("tensor")
    if not (isinstance(outs, (list, tuple)) and outs and isinstance(mine, torch.Tensor)):
        return None
    if len({tuple(t.shape) for t in outs if isinstance(t, torch.Tensor)}) <= 1:
        return None
    group = args[2] if len(args) > 2 else kwargs.get("group")
    async_op = args[3] if len(args) > 3 else kwargs.get("async_op", False)

    def gather():
        me = dist.get_rank(group)
        for i, out in enumerate(outs):
            if i == me:
                out.copy_(mine.reshape(out.shape))
            dist.broadcast(out, dist.get_global_rank(group, i) if group is not None else i,
                           group=group)
        return Done() if async_op else None
    return gather


# NCCL rule 'uneven all_to_all' (DESIGN.md)
def _uneven_all_to_all(kind, args, kwargs):
    """An all_to_all (lists) whose tensors differ in size: NCCL sends each with its own size
    (ProcessGroupNCCL::alltoall); gloo refuses. One all_to_all_single of the flattened
    tensors instead, its splits their sizes, on CPU."""
    if kind != "all_to_all":
        return None
    outs = args[0] if args else kwargs.get("output_tensor_list")
    ins = args[1] if len(args) > 1 else kwargs.get("input_tensor_list")
    lists = (outs, ins)
    if not all(isinstance(x, (list, tuple)) and x and
               all(isinstance(t, torch.Tensor) for t in x) for x in lists):
        return None
    if len({tuple(t.shape) for t in [*outs, *ins]}) <= 1:
        return None
    group = args[2] if len(args) > 2 else kwargs.get("group")
    async_op = args[3] if len(args) > 3 else kwargs.get("async_op", False)

    def exchange():
        flat = torch.cat([t.reshape(-1) for t in ins])
        got = flat.new_empty(sum(t.numel() for t in outs))
        dist.all_to_all_single(got, flat, [t.numel() for t in outs], [t.numel() for t in ins],
                               group=group)
        for out, part in zip(outs, got.split([t.numel() for t in outs])):
            out.copy_(part.view(out.shape))
        return Done() if async_op else None
    return exchange


# NCCL rule 'send to itself' (DESIGN.md)
def self_ops(p2p_op_list):
    """(the operations of a batch that go to other ranks, the rank's sends to itself paired
    with its receives from itself): NCCL delivers a send to itself within a batch, gloo has
    no connection to itself."""
    me = dist.get_rank()
    mine = [op for op in p2p_op_list if _peer_of(op) == me]
    if not mine:
        return list(p2p_op_list), []
    sends = [op for op in mine if getattr(op.op, "__name__", "") == "isend"]
    recvs = [op for op in mine if getattr(op.op, "__name__", "") == "irecv"]
    if len(sends) != len(recvs):
        raise NCCLRuleError(f"batch_isend_irecv with {len(sends)} send(s) to this rank itself "
                            f"and {len(recvs)} receive(s) from it: {RULE} (a rank's send to "
                            f"itself needs its receive in the same batch)")
    return [op for op in p2p_op_list if op not in mine], list(zip(sends, recvs))


def _peer_of(op) -> int | None:
    peer = getattr(op, "peer", None)
    if peer is None and getattr(op, "group_peer", None) is not None:
        peer = dist.get_global_rank(op.group, op.group_peer) if op.group is not None \
            else op.group_peer
    return peer


# NCCL rule 'one handle for a batch' (DESIGN.md)
class OneHandle(list):
    """What batch_isend_irecv returns under NCCL's rules: a list of ONE handle for the whole
    batch. An index past it (works[1], the send's or the receive's handle as gloo would give
    them) raises an IndexError that says so, and where the batch was posted (the index's own
    line is in the traceback)."""

    def __init__(self, works, where: str):
        super().__init__(works)
        self.where = where

    def __getitem__(self, i):
        try:
            return super().__getitem__(i)
        except IndexError:
            raise IndexError(
                f"batch_isend_irecv returned ONE handle for the whole batch (a list of length "
                f"{len(self)}: NCCL's rule, which the checker follows on CPU; posted at "
                f"{self.where}), and index {i} is past it") from None


class Coalesced:
    """NCCL's one handle for a batch of point-to-point operations (gloo returns one each)."""

    def __init__(self, works):
        self._works = list(works)

    def wait(self, *a, **k):
        for w in self._works:
            w.wait(*a, **k)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def get_future(self):
        futures = [w.get_future() for w in self._works]
        return torch.futures.collect_all(futures)


# NCCL rule 'first transfer' (DESIGN.md)
def warm_up_ring(group, device) -> None:
    """One transfer each way with both ring neighbours, batched and not: NCCL connects a pair
    at its first transfer, blocking the host until the peer takes part; after this, posting
    does not block. The caller keeps these transfers out of its log (the checker's ctx does,
    with commlog.unlogged): this module is below commlog, whose wrappers call it."""
    n = dist.get_world_size(group)
    if n == 1:
        return
    me = dist.get_rank(group)
    peers = sorted({dist.get_global_rank(group, (me + s) % n) for s in (1, -1)})
    bufs = {p: (torch.zeros(1, device=device), torch.empty(1, device=device)) for p in peers}
    ops = [op for p, (out, into) in bufs.items()
           for op in (dist.P2POp(dist.isend, out, p, group),
                      dist.P2POp(dist.irecv, into, p, group))]
    for w in dist.batch_isend_irecv(ops):      # one batch with both: no ring of waits
        w.wait()
    for p, (out, into) in bufs.items():        # by the lower rank first: no cycle
        if dist.get_rank() < p:
            works = [dist.isend(out, p, group=group), dist.irecv(into, p, group=group)]
        else:
            works = [dist.irecv(into, p, group=group), dist.isend(out, p, group=group)]
        for w in works:
            w.wait()
