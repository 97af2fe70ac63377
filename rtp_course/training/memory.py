"""Memory accounting: where the bytes of training go.

Two halves:
* measuring real objects: ``param_bytes``, ``grad_bytes``, ``optimizer_state_bytes``,
  ``activation_bytes`` (tensors saved for backward), ``held_bytes`` (every tensor an object
  keeps alive), ``kept_bytes`` (every storage a process keeps alive beyond what it may:
  the checker's memory rule), ``measure``;
* back-of-envelope arithmetic for notebook 00: ``training_memory``,
  ``transformer_activation_bytes``, ``sharded`` (per-rank bytes under DDP,
  ZeRO, FSDP, TP and RTP) and ``human_bytes``.
"""
from dataclasses import asdict, dataclass
from itertools import compress, filterfalse

import torch
from torch import nn

from rtp_course.runtime import asked


def tensor_bytes(t) -> int:
    """Bytes of the elements of ``t`` (0 for None)."""
    return 0 if t is None else t.numel() * t.element_size()


def held_bytes(root) -> int:
    """Bytes of the storages of every tensor reachable from `root` through attributes, dicts,
    lists, tuples and sets (each storage once, whole: a view keeps its base alive). What an
    object keeps alive: parameters and buffers, and any copy kept in a plain attribute."""
    return sum(storages_of(root).values())


def tensors_of(root):
    """Every tensor reachable from `root` through attributes, dicts, lists, tuples and sets."""
    import types
    skip = (type, types.ModuleType, types.FunctionType, types.MethodType,
            types.BuiltinFunctionType)
    seen, stack = set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if issubclass(type(obj), torch.Tensor):    # its real type: no __class__ is asked
            yield obj
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(getattr(obj, "__dict__", None), dict):
            stack.extend(vars(obj).values())


def storages_of(root) -> dict:
    """{storage address: bytes} of every tensor reachable from `root` (see held_bytes)."""
    storages = {}
    for t in tensors_of(root):
        _add_storage(storages, t)
    return storages


def live_storages(roots=(), arrays=True) -> dict:
    """{storage address: bytes} of every tensor and every storage object alive in this process,
    wherever it is kept: an attribute, a buffer, a global, a closure, a cache (the garbage
    collector tracks every tensor object and every torch.UntypedStorage / TypedStorage, which
    hold bytes with no tensor: `full.untyped_storage()` kept alone keeps all of `full`). What a
    rank holds, whatever holds it. Also every tensor and storage reachable from `roots`
    (`reachable_storages`): what an object holds even where the collector does not list it
    (gc.freeze() takes objects out of gc.get_objects()). And every numpy array alive, by the
    memory it owns (full.numpy().copy() keeps a weight's bytes outside torch): the collector
    does not track arrays, so they are found among what the objects it tracks refer to
    (numpy_arrays). Sizes and addresses are torch's and numpy's own (runtime/asked): no
    object's method is asked."""
    import gc
    storages = {}
    tensor, untyped, typed = torch.Tensor, torch.UntypedStorage, torch.TypedStorage
    objects = gc.get_objects()
    # their real types (not isinstance: no object's __class__ is asked), sorted out at C speed
    kinds = set(map(type, objects))
    tensors = {c for c in kinds if issubclass(c, tensor)}
    storage_objects = {c for c in kinds if issubclass(c, (untyped, typed))}
    for obj in compress(objects, map(tensors.__contains__, map(type, objects))):
        _add_storage(storages, obj)
    for obj in compress(objects, map(storage_objects.__contains__, map(type, objects))):
        _add_storage_object(storages, obj)
    for array in numpy_arrays(objects) if arrays else ():
        _add_array(storages, array)
    del objects
    for ptr, nbytes in reachable_storages(roots).items():
        storages[ptr] = max(storages.get(ptr, 0), nbytes)
    return storages


