"""Record the communication done by the code under test.

`install()` wraps the torch.distributed functions (in both `torch.distributed`
and `distributed_c10d`, before the code under test is imported) so that each
call logs an event: kind, bytes this rank sends or receives, the phase the
checker is in, and the caller's line in the exercise code. While a call is in
progress the `status` callback is told, so the checker's watchdog can say
which rank waited in which call. Buffers filled by recv/irecv are tracked
until freed: that is how a check measures how many shards a rank holds.
A check that sets `STATE.trace = []` also gets the order of calls and of
wait()s on their handles (and may add its own markers, e.g. compute), which
shows whether compute happened while a transfer was in flight. An event's
`completed` says whether its handle was waited (or reported done by
is_completed()), and `STATE.sent_to` / `recv_from` count the sends and receives
posted to and from each peer: the watchdog names a transfer whose peer never
posted its half.

`STATE.nccl_rules` (set by a checker rank on CPU) makes gloo behave as NCCL where the two
differ in what decides a grade: batch_isend_irecv returns ONE coalesced handle, a
non-contiguous tensor given to a call is refused (NCCLRuleError), and ReduceOp.AVG works
(a sum, then a division: gloo has no AVG). So a grade computed on CPU is the grade a GPU
run gives.
"""
from __future__ import annotations

