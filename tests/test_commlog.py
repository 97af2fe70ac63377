"""The communication log sees every torch.distributed call a student can make (torch 2.13 and
2.14; an older torch lacks some names, and the probes skip what it lacks).

A function that communicates but is not recorded would let a check's communication rule
reject correct code ("expected an all_gather, seen: none") or miss a forbidden call."""
import dis
import importlib
import inspect
import re

import types

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.distributed._functional_collectives as funcol

from rtp_course.runtime import commlog
from rtp_course.runtime.launcher import launch

COMMUNICATES = re.compile(r"reduce|gather|scatter|broadcast|send|recv|barrier|all_to_all|permute|p2p")
# Public names that match the pattern but move no data themselves.
NOT_COMMUNICATION = {"P2POp"}
FUNCOL_MODULES = ("torch.distributed._functional_collectives",
                  "torch.distributed._functional_collectives_impl")


def _public(module):
    return {n for n in dir(module) if callable(getattr(module, n)) and COMMUNICATES.search(n)
            and not inspect.isclass(getattr(module, n)) and n not in NOT_COMMUNICATION}


def test_every_communicating_function_of_torch_distributed_is_recorded():
    missing = sorted(n for n in _public(dist) if n not in commlog.C10D and n not in commlog.INDIRECT)
    assert not missing, (f"torch.distributed functions the checker does not record: {missing}; "
                         f"add them to commlog.C10D (or INDIRECT, saying how they are seen)")


def _issuing_ops():
    """The ops of torch's functional-collective namespaces that move data (not wait_tensor,
    which waits for another's)."""
    return {n.split("::")[1] for n in torch._C._dispatch_get_all_op_names()
            if n.split("::")[0] in ("_c10d_functional", "c10d_functional",
                                    "_c10d_functional_autograd")
            and not n.split("::")[1].startswith("_") and not n.endswith("::wait_tensor")}


def _communicates(fn, ops, seen):
    """Whether `fn` issues an op that communicates, in its own code (nested functions
    included) or through a function of funcol's modules it calls by its global name; or is
    one of torch.distributed's communicating functions under another name."""
    fn = inspect.unwrap(fn)
    if not inspect.isfunction(fn) or fn in seen:
        return False
    seen.add(fn)
    if fn.__module__ == c10d.__name__:
        return fn.__name__ in _public(dist) or fn.__name__ in commlog.C10D
    if fn.__module__ not in FUNCOL_MODULES:
        return False
    codes, loaded = [fn.__code__], set()
    while codes:
        code = codes.pop()
        for ins in dis.get_instructions(code):
            if inspect.iscode(ins.argval):
                codes.append(ins.argval)
            elif isinstance(ins.argval, str):
                loaded.add(ins.argval)
    if loaded & {"_c10d_functional", "c10d_functional", "_c10d_functional_autograd"} \
            and loaded & ops:
        return True
    return any(_communicates(fn.__globals__[n], ops, seen) for n in loaded
               if n in fn.__globals__ and fn.__globals__[n] is not fn)


def _funcol_communicating():
    """{(module, name)}: every function of funcol's modules that communicates, found by what
    it does (public ones of funcol, any of its implementation module)."""
    ops, found = _issuing_ops(), set()
    for module_name in FUNCOL_MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if name.startswith("__") or (name.startswith("_") and module is funcol):
                continue
            if _communicates(value, ops, set()):
                found.add((module_name, name))
    return found


def test_every_functional_collective_is_named_with_its_operation():
    """A function of funcol that communicates (its autograd backwards and batches included)
    has its operation named in commlog.FUNCOL: install() wraps every one all the same, but
    with an operation guessed from the op it issues."""
    found = _funcol_communicating()
    assert ("torch.distributed._functional_collectives", "all_reduce_backward") in found
    assert ("torch.distributed._functional_collectives", "batch_p2p_ops_inplace") in found
    assert ("torch.distributed._functional_collectives", "wait_tensor") not in found
    missing = sorted(n for m, n in found if m == FUNCOL_MODULES[0] and n not in commlog.FUNCOL
                     and n != "backend_impl")      # a loop's variable, the impl's function
    assert not missing, f"functional collectives commlog.FUNCOL does not name: {missing}"
    lacks = set(commlog.FUNCOL) - set(dir(funcol)) - commlog.NEWER_TORCH
    assert not lacks, f"FUNCOL names what torch lacks (not a newer torch's names): {lacks}"


def unwrapped_after_install(rank, world_size):
    from rtp_course.runtime.commlog import wrap
    commlog.install()
    ops = _issuing_ops()
    formulas = [f"autograd formula {info._backward_fn.__name__}"
                for info in wrap._autograd_formulas()
                if _communicates(info._backward_fn, ops, set())
                and not getattr(info._backward_fn, "__rtp_wrapped__", False)]
    return formulas + sorted(
        f"{m}.{n}" for m, n in _funcol_communicating()
        if not getattr(getattr(importlib.import_module(m), n), "__rtp_wrapped__", False))