def reachable_storages(roots) -> dict:
    """{storage address: bytes} of every tensor and storage object reachable from `roots`
    through what the garbage collector sees each object refer to (gc.get_referents: an
    object's attributes and slots, the items of a dict, list, tuple or set, a cell's
    contents, a bound method's object, a partial's arguments), and a function's closure,
    defaults and __dict__ (not its globals). Types and modules are not entered. Nothing of the
    objects walked runs: no attribute, __class__ or method of theirs is asked."""
    import gc
    import types
    skip = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, str, bytes,
            int, float, bool, type(None))
    tensor, untyped, typed = torch.Tensor, torch.UntypedStorage, torch.TypedStorage
    ndarray = _ndarray()
    storages, seen, stack = {}, set(), [roots]
    while stack:
        obj = stack.pop()
        cls = type(obj)
        if id(obj) in seen or issubclass(cls, skip):
            continue
        seen.add(id(obj))
        if issubclass(cls, tensor):
            _add_storage(storages, obj)
        elif issubclass(cls, (untyped, typed)):
            _add_storage_object(storages, obj)
            continue
        elif ndarray is not None and issubclass(cls, ndarray):
            _add_array(storages, obj)
            continue
        if cls is types.FunctionType:     # its closure and defaults, not its module's globals
            stack.extend(obj.__closure__ or ())
            stack.extend(obj.__defaults__ or ())
            stack.extend((obj.__kwdefaults__ or {}).values())
            stack.append(obj.__dict__)
        else:
            stack.extend(gc.get_referents(obj))
    return storages


def kept_bytes(before: dict, allowed, roots=()) -> int:
    """Bytes of the tensor storages alive now that were not alive `before` (live_storages()),
    less the bytes that the tensors reachable from `allowed` span in them. A storage counts
    whatever keeps it: a tensor, or a storage object alone (a torch.UntypedStorage or
    TypedStorage kept in an attribute, a closure, a container), found by the garbage
    collector and by a walk from `roots` (the model: live_storages). A tensor allows
    its own elements, not the whole storage it views: a parameter made as a view of a larger
    tensor (nn.Parameter(w[a:b]), p.data = w[a:b]) keeps all of w alive, and the rest of w
    counts. Several allowed views of one storage (the pieces of a flat buffer) allow what
    they cover together."""
    import gc
    gc.collect()                     # a cycle no longer referenced is not kept
    spans: dict = {}
    for t in tensors_of(allowed):
        try:     # torch's answers (runtime/asked): a subclass's untyped_storage() may lie
            ptr, size = asked.storage_span(t)[0], asked.element_size(t)
            if ptr and asked.numel(t):
                spans.setdefault(ptr, []).extend(_elements(t, size))
        except Exception:  # noqa: BLE001 - a tensor without storage (sparse, meta, a subclass)
            continue
    code = code_storages()       # the code's own, alive before or not
    kept = 0
    for ptr, nbytes in live_storages(roots).items():
        if before.get(ptr) != nbytes or ptr in code:
            kept += max(0, nbytes - _covered(spans.get(ptr, ())))
    return kept


class _Code:
    """The code under test, as the memory rule knows it (checker/worker.py tells it)."""
    package: str | None = None   # its package's name in sys.modules
    modules: list = []           # its modules, as imported before any check
    imported: list = []          # weak references to the storages its import made


def before_code_import(package: str) -> dict:
    """Called before the code under test is imported: the torch storages alive then."""
    _Code.package = package
    return live_storages(arrays=False)


def after_code_import(before: dict) -> None:
    """Called once the code under test is imported: the storages its import made and kept
    (a buffer allocated at import and filled later) count as kept wherever they are, though
    alive when a check takes its `before`. Followed by weak reference (torch keeps a
    storage's Python object as long as the storage): one freed since is not confused with
    another at its address."""
    import gc
    import weakref
    made = []
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):
            try:
                ptr, _ = asked.storage_span(obj)
                if ptr and ptr not in before:
                    made.append(weakref.ref(asked.storage(obj)))
            except Exception:  # noqa: BLE001 - a tensor without storage
                continue
    _Code.imported = made
    _Code.modules = _code_modules()


def _code_modules() -> list:
    import sys
    if _Code.package is None:
        return []
    prefix = _Code.package + "."
    return [m for name, m in list(sys.modules.items())
            if name == _Code.package or name.startswith(prefix)]