import functools
import sys
import threading
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# Every communicating function of torch.distributed a student can call, by name: the
# operation it performs (its family: what a CommRule's kind matches besides the name) and
# the positional index and keyword of what this rank contributes (its bytes; None: unknown,
# e.g. pickled objects). tests/test_commlog.py fails when torch gains one missing here.
C10D = {
    "all_reduce": ("all_reduce", 0, "tensor"), "all_reduce_coalesced": ("all_reduce", 0, "tensors"),
    "broadcast": ("broadcast", 0, "tensor"), "_broadcast_coalesced": ("broadcast", 1, None),
    "broadcast_object_list": ("broadcast", None, None), "reduce": ("reduce", 0, "tensor"),
    "all_gather": ("all_gather", 1, "tensor"),
    "all_gather_into_tensor": ("all_gather", 1, "input_tensor"),
    "all_gather_single": ("all_gather", 1, "input_tensor"),
    "_all_gather_base": ("all_gather", 1, "input_tensor"),
    "all_gather_coalesced": ("all_gather", 1, "input_tensor_list"),
    "all_gather_object": ("all_gather", None, None),
    "reduce_scatter": ("reduce_scatter", 1, "input_list"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    "reduce_scatter_single": ("reduce_scatter", 1, "input"),
    "_reduce_scatter_base": ("reduce_scatter", 1, "input"),
    "gather": ("gather", 0, "tensor"), "gather_object": ("gather", None, None),
    "gather_single": ("gather", 0, "tensor"),                   # torch 2.14
    "gather_into_tensor": ("gather", 0, "tensor"),              # torch 2.14
    "scatter": ("scatter", 0, "tensor"), "scatter_object_list": ("scatter", None, None),
    "all_to_all": ("all_to_all", 1, "input_tensor_list"),
    "all_to_all_single": ("all_to_all", 0, "output"),
    "barrier": ("barrier", None, None), "monitored_barrier": ("barrier", None, None),
    "send": ("send", 0, "tensor"), "isend": ("isend", 0, "tensor"),
    "recv": ("recv", 0, "tensor"), "irecv": ("irecv", 0, "tensor"),
    "send_object_list": ("send", None, None), "recv_object_list": ("recv", None, None),
}
# Functional collectives (torch.distributed._functional_collectives; DTensor and DeviceMesh
# code uses them too), recorded as "funcol.<name>".
FUNCOL = {
    "all_reduce": ("all_reduce", 0), "all_reduce_inplace": ("all_reduce", 0),
    "all_reduce_coalesced": ("all_reduce", 0),
    "all_gather_tensor": ("all_gather", 0), "all_gather_tensor_autograd": ("all_gather", 0),
    "all_gather_single": ("all_gather", 0), "all_gather_single_autograd": ("all_gather", 0),
    "all_gather_single_coalesced": ("all_gather", 0),
    "all_gather_into_tensor_coalesced": ("all_gather", 0),
    "all_gather_inplace": ("all_gather", 1), "all_gather_tensor_inplace": ("all_gather", 1),
    "reduce_scatter_tensor": ("reduce_scatter", 0), "reduce_scatter_tensor_autograd": ("reduce_scatter", 0),
    "reduce_scatter_single": ("reduce_scatter", 0), "reduce_scatter_single_autograd": ("reduce_scatter", 0),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 0),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 0),
    "reduce_scatter_tensor_inplace": ("reduce_scatter", 1),
    "reduce_scatter_inplace": ("reduce_scatter", 1),            # torch 2.14
    "legacy_reduce_scatter": ("reduce_scatter", 1),             # torch 2.14
    "all_to_all_single": ("all_to_all", 0), "all_to_all_single_autograd": ("all_to_all", 0),
    "all_to_all_inplace": ("all_to_all", 1), "broadcast": ("broadcast", 0),
    "permute_tensor": ("permute", 0), "isend_inplace": ("isend", 0), "irecv_inplace": ("irecv", 0),
    "legacy_allreduce": ("all_reduce", 0), "legacy_allgather": ("all_gather", 1),
    "legacy_all_gather": ("all_gather", 1), "legacy_allgather_single": ("all_gather", 1),
    "legacy_all_gather_base": ("all_gather", 1), "legacy_reducescatter": ("reduce_scatter", 1),
    "legacy_reducescatter_single": ("reduce_scatter", 1),
    "legacy_reduce_scatter_base": ("reduce_scatter", 1),
    "legacy_all_to_all_single": ("all_to_all", 1), "legacy_isend": ("isend", 0),
    "legacy_irecv": ("irecv", 0),
}
# Names of a newer torch than some clusters have (2.13: *_single; 2.14: the rest): install()
# wraps what this torch has.
NEWER_TORCH = {"all_gather_single", "reduce_scatter_single", "gather_single",
               "gather_into_tensor", "reduce_scatter_inplace", "legacy_reduce_scatter",
               # functional collectives torch 2.6 lacks
               "all_gather_single_autograd", "all_gather_single_coalesced", "irecv_inplace",
               "isend_inplace", "legacy_allgather_single", "legacy_irecv", "legacy_isend",
               "legacy_reducescatter_single", "reduce_scatter_single_autograd",
               "reduce_scatter_single_coalesced"}
# Communicating names recorded through the calls they make, with why.
INDIRECT = {"batch_isend_irecv": "each of its isend / irecv is recorded"}
P2P = ("send", "recv", "isend", "irecv")
RECEIVES = ("recv", "irecv")


@dataclass
class Event:
    kind: str    # the function called: "all_gather_single", "funcol.all_reduce"
    phase: str
    nbytes: int
    peer: int | None
    where: str   # "file.py:LINE in function" of the code under test
    family: str = ""  # the operation: "all_gather", "all_reduce", "isend" ...
    completed: bool = True  # False until the handle of an async call is waited (or done)


@dataclass
class _State:
    phase: str = "setup"
    events: list = field(default_factory=list)
    code_dirs: tuple = ()  # files (or directories) of the code under test: path prefixes
    on_status=None  # callable(text or None), set by the checker worker
    live_recv: int = 0
    peak_recv: dict = field(default_factory=dict)  # phase -> peak live received bytes
    trace: list | None = None  # a check sets a list: (kind, event index) of calls and waits, in order
    sent_to: dict = field(default_factory=dict)  # global peer -> sends posted to it (this check)
    recv_from: dict = field(default_factory=dict)  # global peer -> receives posted from it
    unwaited_to: dict = field(default_factory=dict)  # global peer -> async sends not yet completed
    local: threading.local = field(default_factory=threading.local)
    guard = None  # callable(kind, args, kwargs) that may refuse a call before it is made
    nccl_rules: bool = False  # gloo behaves as NCCL where a grade depends on it (see top)


