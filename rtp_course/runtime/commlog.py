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
shows whether compute happened while a transfer was in flight.
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

WRAPPED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single",
           "barrier", "send", "recv", "isend", "irecv", "all_gather_object", "broadcast_object_list")
RECEIVES = ("recv", "irecv")


@dataclass
class Event:
    kind: str
    phase: str
    nbytes: int
    peer: int | None
    where: str  # "file.py:LINE in function" of the code under test


@dataclass
class _State:
    phase: str = "setup"
    events: list = field(default_factory=list)
    code_dirs: tuple = ()
    on_status=None  # callable(text or None), set by the checker worker
    live_recv: int = 0
    peak_recv: dict = field(default_factory=dict)  # phase -> peak live received bytes
    trace: list | None = None  # a check sets a list: (kind, event index) of calls and waits, in order
    local: threading.local = field(default_factory=threading.local)


STATE = _State()
_ORIGINAL: dict = {}


def _nbytes(kind, args, kwargs) -> int:
    def size(t):
        return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
    if not args:
        return 0
    first = args[0]
    if kind == "all_gather":        # (tensor_list, tensor): this rank contributes `tensor`
        return size(args[1] if len(args) > 1 else kwargs.get("tensor"))
    if kind == "all_gather_into_tensor":
        return size(args[1] if len(args) > 1 else kwargs.get("input_tensor"))
    if kind in ("reduce_scatter", "all_to_all"):
        lst = args[1] if len(args) > 1 else kwargs.get("input_list", [])
        return sum(size(t) for t in lst)
    if kind == "reduce_scatter_tensor":
        return size(args[1] if len(args) > 1 else kwargs.get("input"))
    if isinstance(first, (list, tuple)):
        return sum(size(t) for t in first)
    return size(first)


def _peer(kind, args, kwargs):
    if kind in ("send", "isend", "recv", "irecv"):
        for key in ("dst", "src", "group_dst", "group_src"):
            if kwargs.get(key) is not None:
                return kwargs[key]
        return args[1] if len(args) > 1 else None
    return None


def caller() -> str:
    """Innermost frame in the code under test (else the innermost outside torch)."""
    f = sys._getframe(2)
    fallback = None
    while f is not None:
        fn = f.f_code.co_filename
        if any(fn.startswith(d) for d in STATE.code_dirs):
            return f"{fn.rsplit('/', 1)[-1]}:{f.f_lineno} in {f.f_code.co_name}"
        if fallback is None and "/torch/" not in fn and not fn.endswith("commlog.py"):
            fallback = f"{fn.rsplit('/', 1)[-1]}:{f.f_lineno} in {f.f_code.co_name}"
        f = f.f_back
    return fallback or "?"


def _track_recv(t: torch.Tensor) -> None:
    n = t.numel() * t.element_size()
    STATE.live_recv += n
    STATE.peak_recv[STATE.phase] = max(STATE.peak_recv.get(STATE.phase, 0), STATE.live_recv)

    def freed(n=n):
        STATE.live_recv -= n
    weakref.finalize(t, freed)


class _Work:
    """Wraps an async handle so a wait() that blocks forever is reported too."""

    def __init__(self, work, kind, where, index=None):
        self._work, self._kind, self._where, self._index = work, kind, where, index

    def wait(self, *a, **k):
        if STATE.trace is not None:
            STATE.trace.append(("wait", self._index))
        _status(f"wait() on {self._kind} from {self._where}")
        try:
            return self._work.wait(*a, **k)
        finally:
            _status(None)

    def __getattr__(self, name):
        return getattr(self._work, name)


def _status(text):
    if STATE.on_status is not None:
        STATE.on_status(text)


def _wrap(kind, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(STATE.local, "depth", 0)
        if depth:  # a call made by torch itself inside another logged call
            return fn(*args, **kwargs)
        where = caller()
        STATE.events.append(Event(kind, STATE.phase, _nbytes(kind, args, kwargs),
                                  _peer(kind, args, kwargs), where))
        index = len(STATE.events) - 1
        if STATE.trace is not None:
            STATE.trace.append((kind, index))
        if kind in RECEIVES and args and isinstance(args[0], torch.Tensor):
            _track_recv(args[0])
        STATE.local.depth = 1
        _status(f"{kind} called from {where}")
        try:
            out = fn(*args, **kwargs)
        finally:
            STATE.local.depth = 0
            _status(None)
        if kind in ("isend", "irecv") and out is not None:
            return _Work(out, kind, where, index)
        if kwargs.get("async_op") and out is not None:
            return _Work(out, kind, where, index)
        return out
    wrapper.__rtp_wrapped__ = True
    return wrapper


def install(code_dirs=()) -> None:
    """Wrap the torch.distributed API once per process."""
    STATE.code_dirs = tuple(str(d) for d in code_dirs)
    if _ORIGINAL:
        return
    for kind in WRAPPED:
        fn = getattr(c10d, kind)
        _ORIGINAL[kind] = fn
        w = _wrap(kind, fn)
        setattr(c10d, kind, w)  # P2POp compares `op is isend` against this module's name
        setattr(dist, kind, w)


def reset(phase: str = "setup") -> None:
    STATE.phase = phase
    STATE.events = []
    STATE.peak_recv = {}
    STATE.trace = None


def set_phase(phase: str) -> None:
    STATE.phase = phase
    STATE.peak_recv.setdefault(phase, STATE.live_recv)


def events() -> list[Event]:
    return list(STATE.events)