def code_storages() -> dict:
    """{storage address: bytes} the code under test holds of its own: what its import made
    and still lives, and what its modules reach now (their globals, the classes they define,
    the closures and defaults of their functions). Counted as kept by kept_bytes even where
    alive before a check began: a buffer made at import, or kept in a global by an earlier
    check, and filled with a full weight later."""
    import types
    storages = {}
    for ref in _Code.imported:
        s = ref()
        if s is not None:
            _add_storage_object(storages, s)
    roots, seen = [], set()
    for m in {id(m): m for m in _Code.modules + _code_modules()}.values():
        namespace = _module_dict(m)
        roots.append(namespace)
        for value in list(namespace.values()):
            if issubclass(type(value), type) and id(value) not in seen \
                    and type.__dict__["__module__"].__get__(value) == _module_name(m):
                seen.add(id(value))
                roots.append(dict(type.__dict__["__dict__"].__get__(value)))
            elif type(value) is types.FunctionType:
                roots.append(value)
    for ptr, nbytes in reachable_storages(roots).items():
        storages[ptr] = max(storages.get(ptr, 0), nbytes)
    return storages


def _module_dict(m) -> dict:
    import types
    try:
        return types.ModuleType.__dict__["__dict__"].__get__(m)
    except Exception:  # noqa: BLE001 - not a module
        return {}


def _module_name(m) -> str | None:
    return _module_dict(m).get("__name__")


def _elements(t: torch.Tensor, size: int, most: int = 100_000) -> list:
    """The byte spans of a storage that `t`'s elements occupy: one per contiguous run (a
    column slice w[:, a:b] holds a run per row, not the gaps between them)."""
    shape, stride, start = asked.shape(t), asked.stride(t), asked.storage_offset(t)
    dims = [(n, st) for n, st in zip(shape, stride) if n > 1]
    run = 1
    while dims and dims[-1][1] == run:      # the innermost dimensions laid out in one run
        run *= dims.pop()[0]
    offsets = [start]
    for n, st in dims:
        offsets = [o + i * st for o in offsets for i in range(n)]
        if len(offsets) > most:             # too many runs to list: its extent, first to last
            last = start + sum((n - 1) * st for n, st in zip(shape, stride))
            return [(start * size, (last + 1) * size)]
    return [(o * size, (o + run) * size) for o in offsets]


def _covered(spans) -> int:
    """Bytes covered by the union of [start, stop) spans."""
    total, end = 0, 0
    for a, b in sorted(spans):
        a = max(a, end)
        if b > a:
            total, end = total + b - a, b
    return total


def _add_storage_object(storages: dict, s) -> None:
    """Add a torch.UntypedStorage, or the untyped storage of a TypedStorage (asked of torch's
    StorageBase: a subclass's nbytes() may lie)."""
    try:
        ptr, size = asked.storage_object_span(s)
    except Exception:  # noqa: BLE001 - a storage without data (meta) or a broken subclass
        return
    if ptr:
        storages[ptr] = max(storages.get(ptr, 0), size)


def _add_storage(storages: dict, t: torch.Tensor) -> None:
    """Add the storage of `t`, as torch has it (runtime/asked: the object's own
    untyped_storage() may answer with an empty one)."""
    try:
        ptr, size = asked.storage_span(t)
    except Exception:  # noqa: BLE001 - a tensor without storage (sparse, meta, a subclass)
        return
    if ptr:
        storages[ptr] = max(storages.get(ptr, 0), size)


def _ndarray():
    """numpy's ndarray, if numpy was imported (nothing to count otherwise)."""
    import sys
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "ndarray", None)


def numpy_arrays(objects) -> list:
    """The numpy arrays that `objects` (the collector's) refer to, directly or through
    containers the collector does not track (a tuple or dict of untracked objects only): an
    array is never tracked itself, whatever holds it is (a cell, a list, an attribute's dict)."""
    import gc
    ndarray = _ndarray()
    if ndarray is None:
        return []
    arrays, classes = {ndarray}, [ndarray]
    while classes:                            # every subclass of ndarray, the code's own too
        for c in type.__subclasses__(classes.pop()):
            if c not in arrays:
                arrays.add(c)
                classes.append(c)
    plain = {tuple, dict}                     # what the collector may leave untracked
    wanted = arrays | plain
    found, seen = [], set()
    refs = gc.get_referents(*objects)
    while refs:
        refs = list(compress(refs, map(wanted.__contains__, map(type, refs))))
        found.extend(compress(refs, map(arrays.__contains__, map(type, refs))))
        untracked = {id(o): o for o in filterfalse(
            gc.is_tracked, compress(refs, map(plain.__contains__, map(type, refs))))
            if id(o) not in seen}
        seen.update(untracked)
        refs = gc.get_referents(*untracked.values())
    return found