STATE = _State()
_ORIGINAL: dict = {}
RULE = "rule 'Device'"   # what the stubs call the GPU run's rules; exception_causes' hint

# Calls that take a reduce op: its positional index (keyword "op").
_OP_AT = {"all_reduce": 1, "all_reduce_coalesced": 1, "reduce": 2, "reduce_scatter": 2,
          "reduce_scatter_tensor": 2, "reduce_scatter_single": 2, "_reduce_scatter_base": 2}


class NCCLRuleError(RuntimeError):
    """What NCCL would refuse on a GPU run, refused on CPU too."""


def _refuse_non_contiguous(kind, position, keyword, args, kwargs, where) -> None:
    arg = args[position] if position is not None and len(args) > position else \
        kwargs.get(keyword) if keyword else None
    if isinstance(arg, torch.Tensor) and arg.numel() > 1 and not arg.is_contiguous():
        raise NCCLRuleError(
            f"{kind} was given a non-contiguous {list(arg.shape)} "
            f"{str(arg.dtype).replace('torch.', '')} tensor (at {where}): {RULE} (NCCL refuses "
            f"a non-contiguous tensor, which gloo takes; communicate x.contiguous())")


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
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.div_(size)
    return args, kwargs, divide


class _Coalesced:
    """NCCL's one handle for a batch of point-to-point operations (gloo returns one each)."""

    def __init__(self, works):
        self._works = list(works)

    def wait(self, *a, **k):
        for w in self._works:
            w.wait(*a, **k)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)


def _nbytes(position, keyword, args, kwargs) -> int:
    """Bytes of what this rank contributes: the argument at `position` (or `keyword`)."""
    def size(t):
        return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
    if position is None:
        return 0
    arg = args[position] if len(args) > position else kwargs.get(keyword) if keyword else None
    if isinstance(arg, (list, tuple)):
        return sum(size(t) for t in arg)
    return size(arg)


def _peer(family, args, kwargs):
    """The GLOBAL rank a p2p call talks to, however it was named (dst/src, or group_dst/
    group_src of its group, as batch_isend_irecv passes them)."""
    if family not in P2P:
        return None
    for key in ("group_dst", "group_src"):
        if kwargs.get(key) is not None:
            group = kwargs.get("group") or (args[2] if len(args) > 2 else None)
            try:
                return c10d.get_global_rank(group or c10d._get_default_group(), kwargs[key])
            except Exception:  # noqa: BLE001 - a bad rank: torch's own call reports it
                return None
    for key in ("dst", "src"):
        if kwargs.get(key) is not None:
            return kwargs[key]
    return args[1] if len(args) > 1 else None


def _frame(f) -> str:
    return f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno} in {f.f_code.co_name}"


def caller() -> str:
    """Innermost frame in the code under test (else the innermost outside torch); when that is
    a helper in another of the student's files (rotation.py called by flyweight.py, comm.py by
    tensor_parallel.py), also the nearest call site in a file of their own outside it."""
    f = sys._getframe(2)
    fallback = inner = None
    while f is not None:
        fn = f.f_code.co_filename
        if any(fn.startswith(d) for d in STATE.code_dirs):
            if inner is None:
                inner = f
            elif fn != inner.f_code.co_filename:
                return f"{_frame(inner)}, called from {_frame(f)}"
        elif inner is None and fallback is None and "/torch/" not in fn and not fn.endswith("commlog.py"):
            fallback = _frame(f)
        f = f.f_back
    return _frame(inner) if inner is not None else fallback or "?"


