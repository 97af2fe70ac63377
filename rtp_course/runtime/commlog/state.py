"""What commlog keeps for the check a rank is in: its events, its program, its status."""
from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed.distributed_c10d as c10d

from rtp_course.runtime import asked
from rtp_course.runtime.commlog.api import P2P, RECEIVES  # noqa: F401 - part of this module's API


@dataclass
class Event:
    kind: str    # the function called: "all_gather_single", "funcol.all_reduce"
    phase: str
    nbytes: int
    peer: int | None
    where: str   # "file.py:LINE in function" of the code under test
    family: str = ""  # the operation: "all_gather", "all_reduce", "isend" ...
    completed: bool = True  # False until the handle of an async call is waited (or done)
    group: str = "?"        # its process group's name ("?": not known)
    members: tuple = ()     # that group's global ranks
    batch: int | None = None  # the batch_isend_irecv it was posted in
    overwritten: bool = False  # a send buffer written to before its work was waited
    dropped: bool = False   # its handle was let go before it was waited (or seen done)
    given: str = ""         # the tensor this rank contributes, "[12, 8] float32" ("": a list)
    nth: int = 0            # a collective's place among this check's collectives on its group
    tag: int = 0            # the tag a send or receive was given (NCCL ignores it: dropped)
    splits: str = ""        # all_to_all_single's "in [..] out [..]": what its peers must agree on


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
    dropped_to: dict = field(default_factory=dict)   # global peer -> sends whose handle was let go
    dropped_works: list = field(default_factory=list)  # "all_gather at x.py:3 in f (phase p)"
    local: threading.local = field(default_factory=threading.local)
    guard = None  # callable(kind, args, kwargs) that may refuse a call before it is made
    nccl_rules: bool = False  # gloo behaves as NCCL where a grade depends on it (see top)
    program: list = field(default_factory=list)  # ("post", event index) / ("wait", [indices])
    batches: int = 0          # batch_isend_irecv calls so far
    collectives: dict = field(default_factory=dict)  # group name -> collectives called on it


STATE = _State()
_ORIGINAL: dict = {}


def _nbytes(position, keyword, args, kwargs) -> int:
    """Bytes of what this rank contributes: the argument at `position` (or `keyword`), as
    torch has them (runtime/asked: a subclass's own element_size() may lie)."""
    def size(t):
        return asked.nbytes(t) if asked.is_tensor(t) else 0
    if position is None:
        return 0
    arg = args[position] if len(args) > position else kwargs.get(keyword) if keyword else None
    if isinstance(arg, (list, tuple)):
        return sum(size(t) for t in arg)
    return size(arg)


def _given(position, keyword, args, kwargs) -> str:
    """The one tensor this rank contributes, as "[12, 8] float32" ("" for a list or none):
    what tells two ranks' calls apart when they do not match."""
    if position is None:
        return ""
    arg = args[position] if len(args) > position else kwargs.get(keyword) if keyword else None
    if not asked.is_tensor(arg):
        return ""
    return f"{list(asked.shape(arg))} {str(asked.dtype(arg)).removeprefix('torch.')}"


MAX_SPLITS = 64     # a group larger than this: its splits are not kept


def _splits(kind, args, kwargs) -> str:
    """all_to_all_single's split sizes as "in [2, 0] out [1, 1]" (an empty list: equal
    splits), "" for another call or splits that are not lists of ints: rank q's out[p] must
    be rank p's in[q] (checker/communication.splits_disagree)."""
    if kind != "all_to_all_single":
        return ""
    got = []
    for i, name in ((3, "input_split_sizes"), (2, "output_split_sizes")):
        s = args[i] if len(args) > i else kwargs.get(name)
        s = [] if s is None else s
        if not isinstance(s, (list, tuple)) or len(s) > MAX_SPLITS or \
                not all(type(n) is int for n in s):
            return ""
        got.append(list(s))
    return f"in {got[0]} out {got[1]}"


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
    """Count a receive buffer's bytes as held while the buffer object lives: torch's count (a
    buffer's own element_size() may say 0 by now). The object, not its storage: the
    accumulator that comes home may become a gradient (autograd keeps its storage, not the
    object), which is no received block kept. An alias or copy kept instead is what the
    storage-level counts see (memory.kept_bytes: flyweight, ring attention's forward)."""
    n = asked.nbytes(t)
    STATE.live_recv += n
    STATE.peak_recv[STATE.phase] = max(STATE.peak_recv.get(STATE.phase, 0), STATE.live_recv)

    def freed(n=n):
        STATE.live_recv -= n
    weakref.finalize(t, freed)


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