def _add_array(storages: dict, a) -> None:
    """Add the memory a numpy array holds: that of the array at the root of its chain of
    views (numpy's own descriptors: a subclass's nbytes may lie). An array over a torch
    tensor's memory (t.numpy()) is that tensor's storage, counted as such."""
    import numpy
    nd = numpy.ndarray
    base_of, nbytes_of = nd.base.__get__, nd.nbytes.__get__
    try:
        root, base = a, base_of(a)
        for _ in range(1000):
            if not issubclass(type(base), nd):
                break
            root, base = base, base_of(base)
        if issubclass(type(base), torch.Tensor):
            _add_storage(storages, base)
            return
        ptr = nd.__array_interface__.__get__(root)["data"][0]
        size = nbytes_of(root)
    except Exception:  # noqa: BLE001 - an array numpy cannot describe
        return
    if ptr:
        storages[ptr] = max(storages.get(ptr, 0), size)


def param_bytes(module: nn.Module) -> int:
    """Bytes of the parameters (a parameter shared by two layers counts once)."""
    return sum(tensor_bytes(p) for p in module.parameters())


def grad_bytes(module: nn.Module) -> int:
    """Bytes of the ``.grad`` tensors that exist now (None before the first backward)."""
    return sum(tensor_bytes(p.grad) for p in module.parameters())


def buffer_bytes(module: nn.Module) -> int:
    """Bytes of the registered buffers (running stats, positional tables...)."""
    return sum(tensor_bytes(b) for b in module.buffers())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer, include_scalars: bool = False) -> int:
    """Bytes of the tensors an optimizer keeps per parameter (Adam: exp_avg, exp_avg_sq).

    0-dim bookkeeping tensors such as Adam's ``step`` are left out unless
    ``include_scalars``. States appear lazily: 0 before the first ``step()``.
    """
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and (include_scalars or value.dim() > 0):
                total += tensor_bytes(value)
    return total


def activation_bytes(fn, *args, **kwargs) -> int:
    """Bytes of the tensors autograd saves for backward while running ``fn(*args)``.

    Each storage counts once (many ops save the same tensor, or views of it).
    Parameters are not activations: saved tensors that are, or view, a leaf
    tensor requiring grad are skipped. Under ``torch.no_grad()`` nothing is saved.
    """
    seen = {}

    def pack(t):
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            storage = t.untyped_storage()
            seen[(t.device, storage.data_ptr())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args, **kwargs)
    return sum(seen.values())


@dataclass
class MemoryBreakdown:
    """Bytes by category. Reads as attributes (``b.optimizer``) or keys (``b["optimizer"]``).

    ``communication`` is for transient buffers of a parallel strategy (a
    gathered layer, an in-flight shard).
    """
    parameters: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    buffers: int = 0
    communication: int = 0

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def as_dict(self) -> dict:
        return {**asdict(self), "total": self.total}

    def __getitem__(self, key):
        return self.as_dict()[key]


def measure(module: nn.Module, optimizer=None) -> MemoryBreakdown:
    """What ``module`` (and ``optimizer``) hold right now. Activations are not
    held between steps: measure them with ``activation_bytes``."""
    return MemoryBreakdown(
        parameters=param_bytes(module), gradients=grad_bytes(module),
        optimizer=0 if optimizer is None else optimizer_state_bytes(optimizer),
        buffers=buffer_bytes(module))


# ---------------------------------------------------------------- arithmetic

OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "sgd_momentum": 1, "adagrad": 1,
                    "adam": 2, "adamw": 2}


def training_memory(num_params, param_dtype_bytes: int = 2, grad_dtype_bytes: int = 2,
                    optimizer: str = "adam", master_weights: bool = True,
                    state_dtype_bytes: int = 4) -> MemoryBreakdown:
    """Bytes to train ``num_params`` parameters, before activations.

    parameters = N * param_dtype_bytes; gradients = N * grad_dtype_bytes;
    optimizer = N * states * state_dtype_bytes (Adam: 2 states, momentum and
    variance, kept in fp32), plus an fp32 master copy of the weights (N * 4)
    when ``master_weights`` and the parameters are below 32 bits (mixed precision).
    Mixed-precision Adam: 2 + 2 + (8 + 4) = 16 bytes per parameter.
    """
    n = int(num_params)
    states = OPTIMIZER_STATES[optimizer.lower()]
    master = 4 * n if master_weights and param_dtype_bytes < 4 else 0
    return MemoryBreakdown(parameters=n * param_dtype_bytes, gradients=n * grad_dtype_bytes,
                           optimizer=n * states * state_dtype_bytes + master)