def _track_recv(t: torch.Tensor) -> None:
    n = t.numel() * t.element_size()
    STATE.live_recv += n
    STATE.peak_recv[STATE.phase] = max(STATE.peak_recv.get(STATE.phase, 0), STATE.live_recv)

    def freed(n=n):
        STATE.live_recv -= n
    weakref.finalize(t, freed)


class _Work:
    """Wraps an async handle: a wait() that blocks forever is reported with its peer, and the
    events it covers (one call, or all of a coalesced batch) are marked completed."""

    def __init__(self, work, kind, where, indices=(), after=None):
        self._work, self._kind, self._where, self._indices = work, kind, where, list(indices)
        self._events = STATE.events   # the check's list: a handle kept into the next check
        self._after = after           # what finishes the result once it is there (AVG's division)
        self._waited = False          # a wait() returned: a second one is named as such

    def _mark_completed(self):
        if self._events is STATE.events:
            for i in self._indices:
                _completed(STATE.events[i])

    def wait(self, *a, **k):
        if STATE.trace is not None:
            STATE.trace.extend(("wait", i) for i in self._indices)
        p2p = [self._events[i] for i in self._indices if self._events[i].family in P2P]
        receives = [e for e in p2p if e.family in RECEIVES]
        one = receives if receives else p2p          # the receive of a batch says most
        again = " again" if self._waited else ""
        _status(f"wait(){again} on {self._kind} from {self._where}",
                family=one[0].family if len(one) == 1 else self._kind,
                peer=one[0].peer if len(one) == 1 else None)
        try:
            out = self._work.wait(*a, **k)
            self._waited = True
            self._mark_completed()
            if self._after is not None:
                self._after, after = None, self._after
                after()
        finally:
            _status(None)
        return out

    def is_completed(self):
        done = self._work.is_completed()
        if done:
            self._mark_completed()
        return done

    def get_future(self):
        """A work turned into a future counts as waited: its waits (fut.wait(),
        torch.futures.wait_all) happen in C++, where no log can see them."""
        self._mark_completed()
        return self._work.get_future()

    def __getattr__(self, name):
        return getattr(self._work, name)


def _pending(e: Event) -> None:
    """`e` was started asynchronously: not completed until its handle says so."""
    if e.completed:
        e.completed = False
        if e.family == "isend":
            STATE.unwaited_to[e.peer] = STATE.unwaited_to.get(e.peer, 0) + 1


def _completed(e: Event) -> None:
    if not e.completed:
        e.completed = True
        if e.family == "isend":
            STATE.unwaited_to[e.peer] -= 1


def _status(text, **extra):
    if STATE.on_status is not None:
        STATE.on_status(text, **extra)


def _wrap(kind, family, position, keyword, fn, handles=True):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(STATE.local, "depth", 0)
        if depth:  # a call made by torch itself inside another logged call
            return fn(*args, **kwargs)
        if STATE.guard is not None:
            STATE.guard(kind, args, kwargs)
        where = caller()
        averaged = None
        if STATE.nccl_rules:
            _refuse_non_contiguous(kind, position, keyword, args, kwargs, where)
            averaged = _average_by_sum(kind, args, kwargs)
            if averaged is not None:
                args, kwargs, _ = averaged
        peer = _peer(family, args, kwargs)
        STATE.events.append(Event(kind, STATE.phase, _nbytes(position, keyword, args, kwargs),
                                  peer, where, family))
        index = len(STATE.events) - 1
        if family in P2P:
            posted = STATE.recv_from if family in RECEIVES else STATE.sent_to
            posted[peer] = posted.get(peer, 0) + 1
        if STATE.trace is not None:
            STATE.trace.append((family, index))
        if family in RECEIVES and args and isinstance(args[0], torch.Tensor):
            _track_recv(args[0])
        STATE.local.depth = 1
        _status(f"{kind} called from {where}", family=family, peer=peer)
        try:
            out = fn(*args, **kwargs)
        finally:
            STATE.local.depth = 0
            _status(None)
        after = averaged[2] if averaged is not None else None
        if handles and out is not None and (family in ("isend", "irecv") or kwargs.get("async_op")):
            _pending(STATE.events[index])
            return _Work(out, kind, where, [index], after)
        if after is not None:
            after()
        return out
    wrapper.__rtp_wrapped__ = True
    return wrapper


