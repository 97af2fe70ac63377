"""A GPU run's device placement, seen on a machine without a GPU.

On a GPU (NCCL) run, a tensor made without `device=` lives in CPU ("host")
memory while the data it meets is on the GPU: CUDA refuses an op that mixes
them, and NCCL refuses a host tensor. On a CPU run every tensor is on the same
device, so such code would pass every CPU check and fail the first GPU run, or
a grade computed on GPUs. While checks run on CPU, `host_placement()` makes
the tensors that the code under test creates without a device `HostTensor`s
and raises HostTensorError where CUDA or NCCL would refuse them.

Host tensors: made by a factory (torch.empty, zeros, randn, tensor, the
parameters of an nn.Linear built without device= ...) called from the code
under test without a device or with the CPU written as its device, by
Tensor.new_empty / new_zeros ... or torch.empty_like / zeros_like ... given the
CPU so (without device= they follow their input, as on a GPU), by a factory
that takes no device (torch.frombuffer, from_numpy, from_dlpack), or computed
only from host tensors. Not the legacy constructors (torch.Tensor(2, 3),
torch.FloatTensor(n)): torch.Tensor.__new__ cannot be wrapped (torch._dynamo,
imported later, checks its signature). Hostness belongs to the storage: views and nn.Parameter share it, and
`Module.to(device)` gives a parameter a copy, which is not host (the parameter
gets its own class back; the registry, not the class, says what is host).
Allowed, as CUDA allows them: a 0-dim host tensor (a CPU scalar) in any op,
copy_ in either direction, host index tensors, .item() / .tolist(), empty
tensors. Refused: any other op that mixes a host tensor with a non-empty device
tensor, and a host tensor given to a torch.distributed call.

The CPU written as the device: on a CPU run every device the code derives from
its data (x.device, str(x.device), f"{x.device}", x.device.type) is the CPU too,
and on a GPU run the GPU, so a device that is the CPU makes a host tensor only
where the call the code under test makes (its source, all its lines) gives it
the literal 'cpu' / "cpu:0": as device=, as a positional argument (.to("cpu")),
or through a call given so (device=torch.device("cpu")); of a `with` statement,
its context expressions (_cpu_written). Not caught, a missed bug and never a
false rejection: "cpu" bound to a name elsewhere (dev = "cpu" on another line),
one chosen by an expression ("cuda" if ... else "cpu"), a device read from a
host tensor (torch.zeros(n, device=host.device)), an f-string.

A device tensor that the code under test moves to the host (`.cpu()`,
`.to("cpu")`) is a host tensor too, as on a GPU. What CUDA accepts is accepted:
a factory called inside `with torch.device(x.device):` or after
`torch.set_default_device(x.device)` makes a device tensor (one whose context
was entered with the CPU written as its device makes a host tensor, as it would
on a GPU).

Only ops that touch a HostTensor pay for this (its __torch_function__); a
TorchFunctionMode would tax every op of every check (it made the public suite
20% slower). `.cpu()`, `.to()`, `new_*` and `*_like` pay a Python call each.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import functools
import itertools
import linecache
import os
import re
import sys
import weakref

import torch
from torch import nn

from rtp_course.runtime import commlog

try:  # the factories torch itself gives a default device (`with torch.device("cuda"):`)
    from torch.utils._device import _device_constructors
    FACTORIES = tuple(f for f in _device_constructors() if getattr(torch, f.__name__, None) is f)
except ImportError:  # pragma: no cover - older torch
    FACTORIES = tuple(getattr(torch, n) for n in (
        "empty", "empty_strided", "zeros", "ones", "full", "rand", "randn", "randint",
        "randperm", "arange", "linspace", "logspace", "eye", "tensor", "as_tensor",
        "scalar_tensor", "tril_indices", "triu_indices"))

# Factories that take no device: their tensors are on the host wherever they run.
HOST_ONLY = tuple(f for f in (getattr(torch, n, None) for n in (
    "frombuffer", "from_numpy", "from_file", "from_dlpack")) if f is not None)

# Factories that take their device from a tensor unless given device= (watched: _placed).
PLACED = tuple((holder, n) for holder, names in (
    (torch.Tensor, ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
                    "new_empty_strided")),
    (torch, ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
             "randint_like"))) for n in names if hasattr(holder, n))
_PLACED_FUNCS = frozenset(getattr(getattr(h, n), "__rtp_original__", getattr(h, n))
                          for h, n in PLACED)

RULE = "rule 'Device'"   # each stub's Rules state it; exception_causes gives the fix as the hint

# CUDA takes these with host tensors in them; what they return lives where `self` does.
_MIXING_ALLOWED = frozenset({torch.Tensor.copy_, torch.Tensor.__setitem__, torch.Tensor.__getitem__,
                             torch.Tensor.index_put_, torch.Tensor.index_put})
_MOVES = frozenset({torch.Tensor.to, torch.Tensor.type_as, torch.Tensor.cpu})
_TENSOR_CPU = torch.Tensor.cpu   # torch's own (host_placement watches torch.Tensor.cpu)


class HostTensorError(RuntimeError):
    """What CUDA or NCCL would have refused on a GPU run."""


_HOST: dict[int, str] = {}   # id(storage) -> where it was made; removed when the storage dies


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage()
    except Exception:  # noqa: BLE001 - wrapper subclasses (funcol's AsyncCollectiveTensor) have none
        return None


def made_at(t) -> str | None:
    """Where host tensor `t` was made, or None if `t` is not a host tensor."""
    if not isinstance(t, HostTensor) or not _HOST:
        return None
    s = _storage(t)
    return _HOST.get(id(s)) if s is not None else None


def _host(t: torch.Tensor, where: str) -> torch.Tensor:
    """`t` as a host tensor (same storage, same autograd history)."""
    s = _storage(t)
    if s is not None and id(s) not in _HOST:
        _HOST[id(s)] = where
        weakref.finalize(s, _HOST.pop, id(s), None)
    if isinstance(t, HostTensor):
        return t
    if t.is_leaf:
        return torch.Tensor._make_subclass(HostTensor, t, t.requires_grad)
    return t.as_subclass(HostTensor)


def _unhost(t: torch.Tensor) -> None:
    """`t` was moved off the host in place (its .data swapped): its own class again, so that
    nothing (deepcopy, an optimizer's type checks) sees a HostTensor that is not one."""
    if isinstance(t, HostTensor):
        t.__class__ = nn.Parameter if getattr(t, "_is_param", False) else torch.Tensor


def _hosted(out, where: str):
    if isinstance(out, torch.Tensor):
        return _host(out, where)
    if isinstance(out, (list, tuple)) and out and all(isinstance(t, torch.Tensor) for t in out):
        return type(out)(_host(t, where) for t in out)
    return out


def _tensors_in(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            if isinstance(y, torch.Tensor):
                yield y


def _describe(t: torch.Tensor) -> str:
    return f"a {list(t.shape)} {str(t.dtype).replace('torch.', '')} tensor"


def _name(func) -> str:
    name = getattr(func, "__name__", str(func))
    method = getattr(func, "__qualname__", "").startswith(("Tensor.", "TensorBase."))
    return f"Tensor.{name}" if method else f"torch.{name}"


def _is_cpu(device) -> bool:
    """`device` is the CPU ("cpu", "cpu:0", torch.device("cpu")): on a CPU run also x.device."""
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def _host_device(device) -> bool:
    """Whether `device` (a factory's device=, what .to() moves to, a device context's) puts
    a tensor in host memory on a GPU run: the CPU, written as a literal in the call the code
    under test is making (_cpu_written). A device that the code derives from its data
    (x.device, str(x.device), x.device.type) is "cpu" on this run and the GPU on a GPU run:
    the rank's device. Outside the code under test, a device string "cpu" is the host."""
    if not _is_cpu(device):
        return False
    frame = _code_frame()
    if frame is None:
        return isinstance(device, str)
    return _cpu_written(frame.f_code.co_filename, frame.f_code, frame.f_lasti)


def _code_frame():
    """The innermost frame of the code under test (not torch's, not this module's)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(_CODE_DIRS) and not name.startswith(_TORCH_DIR) and name != _HERE:
            return f
        f = f.f_back
    return None


_HERE = _is_cpu.__code__.co_filename
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_CPU = re.compile(r"cpu(:\d+)?")


@functools.lru_cache(maxsize=4096)
def _cpu_written(filename: str, code, lasti: int) -> bool:
    """Whether the call that `code` (of `filename`) is making at `lasti` (its source, from the instruction's
    positions: all its lines) gives a device the literal "cpu" ('cpu', "cpu:0"): as device=,
    as a positional argument (x.to("cpu"), torch.device("cpu"), set_default_device("cpu")),
    or inside a call given so (device=torch.device("cpu")); of a `with` statement, its
    context expressions. Not a literal chosen by an expression ("cuda" if ... else "cpu",
    dev or "cpu"), nor one bound to a name elsewhere: a missed bug, never a false rejection."""
    pos = next(itertools.islice(code.co_positions(), lasti // 2, None), None)
    if pos is None or pos[0] is None:
        return False
    start, end, col, end_col = pos
    linecache.checkcache(filename)
    lines = [line.encode() for line in linecache.getlines(filename)[start - 1:(end or start)]]
    if not lines:
        return False
    if col is not None and end_col is not None:    # byte offsets; the last line's end first
        lines[-1] = lines[-1][:end_col]
        lines[0] = lines[0][col:]
    try:
        stmt = ast.parse(b"".join(lines).decode().strip()).body[0]
    except (SyntaxError, ValueError, IndexError):
        return False
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        roots = [item.context_expr for item in stmt.items]
    else:
        roots = [stmt.value] if isinstance(stmt, ast.Expr) else []
    return any(_gives_cpu(root) for root in roots)


def _gives_cpu(node) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and _CPU.fullmatch(node.value) is not None
    if isinstance(node, ast.Call):
        return any(_gives_cpu(a) for a in node.args) or \
            any(_gives_cpu(k.value) for k in node.keywords if k.arg == "device")
    return False


def _move_target(func, args, kwargs):
    """Tensor.to / type_as / cpu: the device (or tensor) moved to; None for a dtype change."""
    if func is _TENSOR_CPU:
        return "cpu"
    if func is torch.Tensor.type_as:
        return args[1] if len(args) > 1 else kwargs.get("other")
    if kwargs.get("device") is not None:
        return kwargs["device"]
    return next((a for a in args[1:] if isinstance(a, (torch.device, str, int, torch.Tensor))), None)


class HostTensor(torch.Tensor):
    """A tensor a GPU run would hold in CPU memory (when `made_at` says so)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        func = getattr(func, "__rtp_original__", func)   # Tensor.cpu/.to, watched (_mover)
        name = getattr(func, "__name__", "")
        with torch._C.DisableTorchFunctionSubclass():
            if name in ("__get__", "__set__") or func is torch._has_compatible_shallow_copy_type:
                out = func(*args, **kwargs)   # attributes: `param.data = moved` is how Module.to moves
                if name == "__set__" and made_at(args[0]) is None:
                    _unhost(args[0])
                return out
            if func in _MOVES:
                return _move(func, args, kwargs)
            if func in _PLACED_FUNCS and kwargs.get("device") is not None:
                return func(*args, **kwargs)    # where device= says (_placed decides)
            if func is torch.Tensor.__deepcopy__:
                return _deepcopy(args[0], args[1] if len(args) > 1 else kwargs["memo"])
            if func in _MIXING_ALLOWED:
                out, src = func(*args, **kwargs), made_at(args[0])
                return _hosted(out, src) if src is not None and out is not args[0] else out
            inputs = [t for a in (*args, *kwargs.values()) for t in _tensors_in(a)]
            marks = [(t, made_at(t)) for t in inputs]
            host = [(t, w) for t, w in marks if w is not None]
            on_device = [t for t, w in marks if w is None and t.numel() > 0]
            if host:
                big = [(t, w) for t, w in host if t.dim() > 0 and t.numel() > 0]
                device_big = [t for t in on_device if t.dim() > 0]
                if big and device_big:
                    (t, where), d = big[0], device_big[0]
                    raise HostTensorError(
                        f"{_name(func)} mixes {_describe(t)} made without a device (at {where}) "
                        f"with {_describe(d)} on the device: {RULE} (a GPU run keeps the first "
                        f"in CPU memory, and CUDA refuses the mix)")
            out = func(*args, **kwargs)
        if host and not on_device and out is not None:
            return _hosted(out, host[0][1])
        return out


def _move(func, args, kwargs):
    """Where .to() / .type_as() / .cpu() leave the result: on a CPU run a move between
    "devices" may return the tensor itself, so a copy stands for the moved tensor."""
    out, target, src = func(*args, **kwargs), _move_target(func, args, kwargs), made_at(args[0])
    to_host = (src is not None if target is None else
               func is _TENSOR_CPU or _host_device(target)
               or (isinstance(target, torch.Tensor) and made_at(target) is not None))
    same = _storage(out) is _storage(args[0])
    if to_host:
        return _host(out.clone() if same and src is None else out, src or commlog.caller())
    return out.clone() if src is not None and same else out   # host -> device: a device copy


def _deepcopy(t: torch.Tensor, memo: dict) -> torch.Tensor:
    """copy.deepcopy of a HostTensor: where it lives, a parameter if it was one, its attributes.
    (torch's own asks new_empty for the subclass, which a disabled __torch_function__ cannot give.)"""
    if id(t) in memo:
        return memo[id(t)]
    with torch.no_grad():
        new = t.detach().clone().requires_grad_(t.requires_grad)
    src = made_at(t)
    if src is not None:
        new = _host(new, src)
    elif getattr(t, "_is_param", False):
        new = nn.Parameter(new, t.requires_grad)
    memo[id(t)] = new
    for key, value in t.__dict__.items():
        setattr(new, key, copy.deepcopy(value, memo))
    return new


def _code_under_test_made_it() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename.startswith(_CODE_DIRS):
            return True
        f = f.f_back
    return False


_CODE_DIRS: tuple = ()


def _context_is_host() -> bool | None:
    """Whether the innermost device context (`with torch.device(d):`,
    torch.set_default_device(d)) makes host tensors: True where d was the literal "cpu",
    which a GPU run keeps on the host; a device given as an object (x.device) is the data's
    own. None when no context is active."""
    from torch.utils._device import DeviceContext
    modes = [m for m in torch.overrides._get_current_function_mode_stack()
             if isinstance(m, DeviceContext)]
    return getattr(modes[-1], "_rtp_host", False) if modes else None


def _factory(fn, always_host: bool = False):
    @functools.wraps(fn)
    def factory(*args, **kwargs):
        out = fn(*args, **kwargs)
        device = kwargs.get("device")
        host = always_host or (_host_device(device) if device is not None
                               else _context_is_host() is not False)
        if host and type(out) in (torch.Tensor, nn.Parameter) \
                and not any(True for a in args for _ in _tensors_in(a)) \
                and _code_under_test_made_it():
            return _host(out, commlog.caller())
        return out
    factory.__rtp_original__ = fn
    return factory


def _mover(fn, to_host):
    """Tensor.cpu / Tensor.to of a device tensor: what the code under test moves to the host
    is a host tensor (a copy, where a CPU run returns the tensor itself)."""
    @functools.wraps(fn)
    def move(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        if isinstance(out, torch.Tensor) and type(self) is not HostTensor \
                and to_host(args, kwargs) and _code_under_test_made_it():
            return _host(out.clone() if _storage(out) is _storage(self) else out,
                         commlog.caller())
        return out
    move.__rtp_original__ = fn
    return move


def _placed(fn):
    """Tensor.new_empty / new_zeros ..., torch.empty_like / zeros_like ...: without device=
    they follow their input's device, as on a GPU (a host tensor's are host: HostTensor);
    given the literal "cpu", a host tensor."""
    @functools.wraps(fn)
    def make(*args, **kwargs):
        out = fn(*args, **kwargs)
        device = kwargs.get("device")
        if device is not None and isinstance(out, torch.Tensor) and made_at(out) is None \
                and _code_under_test_made_it() and _host_device(device):
            return _host(out, commlog.caller())
        return out
    make.__rtp_original__ = fn
    return make


def _to_cpu(args, kwargs) -> bool:
    target = kwargs.get("device", args[0] if args else None)
    return _host_device(target)


def _context_init():
    """DeviceContext.__init__ that remembers whether its device was the literal "cpu"."""
    from torch.utils._device import DeviceContext
    init = DeviceContext.__init__

    def __init__(self, device):
        init(self, device)
        self._rtp_host = _host_device(device)
    return DeviceContext, init, __init__


# NCCL rule 'host tensors' (DESIGN.md)
def refuse_host_tensors(kind: str, args, kwargs) -> None:
    """commlog's guard: NCCL takes device tensors only."""
    if not _HOST:
        return
    for a in (*args, *kwargs.values()):
        items = [a] if isinstance(a, torch.Tensor) else \
            [getattr(op, "tensor", op) for op in a] if isinstance(a, (list, tuple)) else []
        for t in items:
            where = made_at(t)
            if where is not None:
                raise HostTensorError(
                    f"{kind} was given {_describe(t)} made without a device (at {where}): "
                    f"{RULE} (a GPU run keeps it in CPU memory, and NCCL refuses it)")


@contextlib.contextmanager
def host_placement(code_dirs=("",)):
    """While inside, tensors that code in `code_dirs` (paths or path prefixes; default: any
    code) makes without a device are host tensors, refused where a GPU run would refuse them."""
    global _CODE_DIRS
    saved = {f.__name__: getattr(torch, f.__name__) for f in (*FACTORIES, *HOST_ONLY)}
    saved_dirs, _CODE_DIRS = _CODE_DIRS, tuple(str(d) for d in code_dirs)
    for name, fn in saved.items():
        setattr(torch, name, _factory(getattr(fn, "__rtp_original__", fn),
                                      always_host=getattr(fn, "__rtp_original__", fn) in HOST_ONLY))
    moves = {"cpu": (torch.Tensor.cpu, lambda args, kwargs: True), "to": (torch.Tensor.to, _to_cpu)}
    for name, (fn, to_host) in moves.items():
        setattr(torch.Tensor, name, _mover(getattr(fn, "__rtp_original__", fn), to_host))
    placed = [(holder, name, getattr(holder, name)) for holder, name in PLACED]
    for holder, name, fn in placed:
        setattr(holder, name, _placed(getattr(fn, "__rtp_original__", fn)))
    context_cls, init, watched_init = _context_init()
    context_cls.__init__ = watched_init
    guard, commlog.STATE.guard = commlog.STATE.guard, refuse_host_tensors
    try:
        yield
    finally:
        _CODE_DIRS = saved_dirs
        for name, fn in saved.items():
            setattr(torch, name, fn)
        for name, (fn, _) in moves.items():
            setattr(torch.Tensor, name, fn)
        for holder, name, fn in placed:
            setattr(holder, name, fn)
        context_cls.__init__ = init
        commlog.STATE.guard = guard


@contextlib.contextmanager
def nccl_semantics(code_dirs=("",), every_tensor: bool = False):
    """A gloo rank that behaves as an NCCL rank where the two differ (runtime/nccl); with
    `every_tensor` (RTP_COURSE_EMULATE=nccl), host tensors refused too (host_placement)."""
    commlog.install(code_dirs)
    before, commlog.STATE.nccl_rules = commlog.STATE.nccl_rules, True
    try:
        with host_placement(code_dirs) if every_tensor else contextlib.nullcontext():
            yield
    finally:
        commlog.STATE.nccl_rules = before