def transformer_activation_bytes(seq_len: int, batch: int, hidden: int, num_layers: int,
                                 num_heads: int, bytes_per_value: int = 2,
                                 tensor_parallel: int = 1) -> int:
    """Activations saved by a GPT-style transformer (Korthikanti et al. 2022).

    Per layer, with 16-bit activations and 1-byte dropout masks:
        s*b*h*(34 + 5*a*s/h) bytes
    (34: the inputs of the linear layers, layer norms, GELU and dropouts;
    5*a*s/h: the a attention score matrices of s*s values, softmax and mask).
    With Megatron tensor parallelism over t ranks (no sequence parallelism)
    each rank keeps s*b*h*(10 + 24/t + 5*a*s/(h*t)). Other widths scale the
    whole estimate by bytes_per_value / 2. Embeddings and the output layer
    are not counted.
    """
    s, b, h, a, t = seq_len, batch, hidden, num_heads, tensor_parallel
    per_layer = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    return round(num_layers * per_layer * bytes_per_value / 2)


STRATEGIES = ("ddp", "zero1", "zero2", "fsdp", "tp", "rtp")


def sharded(breakdown, world_size: int, strategy: str,
            largest_layer_bytes: int = 0) -> MemoryBreakdown:
    """Per-rank bytes when training the model of ``breakdown`` on ``world_size`` ranks.

    ``breakdown``: a ``MemoryBreakdown`` or a dict with the same keys.

    Assumptions (steady state, evenly divisible shapes, N = world_size):
    * ddp: every rank holds everything.
    * zero1: optimizer states / N.      zero2: gradients and optimizer / N.
    * fsdp (ZeRO-3): parameters, gradients, optimizer / N, plus the one unit
      gathered at a time: ``largest_layer_bytes`` of parameters and as much of
      gradients, in ``communication``.
    * tp: parameters, gradients, optimizer / N (all layers split, Megatron style).
    * rtp: parameters, gradients, optimizer / N, plus one in-flight shard
      (``largest_layer_bytes / N`` of weights, and in backward as much of
      gradient accumulator) in ``communication``.
    * activations and buffers are left as given: the breakdown is one rank's
      view, with its own batch. For TP's split of activations use
      ``transformer_activation_bytes(..., tensor_parallel=N)``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    b = breakdown.as_dict() if isinstance(breakdown, MemoryBreakdown) else dict(breakdown)
    n = world_size

    def split(x):
        return -(-int(x) // n)   # ceil: an uneven shard rounds up

    params, grads, optim = b["parameters"], b["gradients"], b["optimizer"]
    comm = b.get("communication", 0)
    if strategy == "zero1":
        optim = split(optim)
    elif strategy == "zero2":
        grads, optim = split(grads), split(optim)
    elif strategy in ("fsdp", "tp", "rtp"):
        params, grads, optim = split(params), split(grads), split(optim)
        if strategy == "fsdp":
            comm += 2 * int(largest_layer_bytes)
        elif strategy == "rtp":
            comm += 2 * split(largest_layer_bytes)
    return MemoryBreakdown(parameters=params, gradients=grads, optimizer=optim,
                           activations=b.get("activations", 0), buffers=b.get("buffers", 0),
                           communication=comm)


def device_used_bytes(device) -> int | None:
    """Bytes in use on a GPU as the device sees them (torch.cuda.mem_get_info: total - free):
    the CUDA context, NCCL's buffers and every allocator's reserve, which tensor accounting
    and torch.cuda.max_memory_allocated leave out; every process on the device counts. None
    on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return int(total - free)


def human_bytes(n, binary: bool = False) -> str:
    """'10.8 TB' (decimal units, 1 KB = 1000 B) or '1.5 GiB' with ``binary``."""
    base, units = (1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]) if binary else \
        (1000, ["B", "KB", "MB", "GB", "TB", "PB"])
    value = float(n)
    for unit in units[:-1]:
        if abs(value) < base:
            break
        value /= base
    else:
        unit = units[-1]
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