def _wrap_batch(fn):
    """batch_isend_irecv logs through the isend/irecv it calls; a coalesced handle it returns
    (NCCL) instead of theirs covers all of them."""
    @functools.wraps(fn)
    def wrapper(p2p_op_list, *args, **kwargs):
        start = len(STATE.events)
        works = fn(p2p_op_list, *args, **kwargs)
        if not works or getattr(STATE.local, "depth", 0):
            return works
        indices = range(start, len(STATE.events))
        for i in indices:
            _pending(STATE.events[i])
        where = STATE.events[start].where if len(STATE.events) > start else caller()
        if STATE.nccl_rules:
            return [_Work(_Coalesced(works), "batch_isend_irecv", where, indices)]
        return [w if isinstance(w, _Work) else _Work(w, "batch_isend_irecv", where, indices)
                for w in works]
    wrapper.__rtp_wrapped__ = True
    return wrapper


def _wrap_library(cls):
    """Log the construction of a torch wrapper that communicates in C++ (its reducer, out of
    this log's sight) as one call of family "library", for the rules that refuse it."""
    init = cls.__init__

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        if getattr(STATE.local, "depth", 0):
            return init(self, *args, **kwargs)
        STATE.events.append(Event(cls.__name__, STATE.phase, 0, None, caller(), "library"))
        STATE.local.depth = 1          # its own Python-level calls are part of it
        try:
            return init(self, *args, **kwargs)
        finally:
            STATE.local.depth = 0
    wrapper.__rtp_wrapped__ = True
    _ORIGINAL[f"{cls.__name__}.__init__"] = init
    cls.__init__ = wrapper


def install(code_dirs=()) -> None:
    """Wrap the torch.distributed API once per process."""
    STATE.code_dirs = tuple(str(d) for d in code_dirs)
    if _ORIGINAL:
        return
    from torch.nn.parallel import DistributedDataParallel
    _wrap_library(DistributedDataParallel)
    for name, (family, position, keyword) in C10D.items():
        fn = getattr(c10d, name, None) or getattr(dist, name, None)
        if fn is None:
            continue
        _ORIGINAL[name] = fn
        w = _wrap(name, family, position, keyword, fn)
        setattr(c10d, name, w)  # P2POp compares `op is isend` against this module's name
        setattr(dist, name, w)
    _ORIGINAL["batch_isend_irecv"] = c10d.batch_isend_irecv
    c10d.batch_isend_irecv = dist.batch_isend_irecv = _wrap_batch(c10d.batch_isend_irecv)
    import torch.distributed._functional_collectives as funcol
    for name, (family, position) in FUNCOL.items():
        fn = getattr(funcol, name, None)
        if fn is not None:
            _ORIGINAL[f"funcol.{name}"] = fn
            # their results are tensors (AsyncCollectiveTensor): never wrapped in a handle
            setattr(funcol, name, _wrap(f"funcol.{name}", family, position, None, fn,
                                        handles=name.endswith(("isend_inplace", "irecv_inplace"))))


def reset(phase: str = "setup") -> None:
    STATE.phase = phase
    STATE.events = []
    STATE.peak_recv = {}
    STATE.sent_to = {}
    STATE.recv_from = {}
    STATE.unwaited_to = {}
    STATE.trace = None


def set_phase(phase: str) -> None:
    STATE.phase = phase
    STATE.peak_recv.setdefault(phase, STATE.live_recv)


def events() -> list[Event]:
    return list(STATE.events)