def test_every_communicating_function_of_funcols_modules_is_wrapped():
    """Every function of funcol's modules that communicates, found by what it does (not by its
    name), is commlog's wrapper once installed: none reaches the wire unlogged."""
    unwrapped = launch(unwrapped_after_install, 1, timeout=120)[0]
    assert not unwrapped, f"functions of funcol's modules that communicate unlogged: {unwrapped}"


def test_what_an_older_torch_lacks_is_named_as_newer():
    lacks = {n for n in commlog.C10D if not hasattr(dist, n) and not hasattr(c10d, n)}
    assert lacks <= commlog.NEWER_TORCH, lacks - commlog.NEWER_TORCH


NEWER = ("all_gather_single", "reduce_scatter_single")   # torch 2.13; an older one lacks them


def every_api(rank, world_size):
    """One call of each way of communicating; the events the log saw."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    commlog.install()
    commlog.reset("probe")
    x = torch.full((4,), float(rank + 1))
    dist.all_reduce(x.clone())
    dist.all_reduce_coalesced([x.clone(), x.clone()])
    for name in NEWER:            # torch 2.13's names; an older torch has only the others
        if hasattr(dist, name):
            getattr(dist, name)(x.new_empty(4 * world_size if "gather" in name else 4 // world_size),
                                x.clone())
    dist.all_gather_into_tensor(x.new_empty(4 * world_size), x)
    dist.all_to_all_single(x.new_empty(4), x.clone())
    dist.broadcast_object_list([rank], src=0)
    dist.all_gather_object([None] * world_size, rank)
    dist.barrier()                 # (monitored_barrier: refused as NCCL refuses it)
    ops = [dist.P2POp(dist.isend, x.clone(), (rank + 1) % world_size),
           dist.P2POp(dist.irecv, x.new_empty(4), (rank - 1) % world_size)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))
    funcol.wait_tensor(funcol.all_gather_tensor(x, 0, dist.group.WORLD))
    ctx = types.SimpleNamespace(group_name=dist.group.WORLD.group_name, reduce_op="sum")
    funcol.wait_tensor(funcol.all_reduce_backward(ctx, x.clone())[0])
    leaf = x.clone().requires_grad_()      # autograd's backward of funcol's all_reduce
    funcol.wait_tensor(funcol.all_reduce(leaf, "sum", dist.group.WORLD)).sum().backward()
    for t in funcol.batch_p2p_ops_inplace(["isend", "irecv"],
                                          [(rank + 1) % world_size, (rank - 1) % world_size],
                                          [0, 0], [x.clone(), x.new_empty(4)],
                                          dist.group.WORLD.group_name):
        funcol.wait_tensor(t)
    mesh = init_device_mesh("cpu", (world_size,))
    dist.all_reduce(x.clone(), group=mesh.get_group())
    distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()
    return [(e.kind, e.family, e.nbytes) for e in commlog.events()]


def test_each_way_of_communicating_is_one_event_of_its_operation():
    events = launch(every_api, 2, timeout=120)[0]
    kinds = [k for k, _, _ in events]
    fam = {k: f for k, f, _ in events}
    expected = [("all_reduce", "all_reduce"), ("all_reduce_coalesced", "all_reduce"),
                ("all_gather_single", "all_gather"), ("all_gather_into_tensor", "all_gather"),
                ("reduce_scatter_single", "reduce_scatter"), ("all_to_all_single", "all_to_all"),
                ("broadcast_object_list", "broadcast"), ("all_gather_object", "all_gather"),
                ("barrier", "barrier"), ("isend", "isend"), ("irecv", "irecv"),
                ("funcol.all_reduce", "all_reduce"), ("funcol.all_gather_tensor", "all_gather")]
    for name, family in expected:
        if name in NEWER and not hasattr(dist, name):
            continue
        assert fam.get(name) == family, (name, events)
    # one event per call made by the student, none for the calls torch makes inside them
    assert kinds.count("all_reduce") == 2, events               # plain, and on the mesh's group
    assert kinds.count("isend") == 1 and kinds.count("irecv") == 1, events
    assert any(f == "all_gather" and k.startswith("funcol.") for k, f, _ in events[-3:]), events  # DTensor
    assert dict((k, n) for k, _, n in events)["all_gather_into_tensor"] == 16, events
    # funcol's autograd backwards and its batch of sends and receives, as their operations
    assert events.count(("funcol.all_reduce_backward", "all_reduce", 16)) == 2, events
    batch = [(f, n) for k, f, n in events if k == "funcol.batch_p2p_ops_inplace"]
    assert batch == [("isend", 16), ("irecv", 16)], events
